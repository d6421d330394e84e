"""What the bookkeeping tables hold, as values: builds, blue/green diffs, switches, failures."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from projections.engine import Table


class Build(msgspec.Struct, frozen=True):
    """One version of a projection's tables, as recorded in ``projection_tracking``."""

    projection: str
    version: int
    definition_version: int
    fingerprint: str
    position: int
    tables: list[dict[str, Any]]  # Table.spec() of each table

    def table_specs(self) -> dict[str, Table]:
        return {s["name"]: Table.from_spec(s) for s in self.tables}


class TableDiff(msgspec.Struct):
    table: str
    status: str  # "common" | "added" (only in the new version) | "removed" (only in the live version)
    columns_added: list[str] = []
    columns_removed: list[str] = []
    columns_retyped: list[str] = []  # same name, different type: excluded from the row comparison
    compared_by: str = "key"  # "key": rows matched by primary key; "row": whole common-column rows
    rows_added: int = 0
    rows_removed: int = 0
    rows_changed: int = 0


class Diff(msgspec.Struct):
    """The comparison of a new build with the live one, at the same notification position."""

    projection: str
    live_version: int
    new_version: int
    position: int
    equal: bool
    diff_rows: int  # rows added + removed + changed, over every table
    digest: str  # sha256 over both builds' row sets (every table, every row in key order) and the differences
    tables: list[TableDiff]
    samples: list[dict[str, Any]]  # the first DIFF_SAMPLES row differences
    live_rows_digest: str = ""  # sha256 over the live build's rows (every table by name, rows in key order)
    new_rows_digest: str = ""  # the same over the new build's rows: equal builds have equal row digests


class Switch(msgspec.Struct):
    projection: str
    from_version: int | None
    to_version: int
    position: int
    switched_at: datetime
    mode: str
    diff_digest: str | None
    diff_rows: int | None
    accepted_with_diff: bool


class Failure(msgspec.Struct):
    """The event a build could not apply (``projection_failures``)."""

    projection: str
    version: int
    notification_id: int
    stream_id: str
    stream_version: int
    topic: str
    reason: str
    failed_at: datetime

    def message(self) -> str:
        return (f"projection {self.projection} v{self.version} cannot apply stream {self.stream_id} version "
                f"{self.stream_version} (notification {self.notification_id}, {self.topic}): {self.reason}")
