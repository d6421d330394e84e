"""The chat views (docs/commands.md, "CLI"): tables ``chat_status``, ``unresolved_tool_calls`` and ``chat_queue`` of
one projection, ``chat_views``.

It folds each chat stream with the chat's own ``evolve`` (``projections.folding``) and, at the end of
each batch, writes the rows the pure row functions of ``ledger.chat.views`` give for each touched chat's
state after the batch: an upsert of what changed, a delete of what is gone. So the tables hold exactly
the rows computed from the replayed states (at every committed position). The row functions are pure and
give canonical values, so their rows are upserted as canonical (``Upsert.canonical``: not normalized
column by column on the write path; checked against normalization by every stream-wise build). The three tables share one
fold, one tracking position and one transaction per batch: an event is decoded and folded once, however
many views it changes, and the three views are always consistent with each other (a status row's
queue_length equals its queue rows).
"""

from __future__ import annotations

from typing import Any, Iterable

from ledger.chat import events as ev
from ledger.chat.evolve import evolve
from ledger.chat.state import unresolved_tool_calls
from ledger.chat.views import queue_row, status_values, unresolved_values, uuid_str
from projections.engine import Projection
from projections.erasure import ERASURE_TOPICS, is_erasure, prefetch, rederive
from projections.errors import ProjectionError
from projections.rowops import Delete, RowOp, Rows, Upsert
from projections.schema import BIGINT, BOOLEAN, INTEGER, JSON, TEXT, TIMESTAMP, Column, Table
from projections.folding import StreamFold

CHAT_TOPICS = tuple(sorted(cls.TOPIC for cls in vars(ev).values()
                           if isinstance(cls, type) and issubclass(cls, ev.ChatEvent) and cls.__dict__.get("TOPIC")))

STATUS, UNRESOLVED, QUEUE = "chat_status", "unresolved_tool_calls", "chat_queue"


class ChatViews(Projection):
    name = "chat_views"
    streamwise = True  # a chat's rows are its own state's (tests/projections/test_streamwise.py)
    version = 4  # v2: queue rows editing_since, reasoning_effort; status editing_queued_message_id;
    # v3: unresolved rows call_index (their order in the assistant message); v4: status title_source,
    # plan_mode, pinned_at, workspace_id, build_id, agent_id, shared, labels
    # + erasures: a chat whose content was erased has its rows rewritten (``projections.erasure``; no new version:
    # the rows of every chat without an erasure are the same)
    topics = CHAT_TOPICS + ERASURE_TOPICS
    tables = [
        Table(STATUS, [
            Column("chat_id", TEXT), Column("organization_id", TEXT, False), Column("owner_id", TEXT, False),
            Column("parent_chat_id", TEXT), Column("root_chat_id", TEXT, False), Column("title", TEXT, False),
            Column("status", TEXT, False), Column("execution_state", TEXT, False), Column("archived", BOOLEAN, False),
            Column("queue_length", INTEGER, False), Column("editing_queued_message_id", INTEGER),
            Column("last_error", JSON),
            Column("requires_action_deadline_at", TIMESTAMP), Column("compaction_requested_at", TIMESTAMP),
            Column("hook_allowed_tools", JSON), Column("model_config_id", TEXT), Column("turn_id", TEXT),
            Column("generation_attempt", INTEGER, False), Column("history_version", BIGINT, False),
            Column("worker_id", TEXT), Column("runner_id", TEXT), Column("message_count", INTEGER, False),
            Column("title_source", TEXT, False), Column("plan_mode", TEXT), Column("pinned_at", TIMESTAMP),
            Column("workspace_id", TEXT), Column("build_id", TEXT), Column("agent_id", TEXT),
            Column("shared", BOOLEAN, False), Column("labels", JSON, False),
            Column("version", BIGINT, False), Column("updated_at", TIMESTAMP, False),
        ], primary_key=["chat_id"], indexes=[["organization_id"], ["status"]]),
        Table(UNRESOLVED, [
            Column("chat_id", TEXT), Column("tool_call_id", TEXT), Column("assistant_message_id", INTEGER, False),
            Column("tool_name", TEXT, False), Column("kind", TEXT, False), Column("execution_id", TEXT),
            Column("args", JSON), Column("since", TIMESTAMP, False), Column("call_index", INTEGER, False),
        ], primary_key=["chat_id", "tool_call_id"]),
        Table(QUEUE, [
            Column("chat_id", TEXT), Column("queued_message_id", INTEGER), Column("position", BIGINT, False),
            Column("created_by", TEXT, False), Column("text", TEXT, False), Column("turn_id", TEXT, False),
            Column("hook_prefix", JSON, False), Column("hook_allowed_tools", JSON), Column("model_config_id", TEXT),
            Column("reasoning_effort", TEXT), Column("editing_since", TIMESTAMP),
        ], primary_key=["chat_id", "queued_message_id"]),
    ]

    def __init__(self, app: Any) -> None:
        self.app = app
        self.fold = StreamFold(app, evolve, ev.ChatCreated)
        # chat id -> [state after the batch so far, open-call signature and queue before the batch]
        self._touched: dict[int, list[Any]] = {}
        # chat id -> (stream version, open-call signature) as of the end of the last batch, so the
        # signature "before" a batch is not recomputed from the state.
        self._signatures: dict[int, tuple[int, Any]] = {}

    def prepare(self, events: Any) -> None:
        prefetch(self.app, self.fold, events)

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        """Fold only: the rows of a chat are written once per batch, from its state after the batch
        (``end_batch``), as the difference from its rows before the batch. A call opened and closed
        within one batch, or a prompt queued and promoted, never touches the tables. An erasure: the chats
        it names are forgotten (their decrypted states) and their rows rewritten (``projections.erasure``)."""
        if is_erasure(event):
            pending = set()  # chats whose rows this batch had not written yet: their changes are dropped
            if self.position is not None:
                for chat in event.streams:
                    if self._touched.pop(chat.int, None) is not None:
                        pending.add(chat)
                    self.stream_done(chat)
            return rederive(self, self.app, event, self.position, pending)
        key = event.originator_id.int
        entry = self._touched.get(key)
        if entry is None:
            # The first event of this chat in the batch: its state leaves the fold's memory until the
            # batch ends (a failed batch leaves no half-applied state behind).
            before = self.fold.take(event)
            if before is None:
                old_sig, old_queue = None, []
            else:
                known = self._signatures.get(key)
                old_sig = (known[1] if known is not None and known[0] == event.originator_version - 1
                           else _outstanding(before))
                old_queue = list(before.queue)  # the state is evolved in place: copy what we compare
            entry = self._touched[key] = [evolve(before, event), old_sig, old_queue]
        elif entry[0].version == event.originator_version - 1:
            evolve(entry[0], event)
        else:
            raise ProjectionError(f"chat {event.originator_id}: event version {event.originator_version} "
                                  f"does not follow {entry[0].version} in this batch")
        return ()

    def begin_batch(self) -> None:
        self._touched.clear()

    def stream_done(self, stream_id: Any) -> None:
        self.fold.forget(stream_id.int)
        self._signatures.pop(stream_id.int, None)

    def end_batch(self, rows: Rows) -> Iterable[RowOp]:
        """For each chat the batch touched: its status row (every event changes it — at least its
        version), and the unresolved-call and queue rows that differ from those before the batch."""
        ops: list[RowOp] = []
        signatures = self._signatures
        if len(signatures) > 4 * self.fold.max_streams:
            signatures.clear()
        put = self.fold.put
        for key, (after, old_sig, old_queue) in self._touched.items():
            put(key, after.version, after)
            ops.append(Upsert(STATUS, status_values(after), True))
            new_sig = _outstanding(after)
            if new_sig != old_sig:
                ops.extend(_calls_diff(uuid_str(after.chat_id), old_sig, new_sig, after))
            signatures[key] = (after.version, new_sig)
            queue = after.queue
            if len(queue) != len(old_queue) or any(a is not b for a, b in zip(queue, old_queue)):
                ops.extend(_queue_diff(old_queue, after))
        self._touched.clear()
        return ops


