"""Read-side helpers for the CLI that work by replay (the projections issue moves list queries to views)."""

from __future__ import annotations

from typing import Any, Iterator
from uuid import UUID

from ledger.chat import events as ev
from ledger.chat.aggregate import Chat
from ledger.errors import LedgerError


def chat_ids(app: Any) -> Iterator[UUID]:
    """Every chat in creation order (scans only ChatCreated notifications)."""
    start = 0
    while True:
        notes = app.recorder.select_notifications(start=start, limit=1000, topics=[ev.ChatCreated.TOPIC],
                                                  inclusive_of_start=False)
        if not notes:
            return
        for n in notes:
            yield n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id))
        start = notes[-1].id


def load_chat(app: Any, chat_id: UUID, version: int | None = None) -> Chat:
    agg = app.load(chat_id, version=version)
    if not isinstance(agg, Chat):
        raise LedgerError("chat_not_found", "chat not found")
    return agg
