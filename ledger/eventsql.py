"""The stored events table read in its primary-key order (stream, version): the one place for that SQL.

``ledger.chain.scan`` (the events with their chain hashes: ``events verify`` through
``commands.eventlog_verify.stream_order``, ``export``) and ``projections.streamwise.read_log`` (stream-wise
rebuilds) build their statement here; each keeps its own cursor (pages by keyset there, a server-side cursor
on PostgreSQL for ``read_log``).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence
from uuid import UUID

#: the events table's primary-key order
STREAM_ORDER = " ORDER BY originator_id, originator_version"


class StoredQuery(NamedTuple):
    """``SELECT <nid> AS nid, originator_id, originator_version, topic, state[, extra] FROM <events> WHERE ...``."""

    select: str
    params: tuple[Any, ...]
    nid: str  # the notification id's column: ``rowid`` (SQLite) or ``notification_id``
    param: str  # the driver's placeholder: ``?`` or ``%s``
    sqlite: bool

    def after_key(self) -> str:
        """The condition of the next page in stream order: after the last (stream, version) read."""
        return f" AND (originator_id, originator_version) > ({self.param}, {self.param})"


def stored_events_query(recorder: Any, head: int, *, extra: str = "", streams: Sequence[UUID] | None = None,
                        topics: Sequence[str] | None = None, lo: UUID | None = None,
                        hi: UUID | None = None) -> StoredQuery:
    """The stored events with notification ids up to ``head``: of ``streams`` (an ``IN`` list), of ``topics``,
    of originator ids in ``[lo, hi)``; ``extra`` adds columns (``", chain_hash"``)."""
    from eventsourcing.sqlite import SQLiteDatastore

    datastore = recorder.datastore
    sqlite = isinstance(datastore, SQLiteDatastore)
    if sqlite:
        table, nid, p = recorder.events_table_name, "rowid", "?"
    else:
        table, nid, p = f'"{datastore.schema}"."{recorder.events_table_name}"', "notification_id", "%s"
    conds, params = [f"{nid} <= {p}"], [head]
    if streams is not None:
        conds.append(f"originator_id IN ({', '.join([p] * len(streams))})")
        params.extend(s.hex if sqlite else s for s in streams)
    if topics is not None:
        if sqlite:
            conds.append(f"topic IN ({', '.join('?' * len(topics))})")
            params.extend(topics)
        else:
            conds.append("topic = ANY(%s)")
            params.append(list(topics))
    for bound, op in ((lo, ">="), (hi, "<")):
        if bound is not None:
            conds.append(f"originator_id {op} {p}")
            params.append(bound.hex if sqlite else bound)
    select = (f"SELECT {nid} AS nid, originator_id, originator_version, topic, state{extra} FROM {table} "
              f"WHERE {' AND '.join(conds)}")
    return StoredQuery(select, tuple(params), nid, p, sqlite)
