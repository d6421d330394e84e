"""The CURRENT code of the schema-change example: a tiny "memo" aggregate whose ``MemoTagged`` event
changed shape.

* Version 1 (what ``fixtures/memo_v1.jsonl`` holds, written by the old code in ``make_fixture.py``):
  ``MemoTagged(tag: str)`` — one tag per event.
* Version 2 (this code): ``MemoTagged(tags: list[str], source: str)`` — several tags and who tagged.
  ``class_version = 2`` and ``upcast_v1_v2`` turns a stored v1 payload into the v2 shape when it is read
  (``tag`` -> ``tags: [tag]``; ``source`` "user": only users could tag in v1), so a v1 fact reads exactly
  as the v2 fact the new code records for the same tagging.
* The aggregate class was also renamed (``Memo`` -> ``MemoAggregate``) and moved to this module: stored
  events name the stable topic ``chat-ledger-example:memo.Memo``, never a module path, so nothing else
  changes.

The topics are test/example topics (``chat-ledger-example:``), registered only when this module is
imported; the ledger's own code never imports it.
"""

from __future__ import annotations

from typing import Any, ClassVar
from uuid import UUID

import msgspec

from ledger.base import DeciderAggregate, LedgerCreated, LedgerEvent
from projections.engine import BIGINT, INTEGER, JSON, TEXT, TIMESTAMP, Column, Projection, RowOp, Rows, Table, Upsert
from projections.folding import StreamFold

MEMO_TOPIC = "chat-ledger-example:memo.Memo"


class MemoOpened(LedgerCreated):
    TOPIC = "chat-ledger-example:memo.MemoOpened"
    title: str


class MemoTagged(LedgerEvent):
    TOPIC = "chat-ledger-example:memo.MemoTagged"
    class_version: ClassVar[int] = 2
    tags: list[str]
    source: str

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["tags"] = [state.pop("tag")]
        state["source"] = "user"


class MemoState(msgspec.Struct, kw_only=True):
    memo_id: UUID
    title: str
    tags: list[str] = msgspec.field(default_factory=list)
    sources: list[str] = msgspec.field(default_factory=list)
    version: int = 0


def evolve(state: MemoState | None, event: Any) -> MemoState:
    if type(event) is MemoOpened:
        state = MemoState(memo_id=event.originator_id, title=event.title)
    else:
        assert state is not None
        state.tags.extend(t for t in event.tags if t not in state.tags)
        if event.source not in state.sources:
            state.sources.append(event.source)
    state.version = event.originator_version
    return state


class MemoAggregate(DeciderAggregate):  # was ``Memo`` in the old code: the topic stays
    TOPIC: ClassVar[str] = MEMO_TOPIC
    state: MemoState
    evolve = staticmethod(evolve)


class MemoTags(Projection):
    """One row per memo: its title, tags and who tagged it."""

    name = "memo_tags"
    version = 1
    topics = (MemoOpened.TOPIC, MemoTagged.TOPIC)
    tables = [Table("memos", [
        Column("memo_id", TEXT), Column("title", TEXT, False), Column("tags", JSON, False),
        Column("tag_count", INTEGER, False), Column("sources", JSON, False), Column("version", BIGINT, False),
        Column("updated_at", TIMESTAMP, False),
    ], primary_key=["memo_id"])]

    def __init__(self, app: Any) -> None:
        self.fold = StreamFold(app, evolve, MemoOpened)

    def apply(self, event: Any, rows: Rows) -> list[RowOp]:
        s = self.fold.after(event, self.fold.before(event))
        return [Upsert("memos", {"memo_id": str(s.memo_id), "title": s.title, "tags": list(s.tags),
                                 "tag_count": len(s.tags), "sources": list(s.sources), "version": s.version,
                                 "updated_at": event.timestamp})]
