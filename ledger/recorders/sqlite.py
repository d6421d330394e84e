"""The SQLite recorder: the library's, plus the expected-versions check (``ledger.recorders``)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder

from ledger.recorders import EXPECTED_VERSIONS, DependencyChanged, stale_versions


class SQLiteLedgerRecorder(SQLiteApplicationRecorder):
    """The expected versions are read after the inserts, in their transaction: the first insert took the
    database's write lock, so no other writer commits between the check and this transaction's commit."""

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
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
