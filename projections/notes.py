"""One window of the notification log, as a log-order run (catch-up, follow, a log-order rebuild) reads it.

The same rows, in the same order, as the library's ``select_notifications(start=after, limit, stop, topics,
inclusive_of_start=False)``, read lighter: plain tuples instead of name-indexed rows, and one UUID object per
stream of the window instead of one per event (on SQLite the id is stored as text: parsing it was about a
tenth of a catch-up at thousands of chats). PostgreSQL reads retry connection errors as the ledger's
recorder does (``bounded_retry``); any other recorder is read with its own ``select_notifications``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID


class Note:
    """A notification: what ``mapper.to_domain_event`` and the runner read of one."""

    __slots__ = ("id", "originator_id", "originator_version", "state", "topic")

    def __init__(self, nid: int, originator_id: UUID, originator_version: int, topic: str, state: bytes) -> None:
        self.id, self.originator_id, self.originator_version, self.topic, self.state = (
            nid, originator_id, originator_version, topic, state)


def read_window(app: Any, after: int, stop: int, limit: int, topics: Sequence[str] | None) -> Sequence[Any]:
    """The notifications with ids in ``(after, stop]`` (of ``topics``; None or empty: every topic), at most
    ``limit``, in id order."""
    from eventsourcing.postgres import PostgresDatastore
    from eventsourcing.sqlite import SQLiteDatastore

    recorder = app.recorder
    datastore = getattr(recorder, "datastore", None)
    if isinstance(datastore, SQLiteDatastore):
        return _sqlite(recorder, datastore, after, stop, limit, topics)
    if isinstance(datastore, PostgresDatastore):
        from ledger.recorders import READ_RETRY_SECONDS
        from ledger.recorders.postgres import bounded_retry

        return bounded_retry(READ_RETRY_SECONDS)(_postgres)(recorder, datastore, after, stop, limit, topics)
    return recorder.select_notifications(start=after, limit=limit, stop=stop, topics=list(topics or ()),
                                         inclusive_of_start=False)


def _sqlite(recorder: Any, datastore: Any, after: int, stop: int, limit: int,
            topics: Sequence[str] | None) -> list[Note]:
    sql = (f"SELECT rowid, originator_id, originator_version, topic, state FROM {recorder.events_table_name} "
           "WHERE rowid > ? AND rowid <= ?")
    params: list[Any] = [after, stop]
    if topics:
        sql += f" AND topic IN ({', '.join('?' * len(topics))})"
        params.extend(topics)
    with datastore.transaction(commit=False) as cur:
        cur.execute(sql + " ORDER BY rowid LIMIT ?", (*params, limit))
        rows = cur.fetchall()
    uuids: dict[str, UUID] = {}
    out = []
    for nid, oid, version, topic, state in rows:
        u = uuids.get(oid)
        if u is None:
            u = uuids[oid] = UUID(oid)
        out.append(Note(nid, u, version, topic, state))
    return out


def _postgres(recorder: Any, datastore: Any, after: int, stop: int, limit: int,
              topics: Sequence[str] | None) -> list[Note]:
    from ledger.recorders.postgres import binary_rows

    sql = (f"SELECT notification_id, originator_id, originator_version, topic, state FROM "
           f'"{datastore.schema}"."{recorder.events_table_name}" WHERE notification_id > %s AND notification_id <= %s')
    params: list[Any] = [after, stop]
    if topics:
        sql += " AND topic = ANY(%s)"
        params.append(list(topics))
    rows = binary_rows(datastore, sql + " ORDER BY notification_id LIMIT %s", (*params, limit))
    return [Note(nid, oid, version, topic, state if state.__class__ is bytes else bytes(state))
            for nid, oid, version, topic, state in rows]
