"""The SQLite recorder: the library's, plus the expected-versions check and the hash chain
(``ledger.recorders``, ``ledger.chain``)."""

from __future__ import annotations

import sqlite3
from typing import Any, Mapping, Sequence
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteFactory, SQLiteProcessRecorder

from ledger.chain import COLUMN, link
from ledger.recorders import EXPECTED_VERSIONS, DependencyChanged, KeysWithEvents, LogKeepingFactory, stale_versions

_NEW_KEYS = "new_keys"  # (``insert_events`` to ``_insert_events``: the keys to write in the transaction)
#: the SQL function the insert statement computes each event's chain hash with (registered per connection)
LINK_FUNCTION = "ledger_chain_link"


class SQLiteLedgerRecorder(KeysWithEvents, SQLiteApplicationRecorder):
    """The expected versions are read after the inserts, in their transaction: the first insert took the
    database's write lock, so no other writer commits between the check and this transaction's commit.

    Each insert fills ``chain_hash`` in the same statement, from the previous version's hash read by a
    subquery of that statement (the statement holds the write lock before it reads)."""

    chain_column: bool | None = None  # None: not asked yet (``ledger.chain.has_column``)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        t = self.events_table_name
        self.hashed_insert_statement = (
            f"INSERT INTO {t} (originator_id, originator_version, topic, state, {COLUMN}) VALUES (?1, ?2, ?3, ?4, "
            f"{LINK_FUNCTION}((SELECT {COLUMN} FROM {t} WHERE originator_id = ?1 AND originator_version = ?2 - 1), "
            "?3, ?2, ?4))")

    def construct_create_table_statements(self) -> list[str]:
        statements = super().construct_create_table_statements()
        (i,) = [i for i, s in enumerate(statements)  # the events table's (a process recorder's tracking too)
                if s.endswith("state BLOB, PRIMARY KEY (originator_id, originator_version))")]
        statements[i] = statements[i].replace("state BLOB, ", f"state BLOB, {COLUMN} BLOB, ")
        return statements

    def create_table(self) -> None:
        """The library's tables (the events table with the chain column); a table made before hash chains
        gets the column."""
        super().create_table()
        with self.datastore.transaction(commit=True) as c:
            if not self._has_column(c):
                c.execute(f"ALTER TABLE {self.events_table_name} ADD COLUMN {COLUMN} BLOB")
        self.chain_column = True

    def _has_column(self, c: Any) -> bool:
        c.execute(f"SELECT 1 FROM pragma_table_info('{self.events_table_name}') WHERE name = ?", (COLUMN,))
        return c.fetchone() is not None

    def probe_chain_column(self) -> bool:
        with self.datastore.transaction(commit=False) as c:
            return self._has_column(c)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """The library's insert, with the new data keys of the saved streams in its transaction
        (``KeysWithEvents``; ``_insert_events`` writes them)."""
        return self._with_new_keys(stored_events, lambda new: super(SQLiteLedgerRecorder, self).insert_events(
            stored_events, **({**kwargs, _NEW_KEYS: new} if new else kwargs)))

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        new_keys = kwargs.pop(_NEW_KEYS, None)
        if new_keys:
            self.new_keys.keys.insert_new(c, [k.row for k in new_keys])
        if self.chain_column is None:
            self.chain_column = self.probe_chain_column()
        if self.chain_column:
            notification_ids = self._insert_hashed(c, stored_events)
        else:  # a ledger made before hash chains, opened without creating anything: rows without hashes
            notification_ids = super()._insert_events(c, stored_events, **kwargs)
        expected: Mapping[UUID, int] = kwargs.get(EXPECTED_VERSIONS) or {}
        if expected:
            keys = list(expected)
            c.execute(
                f"SELECT originator_id, MAX(originator_version) FROM {self.events_table_name} "
                f"WHERE originator_id IN ({', '.join('?' * len(keys))}) GROUP BY originator_id",
                [k.hex for k in keys],
            )
            current = {self.convert_originator_id(r[0]): r[1] for r in c.fetchall()}
            stale = stale_versions(expected, current)
            if stale:
                raise DependencyChanged(stale)
        return notification_ids

    def _insert_hashed(self, c: Any, stored_events: Sequence[StoredEvent]) -> list[int]:
        returning = []
        for s in stored_events:
            oid = s.originator_id.hex if isinstance(s.originator_id, UUID) else s.originator_id
            params = (oid, s.originator_version, s.topic, s.state)
            try:
                c.execute(self.hashed_insert_statement, params)
            except sqlite3.OperationalError as e:
                if LINK_FUNCTION not in str(e):
                    raise
                # a connection not seen yet: give it the function (the failed statement did nothing)
                getattr(c, "sqlite_cursor", c).connection.create_function(LINK_FUNCTION, 4, _link, deterministic=True)
                c.execute(self.hashed_insert_statement, params)
            returning.append(c.lastrowid)
        return returning


class SQLiteLedgerProcessRecorder(SQLiteLedgerRecorder, SQLiteProcessRecorder):
    """The library's process recorder (new events and the tracking record of what they answer, in one
    transaction) keeping the chain and the expected versions."""

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        tracking = kwargs.pop("tracking", None)  # inserted here, once (not by the library's insert as well)
        notification_ids = super()._insert_events(c, stored_events, **kwargs)
        if tracking is not None:
            self._insert_tracking(c, tracking)
        return notification_ids


class SQLiteLedgerFactory(LogKeepingFactory, SQLiteFactory):
    """The library's SQLite factory handing out the recorders above (``LogKeepingFactory``)."""

    application_recorder_class = SQLiteLedgerRecorder
    process_recorder_class = SQLiteLedgerProcessRecorder


def _link(prev: bytes | None, topic: str, version: int, state: bytes) -> bytes | None:
    return link(prev, topic, version, state)
