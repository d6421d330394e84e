"""Log positions of stored events: (stream, version) <-> notification id, one indexed query each.

A stream's events are keyed by (originator_id, originator_version) — the primary key on both backends —
and each carries its notification id (SQLite: the ``rowid``; PostgreSQL: the ``notification_id`` column,
uniquely indexed). Every query here names one stream, so it reads that stream's index range only and is
bounded by the stream's length, never by the size of the log. The in-memory recorder (tests) answers
from its own index.

These are the facts time-aligned replay needs (docs/commands.md, "Time-aligned answers"): a chat version maps to
the notification id of its event, and any other stream is folded "as of" a notification id by loading it
at the last version it had at that id.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID


def positions(recorder: Any, stream_id: UUID, upto: int | None = None) -> list[tuple[int, int]]:
    """``(version, notification id)`` of the stream's events in version order (those with a notification
    id <= ``upto`` when given)."""
    kind = _kind(recorder)
    if kind == "popo":
        index = recorder._stored_events_index.get(str(stream_id), {})
        rows = sorted((v, i + 1) for v, i in index.items())
        return [r for r in rows if upto is None or r[1] <= upto]
    if kind == "sqlite":
        sql = (f"SELECT originator_version, rowid AS nid FROM {recorder.events_table_name} "
               "WHERE originator_id = ?" + (" AND rowid <= ?" if upto is not None else "")
               + " ORDER BY originator_version")
        params: tuple[Any, ...] = (stream_id.hex,) + ((upto,) if upto is not None else ())
        return [(int(r[0]), int(r[1])) for r in _sqlite(recorder, sql, params)]
    query = ("SELECT originator_version, notification_id FROM {table} WHERE originator_id = %s"
             + (" AND notification_id <= %s" if upto is not None else "") + " ORDER BY originator_version")
    params = (stream_id,) + ((upto,) if upto is not None else ())
    return [(int(r["originator_version"]), int(r["notification_id"])) for r in _postgres(recorder, query, params)]


def notification_id(recorder: Any, stream_id: UUID, version: int) -> int | None:
    """The notification id of the stream's event at ``version`` (None when there is none)."""
    kind = _kind(recorder)
    if kind == "popo":
        i = recorder._stored_events_index.get(str(stream_id), {}).get(version)
        return None if i is None else i + 1
    if kind == "sqlite":
        rows = _sqlite(recorder, f"SELECT rowid FROM {recorder.events_table_name} "
                                 "WHERE originator_id = ? AND originator_version = ?", (stream_id.hex, version))
        return int(rows[0][0]) if rows else None
    rows = _postgres(recorder, "SELECT notification_id FROM {table} WHERE originator_id = %s "
                               "AND originator_version = %s", (stream_id, version))
    return int(rows[0]["notification_id"]) if rows else None


def version_at(recorder: Any, stream_id: UUID, position: int) -> int:
    """The stream's version as of notification ``position``: its last event with a notification id <=
    ``position`` (0 when it had none yet)."""
    kind = _kind(recorder)
    if kind == "popo":
        rows = positions(recorder, stream_id, position)
        return rows[-1][0] if rows else 0
    if kind == "sqlite":
        rows = _sqlite(recorder, f"SELECT max(originator_version) FROM {recorder.events_table_name} "
                                 "WHERE originator_id = ? AND rowid <= ?", (stream_id.hex, position))
        return int(rows[0][0] or 0) if rows else 0
    rows = _postgres(recorder, "SELECT max(originator_version) AS v FROM {table} WHERE originator_id = %s "
                               "AND notification_id <= %s", (stream_id, position))
    return int(rows[0]["v"] or 0) if rows else 0


def _kind(recorder: Any) -> str:
    for cls in type(recorder).__mro__:
        module = cls.__module__
        if module == "eventsourcing.popo":
            return "popo"
        if module == "eventsourcing.sqlite":
            return "sqlite"
        if module == "eventsourcing.postgres":
            return "postgres"
    raise TypeError(f"no log positions for recorder {type(recorder).__name__}")


def _sqlite(recorder: Any, sql: str, params: tuple[Any, ...]) -> list[Any]:
    with recorder.datastore.transaction(commit=False) as c:
        c.execute(sql, params)
        return list(c.fetchall())


def _postgres(recorder: Any, query: str, params: tuple[Any, ...]) -> list[Any]:
    from psycopg import sql

    statement = sql.SQL(query).format(table=sql.Identifier(recorder.datastore.schema, recorder.events_table_name))
    with recorder.datastore.transaction(commit=False) as c:
        c.execute(statement, params)
        return list(c.fetchall())


def streams_with_prefix(recorder: Any, hex_prefix: str, limit: int = 50) -> list[tuple[UUID, str]]:
    """``(stream id, topic of its first event)`` of the streams whose id starts with ``hex_prefix`` (lower-case
    hex digits, no hyphens), at most ``limit``, in id order: one range read of the primary key."""
    kind = _kind(recorder)
    lo, hi = UUID(hex_prefix.ljust(32, "0")), UUID(hex_prefix.ljust(32, "f"))
    if kind == "popo":
        found = sorted((UUID(sid), index) for sid, index in recorder._stored_events_index.items()
                       if lo <= UUID(sid) <= hi and 1 in index)
        return [(sid, recorder._stored_events[index[1]].topic) for sid, index in found[:limit]]
    if kind == "sqlite":
        rows = _sqlite(recorder, f"SELECT originator_id, topic FROM {recorder.events_table_name} "
                                 "WHERE originator_id >= ? AND originator_id <= ? AND originator_version = 1 "
                                 f"ORDER BY originator_id LIMIT {int(limit)}", (lo.hex, hi.hex))
        return [(UUID(r[0]), r[1]) for r in rows]
    rows = _postgres(recorder, "SELECT originator_id, topic FROM {table} WHERE originator_id BETWEEN %s AND %s "
                               f"AND originator_version = 1 ORDER BY originator_id LIMIT {int(limit)}", (lo, hi))
    return [(r["originator_id"] if isinstance(r["originator_id"], UUID) else UUID(str(r["originator_id"])), r["topic"])
            for r in rows]
