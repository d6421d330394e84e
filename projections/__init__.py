"""Read models: pure projections (event -> row operations), SQL backends, catch-up/follow/rebuild.

Typical use by a command::

    from projections import open_backend, catch_up
    with open_backend(url) as backend:
        catch_up(app, ChatStatus(), backend)
        rows = backend.query("chat_status", "status", where={"organization_id": org}, order_by="-updated_at")
"""

from __future__ import annotations

from typing import Any

from projections.backend import SqlBackend
from projections.engine import (
    BIGINT, BOOLEAN, COLUMN_TYPES, INTEGER, JSON, REAL, TEXT, TIMESTAMP, UBIGINT, BuildBusy, BuildGone, BuildsNotAligned,
    Column, Delete, DeleteWhere, MemoryStore, PositionConflict, Projection, ProjectionError, ProjectionFailed, RowOp,
    Rows, Table, Update, UpdateWhere, Upsert,
)
from projections.follower import Follower, follow
from projections.leases import REBUILD, LeaseHolder
from projections.lifecycle import (
    NoRollback, OtherBuild, ProjectionStatus, RebuildResult, prune, rebuild, rollback, status,
)
from projections.reading import Reader
from projections.records import Build, Diff, Failure, Switch, TableDiff
from projections.runner import catch_up, maintained_version


def open_backend(url: Any, read_only: bool = False) -> SqlBackend:
    """The projection backend for a ledger database URL (str or ``ledger.store.DatabaseURL``): the
    views live beside the events (same SQLite file; same Postgres database and schema). ``read_only``: a
    PostgreSQL hot standby's copy, opened without creating anything."""
    from ledger.store import DatabaseURL, resolve_url, sqlite_timeout

    db = url if isinstance(url, DatabaseURL) else DatabaseURL.parse(resolve_url(url))
    if db.backend == "sqlite":
        from projections.sqlite import SqliteBackend

        return SqliteBackend(db.path, timeout=sqlite_timeout())
    from projections.postgres import PostgresBackend

    return PostgresBackend(db.psycopg_conninfo(), db.schema, read_only=read_only)


__all__ = [
    "BIGINT", "BOOLEAN", "COLUMN_TYPES", "INTEGER", "JSON", "REAL", "REBUILD", "TEXT", "TIMESTAMP", "UBIGINT",
    "Build", "BuildBusy", "BuildGone", "BuildsNotAligned", "Column", "Delete", "DeleteWhere", "Diff", "Failure",
    "Follower", "LeaseHolder", "NoRollback", "MemoryStore", "OtherBuild", "PositionConflict", "Projection", "ProjectionError",
    "ProjectionFailed", "ProjectionStatus", "Reader", "RebuildResult", "RowOp", "Rows",
    "SqlBackend", "Switch", "Table", "TableDiff", "Update", "UpdateWhere", "Upsert",
    "catch_up", "follow", "maintained_version", "open_backend", "prune", "rebuild", "rollback", "status",
]
