"""The ``conversations`` view: one row per Codex-style conversation (status Running/Quiet/Stalled,
restartable, box count, current job, pending steer, last sequence), folded like the chat views.

The job and the tool-call sequence are the reference's ``u64`` counters (a recovered transcript may carry a
sequence up to 2**64 - 1): their columns are ``ubigint`` (v2; v1 stored them as signed 64-bit integers, and
a conversation past 2**63 - 1 stopped the view)."""

from __future__ import annotations

from typing import Any, Iterable

from ledger.conversation import events as cev
from ledger.conversation.evolve import evolve
from ledger.conversation.queries import conversation_view_row
from projections.engine import (
    BIGINT, BOOLEAN, INTEGER, TEXT, TIMESTAMP, UBIGINT, Column, Projection, RowOp, Rows, Table, Upsert,
)
from projections.folding import StreamFold
from projections.erasure import ERASURE_TOPICS, is_erasure, prefetch, rederive

CONVERSATION_TOPICS = tuple(sorted(
    cls.TOPIC for cls in vars(cev).values()
    if isinstance(cls, type) and cls.__dict__.get("TOPIC", "").startswith("chat-ledger:conversation.")
    and hasattr(cls, "__dataclass_fields__")))


class ConversationsView(Projection):
    name = "conversations"
    streamwise = True  # a conversation's row is its own state's (tests/projections/test_streamwise.py)
    version = 2
    topics = CONVERSATION_TOPICS + ERASURE_TOPICS  # (erasures: ``projections.erasure``; same rows otherwise)
    tables = [Table("conversations", [
        Column("conversation_id", TEXT), Column("session", TEXT, False), Column("status", TEXT, False),
        Column("restartable", BOOLEAN, False), Column("stall_message", TEXT), Column("halted", BOOLEAN, False),
        Column("box_count", INTEGER, False), Column("queued_count", INTEGER, False), Column("current_job", UBIGINT),
        Column("pending_steer", BOOLEAN, False), Column("last_sequence", UBIGINT, False),
        Column("submitted", INTEGER, False), Column("version", BIGINT, False), Column("updated_at", TIMESTAMP, False),
    ], primary_key=["conversation_id"], indexes=[["status"]])]

    def __init__(self, app: Any) -> None:
        self.app = app
        self.fold = StreamFold(app, evolve, cev.ConversationStarted)

    def prepare(self, events: Any) -> None:
        prefetch(self.app, self.fold, events)

    def stream_done(self, stream_id: Any) -> None:
        self.fold.forget(stream_id.int)

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        if is_erasure(event):
            if self.position is not None:
                for stream in event.streams:
                    self.stream_done(stream)
            return rederive(self, self.app, event, self.position)
        state = self.fold.after(event, self.fold.before(event))
        row = {"conversation_id": str(event.originator_id), **conversation_view_row(state),
               "version": event.originator_version, "updated_at": event.timestamp}
        return [Upsert("conversations", row)]


def conversation_projections(app: Any) -> list[Projection]:
    return [ConversationsView(app)]
