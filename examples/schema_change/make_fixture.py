"""How ``fixtures/memo_v1.jsonl`` was made, with the OLD code (run once, by hand; the test never runs
it, and the fixture is committed as bytes). Do not import this next to ``memo.py``: both define the same
stable topics (the old and the new shape of one fact).

    .venv/bin/python examples/schema_change/make_fixture.py examples/schema_change/fixtures/memo_v1.jsonl
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar
from uuid import UUID

import msgspec

from ledger.base import DeciderAggregate, Emitter, LedgerCreated, LedgerEvent


class MemoOpened(LedgerCreated):
    TOPIC = "chat-ledger-example:memo.MemoOpened"
    title: str


class MemoTagged(LedgerEvent):  # version 1: one tag per event, no source
    TOPIC = "chat-ledger-example:memo.MemoTagged"
    tag: str


class OldMemoState(msgspec.Struct):
    title: str
    tags: list[str]


def evolve(state: Any, event: Any) -> Any:
    if type(event) is MemoOpened:
        return OldMemoState(event.title, [])
    state.tags.append(event.tag)
    return state


class Memo(DeciderAggregate):
    TOPIC: ClassVar[str] = "chat-ledger-example:memo.Memo"
    evolve = staticmethod(evolve)


#: the facts of the fixture: (memo id, title, tags, first timestamp)
MEMOS = [
    (UUID("00000000-0000-4000-8000-00000000e001"), "Release checklist", ["urgent", "ops", "release"]),
    (UUID("00000000-0000-4000-8000-00000000e002"), "Ideas", ["later"]),
    (UUID("00000000-0000-4000-8000-00000000e003"), "Empty memo", []),
]
START = datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc)


def record(app: Any) -> None:
    for i, (memo_id, title, tags) in enumerate(MEMOS):
        t = START + timedelta(hours=i)
        em = Emitter(memo_id, 0, t)
        em.emit(MemoOpened, originator_topic=Memo.TOPIC, title=title)
        memo = Memo.start(em.events)
        for j, tag in enumerate(tags):
            em = Emitter(memo_id, memo.version, t + timedelta(minutes=j + 1))
            em.emit(MemoTagged, tag=tag)
            memo.record(em.events)
        app.save(memo)


def main(path: str) -> None:
    from commands.eventlog_transfer import export_lines
    from ledger.store import ChatLedgerApp

    with tempfile.TemporaryDirectory() as d:
        app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": f"{d}/old.db"})
        record(app)
        with open(path, "wb") as f:
            for line in export_lines(app):
                f.write(line + b"\n")
        app.close()


if __name__ == "__main__":
    main(sys.argv[1])
