"""Snapshots (``ledger.snapshots``) never change an answer: state from a snapshot plus the later events equals
the full replay of the stream, at every version, on SQLite and on PostgreSQL; a snapshot the current code did
not write (another fingerprint, bytes that do not decode) is ignored; a snapshot that cannot be written fails
nothing; readers of a ledger without a snapshot table replay."""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

from eventsourcing.persistence import OperationalError, StoredEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.eventlog_verify import verify
from ledger.base import fast_project
from ledger.chat.aggregate import Chat
from ledger.chat.messageinfo import MessageInfo
from ledger.snapshots import ChatSnapshot, crossed
from ledger.store import open_app
from tests.projections.test_chat_views import ACTIONS, record


def replayed(app: Any, chat_id: uuid.UUID, version: int | None = None) -> Any:
    """The chat folded from its events alone (no snapshot)."""
    return fast_project(None, app.events.get(chat_id, lte=version))


def same(a: Any, b: Any) -> bool:
    return (type(a), a.id, a.version, a.created_on, a.modified_on, a.state) == \
        (type(b), b.id, b.version, b.created_on, b.modified_on, b.state)


def snapshot_versions(app: Any, chat_id: uuid.UUID) -> list[int]:
    return [s.originator_version for s in app.snapshots.recorder.select_events(chat_id)]


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(interval=st.integers(1, 6), steps=st.lists(st.tuples(st.just(0), ACTIONS), min_size=1, max_size=25))
def test_state_from_a_snapshot_and_later_events_is_the_full_replay(app: Any, db_url: str, interval: int,
                                                                   steps: list[Any]) -> None:
    app.snapshotting_intervals = {Chat: interval}
    known = set(_chats(app))  # (the chats of earlier examples)
    record(app, 1, steps)
    (chat_id,) = set(_chats(app)) - known
    head = app.load(chat_id).version
    taken = snapshot_versions(app, chat_id)
    assert all(v <= head for v in taken) and len(taken) <= 1  # only the latest is kept
    if head >= interval:  # the save that reached the last multiple of the interval took one
        assert taken and taken[-1] >= head // interval * interval
    other = open_app(db_url)  # another process: no remembered chat, every load through the store
    try:
        for version in range(1, head + 1):
            full = replayed(app, chat_id, version)
            assert same(app.load(chat_id, version=version), full)
            assert same(other.load(chat_id, version=version), full)
        assert same(other.load(chat_id), replayed(other, chat_id))
    finally:
        other.close()


def _chats(app: Any) -> list[uuid.UUID]:
    from commands.queries import chat_ids

    return [uuid.UUID(str(c)) for c in chat_ids(app)]


def long_chat(app: Any, steps: int = 12) -> uuid.UUID:
    app.snapshotting_intervals = {Chat: 4}
    record(app, 1, [(0, {"type": "send_message", "text": f"q{i}"}) for i in range(steps)])
    return _chats(app)[0]


def put_snapshot(app: Any, chat_id: uuid.UUID, version: int, state: bytes) -> None:
    app.snapshots.recorder.insert_events([StoredEvent(originator_id=chat_id, originator_version=version,
                                                      topic=ChatSnapshot.TOPIC, state=state)])


def test_a_snapshot_of_other_code_is_ignored(app: Any, db_url: str) -> None:
    chat_id = long_chat(app)
    head = app.load(chat_id).version
    assert snapshot_versions(app, chat_id)
    # a snapshot at the head whose state is wrong: taken by "other code" (another fingerprint)
    wrong = ChatSnapshot.take(replayed(app, chat_id, 1))
    forged = ChatSnapshot(originator_id=chat_id, originator_version=head + 1, timestamp=wrong.timestamp,
                          fingerprint="0" * 64, created_on=wrong.created_on, modified_on=wrong.modified_on,
                          state=wrong.state)
    app.snapshots.put([forged])
    put_snapshot(app, chat_id, head + 2, b"\x93not a snapshot")  # and bytes that do not decode
    fresh = open_app(db_url)
    try:
        assert same(fresh.load(chat_id), replayed(fresh, chat_id))
        assert fresh.load(chat_id).version == head
    finally:
        fresh.close()


def test_the_fingerprint_follows_the_class_version_and_the_state_shape(monkeypatch: Any) -> None:
    first = ChatSnapshot.current_fingerprint()
    ChatSnapshot.current_fingerprint.cache_clear()
    monkeypatch.setattr(ChatSnapshot, "class_version", ChatSnapshot.class_version + 1)
    bumped = ChatSnapshot.current_fingerprint()
    monkeypatch.undo()
    ChatSnapshot.current_fingerprint.cache_clear()
    monkeypatch.setattr(ChatSnapshot, "STATE", MessageInfo)  # another shape of state
    reshaped = ChatSnapshot.current_fingerprint()
    monkeypatch.undo()
    ChatSnapshot.current_fingerprint.cache_clear()
    assert len({first, bumped, reshaped}) == 3 and ChatSnapshot.current_fingerprint() == first


def test_a_snapshot_that_cannot_be_written_fails_nothing(app: Any, monkeypatch: Any) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise OperationalError("disk full")

    monkeypatch.setattr(app.snapshots.recorder, "insert_events", refuse)
    chat_id = long_chat(app)
    assert snapshot_versions(app, chat_id) == [] and app.load(chat_id).version > 4


def test_readers_of_a_ledger_without_a_snapshot_table_replay(sqlite_url: str, tmp_path: Any) -> None:
    app = open_app(sqlite_url)
    chat_id = long_chat(app)
    expected = replayed(app, chat_id)
    app.close()
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        conn.execute("DROP TABLE stored_snapshots")  # a ledger written before snapshots existed
    conn.close()
    reader = open_app(sqlite_url, create=False)
    try:
        assert same(reader.load(chat_id), expected)
    finally:
        reader.close()
    writer = open_app(f"sqlite:///file:{tmp_path / 'ledger.db'}?mode=ro")  # a writer that cannot make the table
    try:
        assert writer.snapshots is None and same(writer.load(chat_id), expected)
    finally:
        writer.close()


def test_verify_reads_the_events_not_the_snapshots(app: Any) -> None:
    chat_id = long_chat(app)
    put_snapshot(app, chat_id, 999, b"\x93garbage")
    report = verify(app)
    assert report["ok"], report


def test_crossed() -> None:
    assert crossed(4, 1, 4) and crossed(4, 4, 4) and crossed(4, 3, 9) and not crossed(4, 5, 7)
    assert not crossed(500, 1, 499) and crossed(500, 499, 500) and not crossed(500, 501, 999)
