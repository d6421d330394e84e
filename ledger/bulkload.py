"""Record a long sequence of stored events into an empty store in one transaction (``events import``).

The library's ``insert_events`` takes the whole sequence at once (all in memory); this feeds the
recorder's own insert statements chunk by chunk inside one transaction, so a file of any size is
recorded whole or not at all with memory bounded by a chunk. The store must be empty: that is checked
inside the same transaction, under the write lock (PostgreSQL: the events table's EXCLUSIVE lock that
every insert takes; SQLite: the file's write lock, taken by ``BEGIN IMMEDIATE``), so two imports or an
import and a writer cannot interleave.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence

from eventsourcing.persistence import StoredEvent


class StoreNotEmpty(Exception):
    """The store already holds events: nothing was inserted."""


def insert_into_empty(recorder: Any, chunks: Iterable[Sequence[StoredEvent]]) -> int:
    """Insert every chunk in one transaction; ``StoreNotEmpty`` (nothing inserted) when the store has events.

    Any database error rolls the whole transaction back and propagates."""
    from eventsourcing.postgres import PostgresApplicationRecorder
    from eventsourcing.sqlite import SQLiteApplicationRecorder

    if isinstance(recorder, PostgresApplicationRecorder):
        return _postgres(recorder, chunks)
    if isinstance(recorder, SQLiteApplicationRecorder):
        return _sqlite(recorder, chunks)
    # The in-memory store (tests): no transactions to speak of; one insert of everything.
    if recorder.max_notification_id():
        raise StoreNotEmpty
    events = [e for chunk in chunks for e in chunk]
    recorder.insert_events(events)
    return len(events)


def _postgres(recorder: Any, chunks: Iterable[Sequence[StoredEvent]]) -> int:
    total = 0
    with recorder.datastore.transaction(commit=True) as curs:
        recorder._lock_table(curs)
        curs.execute(recorder.max_notification_id_statement)
        if curs.fetchone()["max"] is not None:
            raise StoreNotEmpty
        for chunk in chunks:
            if chunk:
                # the application recorder's insert: lock (held already), NOTIFY, INSERT ... RETURNING
                recorder._insert_stored_events(curs, chunk)
                total += len(chunk)
    return total


def _sqlite(recorder: Any, chunks: Iterable[Sequence[StoredEvent]]) -> int:
    total = 0
    with sqlite_write_locked(recorder.datastore) as cursor:  # the emptiness check stays true until commit
        if recorder._max_notification_id(cursor):
            raise StoreNotEmpty
        for chunk in chunks:
            if chunk:
                recorder._insert_events(cursor, chunk)
                total += len(chunk)
    return total


@contextmanager
def sqlite_write_locked(datastore: Any) -> Iterator[Any]:
    """A cursor in a SQLite transaction that took the write lock first (``BEGIN IMMEDIATE``): committed
    when the block ends, rolled back when it raises."""
    conn = datastore.pool.get_connection(is_writer=True)
    try:
        cursor = conn.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            yield cursor
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
    finally:
        datastore.pool.put_connection(conn)