def _outstanding(state: Any) -> tuple[Any, ...] | None:
    """What a chat's unresolved rows depend on: the latest assistant message and its open calls."""
    assistant, calls = unresolved_tool_calls(state)
    return (assistant.message_id, *(c.tool_call_id for c in calls)) if calls else None


def _calls_diff(chat_id: str, old_sig: tuple[Any, ...] | None, new_sig: tuple[Any, ...] | None,
                after: Any) -> list[RowOp]:
    """Row changes when the latest assistant message or its open calls changed (else the rows did not)."""
    # The row of an open call never changes while its message stays the latest: delete the calls no
    # longer open, insert the newly open ones.
    same_message = old_sig is not None and new_sig is not None and old_sig[0] == new_sig[0]
    kept = set(old_sig[1:]) if same_message else set()
    new_ids = set(new_sig[1:]) if new_sig else set()
    ops: list[RowOp] = [Delete(UNRESOLVED, (chat_id, cid)) for cid in (old_sig[1:] if old_sig else ())
                        if cid not in new_ids or not same_message]
    if not new_ids <= kept:  # (a result closing a call only deletes its row)
        ops.extend(Upsert(UNRESOLVED, row, True) for row in unresolved_values(after) if row["tool_call_id"] not in kept)
    return ops


def _queue_diff(old: list[Any], after: Any) -> list[RowOp]:
    chat_id = uuid_str(after.chat_id)
    new_ids = {q.queued_message_id for q in after.queue}
    ops: list[RowOp] = [Delete(QUEUE, (chat_id, q.queued_message_id)) for q in old
                        if q.queued_message_id not in new_ids]
    # Queued prompts are immutable values (a move, an edit, beginning or ending an edit replaces one):
    # the rows to write are those of the prompts that were not in the queue before the batch, as the
    # same object.
    kept = {id(q) for q in old}
    ops.extend(Upsert(QUEUE, queue_row(after.chat_id, q), True) for q in after.queue if id(q) not in kept)
    return ops


def chat_projections(app: Any) -> list[Projection]:
    return [ChatViews(app)]
