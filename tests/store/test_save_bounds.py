"""The PostgreSQL save, pipelined (one round trip) and statement by statement (large saves), keeps its rules:
a version already taken, a stream the decision read that has moved, a table lock held past the bound — each
refused with nothing recorded and the connection clean for the next save; and the one thread that bounds
COMMIT's wait cancels what runs past its deadline, and nothing once disarmed. Real server, real locks."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Iterator

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent

from ledger.recorders import DependencyChanged, StatementTimedOut
from ledger.recorders.postgres import PIPELINE_BYTES, CancelWatch
from ledger.store import DatabaseURL, open_app


@pytest.fixture
def recorder(pg_url: str) -> Iterator[Any]:
    app = open_app(pg_url)
    yield app.recorder
    app.close()


SIZES = {"pipelined": 100, "statement by statement": PIPELINE_BYTES + 1}


def _rows(recorder: Any, stream: uuid.UUID) -> list[int]:
    return [e.originator_version for e in recorder.select_events(stream)]


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_refusals_record_nothing_and_leave_the_connection_clean(recorder: Any, size: int) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    recorder.insert_events([StoredEvent(a, 1, "t", b"x" * size), StoredEvent(b, 1, "t", b"y")])
    with pytest.raises(IntegrityError):  # version 1 of a is taken
        recorder.insert_events([StoredEvent(a, 2, "t", b"x" * size), StoredEvent(a, 1, "t", b"z")])
    assert _rows(recorder, a) == [1]
    recorder.insert_events([StoredEvent(b, 2, "t", b"y")])
    with pytest.raises(DependencyChanged) as refused:  # the decision read b at version 1; it is at 2 now
        recorder.insert_events([StoredEvent(a, 2, "t", b"x" * size)], expected_versions={b: 1})
    assert refused.value.stale == {b: (1, 2)}
    assert _rows(recorder, a) == [1]
    ids = recorder.insert_events([StoredEvent(a, 2, "t", b"x" * size)], expected_versions={b: 2, uuid.uuid4(): 0})
    assert len(ids) == 1 and _rows(recorder, a) == [1, 2]


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_a_save_waiting_past_the_bound_for_the_table_lock_records_nothing(recorder: Any, pg_url: str, size: int,
                                                                        monkeypatch: Any) -> None:
    monkeypatch.setenv("CHAT_LEDGER_COMMIT_TIMEOUT", "0.5")
    a = uuid.uuid4()
    db = DatabaseURL.parse(pg_url)
    with psycopg.connect(db.psycopg_conninfo()) as holder:  # another transaction holds the insert lock
        holder.execute(f'LOCK TABLE "{db.schema}"."{recorder.events_table_name}" IN EXCLUSIVE MODE')
        started = time.monotonic()
        with pytest.raises(StatementTimedOut):
            recorder.insert_events([StoredEvent(a, 1, "t", b"x" * size)])
        assert time.monotonic() - started < 5
        holder.rollback()
    assert _rows(recorder, a) == []
    recorder.insert_events([StoredEvent(a, 1, "t", b"x" * size)])  # the pool's connection is clean
    assert _rows(recorder, a) == [1]


def test_the_cancel_thread_cancels_at_the_deadline_and_never_after_disarm(pg_url: str) -> None:
    watch = CancelWatch()
    conninfo = DatabaseURL.parse(pg_url).psycopg_conninfo()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        key = watch.arm(conn, 0.2)
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(10)")
        assert time.monotonic() - started < 5
        watch.disarm(key)
        # armed and disarmed many times over, from several threads: nothing is canceled
        def cycle() -> None:
            for _ in range(200):
                watch.disarm(watch.arm(conn, 0.05))
        threads = [threading.Thread(target=cycle) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        key = watch.arm(conn, 30)
        assert conn.execute("SELECT pg_sleep(0.3), 1").fetchone()[1] == 1  # far from its deadline: runs
        watch.disarm(key)
