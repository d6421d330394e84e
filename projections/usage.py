"""The usage view: what each chat's messages cost, as the worker reported it with them, summable by
organization, owner or model.

Table of the projection ``usage``:

* ``chat_usage``: one row per chat (zeros until a message reports usage) — its organization, owner, model config (the last
  message's that named one), how many messages reported usage, and the sums of every usage field
  (``ledger.chat.values.USAGE_FIELDS``: tokens in, out, cache read and written, reasoning, total; cost in
  millionths; run time in ms; each sum stops at 2^63 - 1), with the time of the last. Messages an edit later deleted still count: what
  was spent was spent. ``chat-ledger usage`` sums the rows of an organization.

Maintained exactly once like every view and rebuilt with them; stream-wise (a chat's row is its own events').
"""

from __future__ import annotations

from typing import Any, Iterable

from ledger.chat import events as ev
from ledger.chat.values import MAX_INT64, USAGE_FIELDS, usage_total
from ledger.chat.views import uuid_str
from projections.chats import CHAT_TOPICS
from projections.engine import Projection
from projections.errors import ProjectionError
from projections.rowops import RowOp, Rows, Upsert
from projections.schema import BIGINT, TEXT, TIMESTAMP, Column, Table

USAGE = "chat_usage"


class UsageView(Projection):
    name = "usage"
    streamwise = True
    version = 1
    personal = False  # (usage, models and ids: no personal field read, none opened)
    topics = CHAT_TOPICS
    tables = [
        Table(USAGE, [
            Column("chat_id", TEXT), Column("organization_id", TEXT, False), Column("owner_id", TEXT, False),
            Column("model_config_id", TEXT), Column("messages", BIGINT, False),
            *(Column(name, BIGINT, False) for name in USAGE_FIELDS), Column("updated_at", TIMESTAMP, False),
        ], primary_key=["chat_id"], indexes=[["organization_id"], ["owner_id"]]),
    ]

    def __init__(self, app: Any) -> None:  # (every view is made with the app; this one keeps nothing of it)
        pass

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        chat = uuid_str(event.originator_id)
        messages = getattr(event, "messages", None) or ()
        if event.__class__ is ev.ChatCreated:  # every chat has its row from its first event (zeros until used)
            row: dict[str, Any] | None = {
                "chat_id": chat, "organization_id": uuid_str(event.organization_id),
                "owner_id": uuid_str(event.owner_id), "model_config_id": None, "messages": 0,
                **dict.fromkeys(USAGE_FIELDS, 0), "updated_at": event.timestamp}
            step = usage_total(messages)
            if step is None:
                return (Upsert(USAGE, row),)
        else:
            step = usage_total(messages)
            if step is None:
                return ()
            row = rows.get(USAGE, (chat,))
            if row is None:
                raise ProjectionError(f"chat {chat}: usage at version {event.originator_version} before its "
                                      "ChatCreated")
        model = next((m.model_config_id for m in reversed(messages) if m.model_config_id is not None), None)
        new = {**row, "messages": row["messages"] + step["messages"],
               # a column holds 64 bits: a sum past them (only absurd reports get there) stays at the bound
               **{name: min(row[name] + step[name], MAX_INT64) for name in USAGE_FIELDS},
               "model_config_id": uuid_str(model) if model is not None else row["model_config_id"],
               "updated_at": event.timestamp}
        return (Upsert(USAGE, new),)


def usage_projections(app: Any) -> list[Projection]:
    return [UsageView(app)]
