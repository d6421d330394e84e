"""Link the streams recorded before hash chains (``chat-ledger events rehash``; ``init`` runs it too).

A ledger made before hash chains gets the ``chain_hash`` column when a writer first opens it (the
recorders' ``create_table``); its old events have no hash, and neither do events appended to their
streams afterwards (an event after one without a hash gets none). ``rehash`` gives every stream that has
**no** hash at all its chain, from version 1. A stream with hashes is never rewritten, whether they
verify or not: a broken chain stays broken (``events verify`` names it), so rehashing cannot hide an
edit. Each batch of streams is re-read and updated under the write lock writers take (PostgreSQL: the
events table's EXCLUSIVE lock; SQLite: ``BEGIN IMMEDIATE``), so no event is appended between the read and
the update.
"""

from __future__ import annotations

from contextlib import contextmanager
from itertools import groupby
from typing import Any, Iterator
from uuid import UUID

from ledger.chain import COLUMN, check_stream, has_column, link, scan

#: streams re-read and updated per write transaction
BATCH = 200


def unhashed_rows(app: Any) -> bool:
    """Whether any stored event has no chain hash (one indexless probe; False for the in-memory store)."""
    recorder = app.recorder
    datastore = getattr(recorder, "datastore", None)
    if datastore is None or not has_column(recorder):
        return datastore is not None and (app.head() or 0) > 0
    table, _ = _table(recorder)
    with datastore.transaction(commit=False) as cur:
        cur.execute(f"SELECT 1 AS found FROM {table} WHERE {COLUMN} IS NULL LIMIT 1")
        return cur.fetchone() is not None


def rehash(app: Any) -> dict[str, int]:
    """Link every stream without hashes; ``{"streams": linked, "events": hashed, "broken": left as they
    are, "checked": streams read}``."""
    out = {"streams": 0, "events": 0, "broken": 0, "checked": 0}
    recorder = app.recorder
    if getattr(recorder, "datastore", None) is None or not has_column(recorder):
        return out  # the in-memory store keeps no hashes; a ledger without the column: open it as a writer
    todo: list[UUID] = []
    for sid, notes in groupby(scan(app, app.head() or 0), key=lambda n: n.originator_id):
        out["checked"] += 1
        status = check_stream(notes).status
        if status == "unhashed":
            todo.append(sid if isinstance(sid, UUID) else UUID(str(sid)))
        elif status == "broken":
            out["broken"] += 1
    for i in range(0, len(todo), BATCH):
        with _write_locked(recorder) as cur:
            for sid in todo[i:i + BATCH]:
                hashed = _link_stream(recorder, cur, sid)
                if hashed:
                    out["streams"] += 1
                    out["events"] += hashed
    return out


def _table(recorder: Any) -> tuple[str, str]:
    from eventsourcing.sqlite import SQLiteDatastore

    if isinstance(recorder.datastore, SQLiteDatastore):
        return recorder.events_table_name, "?"
    return f'"{recorder.datastore.schema}"."{recorder.events_table_name}"', "%s"


def _link_stream(recorder: Any, cur: Any, sid: UUID) -> int:
    """Hash one stream that still has no hash at all (read under the write lock); the rows updated."""
    table, p = _table(recorder)
    key = sid.hex if p == "?" else sid
    cur.execute(f"SELECT originator_version, topic, state, {COLUMN} FROM {table} WHERE originator_id = {p} "
                "ORDER BY originator_version", (key,))
    rows = cur.fetchall()
    if not rows or any(r[COLUMN] is not None for r in rows):
        return 0
    updates, prev = [], None
    for r in rows:
        prev = link(prev, r["topic"], r["originator_version"], bytes(r["state"]))
        updates.append((prev, key, r["originator_version"]))
    cur.executemany(f"UPDATE {table} SET {COLUMN} = {p} WHERE originator_id = {p} AND originator_version = {p}",
                    updates)
    return len(updates)


@contextmanager
def _write_locked(recorder: Any) -> Iterator[Any]:
    from eventsourcing.sqlite import SQLiteDatastore

    from ledger.bulkload import sqlite_write_locked

    datastore = recorder.datastore
    if isinstance(datastore, SQLiteDatastore):
        with sqlite_write_locked(datastore) as cursor:
            yield cursor
        return
    with datastore.transaction(commit=True) as curs:
        recorder._lock_table(curs)  # the lock every insert takes
        yield curs
