"""Builds, failures and switches: the bookkeeping tables of ``SqlBackend`` (see ``projections.backend``)."""

from __future__ import annotations

import json
from typing import Any, Sequence

from projections.engine import Projection, ProjectionError, ProjectionFailed, Table, check_identifier, physical_name
from projections.records import Build, Diff, Failure, Switch
from projections.sqlbase import SqlBase, _Writer, _now, _q


def index_name(table: str, i: int) -> str:
    """The name of the ``i``-th secondary index of the physical table ``table`` (in the table's schema)."""
    return check_identifier(f"{table}_i{i}", "index")


class Bookkeeping(SqlBase):
    """Creates, lists and drops builds, records failures, switches the live build and logs it."""

    def ensure_meta(self) -> None:
        """Create the bookkeeping tables if missing (idempotent; called when the backend opens)."""
        with self._write_tx() as cur:
            self._lock_tracking(cur)
            for stmt in self._meta_ddl():
                cur.execute(stmt)

    def _build_from_row(self, row: Sequence[Any]) -> Build:
        projection, version, definition_version, fingerprint, definition, position = row
        tables = json.loads(definition) if isinstance(definition, str) else definition
        return Build(projection, version, definition_version, fingerprint, position, tables)

    _BUILD_COLS = "projection, version, definition_version, fingerprint, definition, position"

    def builds(self, name: str) -> dict[int, Build]:
        """Every build of a projection recorded here, by version."""
        with self._read_tx() as cur:
            cur.execute(self._sql(f"SELECT {self._BUILD_COLS} FROM {self._qualify('projection_tracking')} "
                                  "WHERE projection = %s ORDER BY version"), (name,))
            return {b.version: b for b in map(self._build_from_row, cur.fetchall())}

    def live_version(self, name: str) -> int | None:
        with self._read_tx() as cur:
            return self._live(cur, name)

    def _live(self, cur: Any, name: str) -> int | None:
        cur.execute(self._sql(f"SELECT version FROM {self._qualify('projection_live')} WHERE projection = %s"),
                    (name,))
        row = cur.fetchone()
        return row[0] if row else None

    def position(self, name: str, version: int) -> int | None:
        """The last notification id applied to this build (None: no such build)."""
        with self._read_tx() as cur:
            cur.execute(self._sql(f"SELECT position FROM {self._qualify('projection_tracking')} "
                                  "WHERE projection = %s AND version = %s"), (name, version))
            row = cur.fetchone()
            return row[0] if row else None

    def create_build(self, projection: Projection, version: int, replace: bool = False) -> None:
        """Create the tables of ``projection`` as ``version`` with position 0.

        Without ``replace`` an existing build is kept as it is (idempotent). With ``replace`` an
        existing build is dropped first, in the same transaction (readers of a live build see either
        the old tables or the new empty ones, never no table)."""
        projection.check()
        with self._write_tx() as cur:
            self._lock_tracking(cur)
            cur.execute(self._sql(f"SELECT {self._BUILD_COLS} FROM {self._qualify('projection_tracking')} "
                                  "WHERE projection = %s AND version = %s"), (projection.name, version))
            row = cur.fetchone()
            if row is not None:
                if not replace:
                    return
                self._check_lease(cur, projection.name, version)
                self._drop_tables(cur, self._build_from_row(row))
            for table in projection.tables:
                self._create_table(cur, physical_name(projection.name, version, table.name), table)
            definition = json.dumps(projection.definition())
            # The new tables are empty and this writer is the first: its cache starts out knowing every
            # row (none), so a rebuild never reads a row it has not written.
            writer = _Writer(self.cache_rows)
            cur.execute(self._sql(
                f"INSERT INTO {self._qualify('projection_tracking')} (projection, version, definition_version, "
                "fingerprint, definition, position, writer, created_at, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, 0, %s, %s, %s)"),
                (projection.name, version, projection.version, projection.fingerprint(),
                 self._encode_definition(definition), writer.token, self._encode_ts(_now()), self._encode_ts(_now())))
        self._forget(projection.name, version)
        writer.position = 0
        writer.cache.complete.update(t.name for t in projection.tables)
        self._writers[(projection.name, version)] = writer

    def drop_build(self, name: str, version: int) -> None:
        """Drop a build's tables and tracking row. The live build cannot be dropped."""
        with self._write_tx() as cur:
            self._lock_tracking(cur)
            if self._live(cur, name) == version:
                raise ProjectionError(f"projection {name} v{version} is live: switch to another version first")
            cur.execute(self._sql(f"SELECT {self._BUILD_COLS} FROM {self._qualify('projection_tracking')} "
                                  "WHERE projection = %s AND version = %s"), (name, version))
            row = cur.fetchone()
            if row is not None:
                self._check_lease(cur, name, version)
                self._drop_tables(cur, self._build_from_row(row))
        self._forget(name, version)

    def _drop_tables(self, cur: Any, build: Build) -> None:
        for spec in build.tables:
            name = physical_name(build.projection, build.version, spec["name"])
            if spec.get("text_search"):
                self._drop_text_search(cur, name)
            cur.execute(f"DROP TABLE IF EXISTS {self._qualify(name)}")
        for meta in ("projection_tracking", "projection_failures"):
            cur.execute(self._sql(f"DELETE FROM {self._qualify(meta)} WHERE projection = %s AND version = %s"),
                        (build.projection, build.version))

    def _create_table(self, cur: Any, name: str, table: Table) -> None:
        cols = [f"{_q(c.name)} {self._ddl_type(c)}{'' if c.nullable else ' NOT NULL'}" for c in table.columns]
        cols.append(f"PRIMARY KEY ({', '.join(map(_q, table.primary_key))})")
        cur.execute(f"CREATE TABLE {self._qualify(name)} ({', '.join(cols)}){self._table_suffix()}")
        self._create_indexes(cur, name, table)
        if table.text_search is not None:
            self._create_text_search(cur, name, table.text_search)

    def _create_indexes(self, cur: Any, name: str, table: Table) -> None:
        """The secondary indexes of table ``name`` (``Table.indexes``; those it has already are kept)."""
        for i, index in enumerate(table.indexes, 1):
            cur.execute(f"CREATE INDEX IF NOT EXISTS {_q(index_name(name, i))} ON {self._qualify(name)} "
                        f"({', '.join(map(_q, index))})")

    def _forget(self, name: str, version: int) -> None:
        w = self._writers.pop((name, version), None)
        if w is not None:
            w.invalidate()
        for k in [k for k in self._definitions if k[:2] == (name, version)]:
            del self._definitions[k]

    # -- failures ------------------------------------------------------------------------------
    _FAILURES = ("SELECT projection, version, notification_id, stream_id, stream_version, topic, reason, failed_at "
                 "FROM {}")

    def record_failure(self, failure: ProjectionFailed) -> None:
        """Remember the event build ``failure.version`` cannot apply (until a batch commits past it)."""
        assert failure.notification_id is not None, "narrow a batch failure down to its event first"
        with self._write_tx() as cur:
            cur.execute(self._sql(
                f"DELETE FROM {self._qualify('projection_failures')} WHERE projection = %s AND version = %s"),
                (failure.projection, failure.version))
            cur.execute(self._sql(
                f"INSERT INTO {self._qualify('projection_failures')} (projection, version, notification_id, "
                "stream_id, stream_version, topic, reason, failed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"),
                (failure.projection, failure.version, failure.notification_id, str(failure.stream_id),
                 failure.stream_version, failure.topic, failure.reason, self._encode_ts(_now())))

    def failures(self, name: str | None = None) -> dict[tuple[str, int], Failure]:
        """The recorded failures, by (projection, version)."""
        q = self._FAILURES.format(self._qualify("projection_failures"))
        params: tuple[Any, ...] = ()
        if name is not None:
            q += " WHERE projection = %s"
            params = (name,)
        with self._read_tx() as cur:
            return self._failures(cur, q, params)

    def _failures(self, cur: Any, q: str, params: tuple[Any, ...]) -> dict[tuple[str, int], Failure]:
        cur.execute(self._sql(q), params)
        return {(r[0], r[1]): Failure(*r[:7], self._decode_ts(r[7])) for r in cur.fetchall()}

    # -- switches ------------------------------------------------------------------------------
    def switch_live(self, name: str, expected: int | None, to_version: int, mode: str,
                    diff: Diff | None = None, accepted_with_diff: bool = False) -> Switch:
        """Make ``to_version`` the version readers use, in one transaction, and log the switch.
        Refused when the live version is no longer ``expected`` (someone else switched meanwhile)."""
        with self._write_tx() as cur:
            self._lock_tracking(cur)
            live = self._live(cur, name)
            if live != expected:
                raise ProjectionError(f"projection {name}: live version is {live}, expected {expected} "
                                      "(switched concurrently); nothing changed")
            cur.execute(self._sql(f"SELECT position FROM {self._qualify('projection_tracking')} "
                                  "WHERE projection = %s AND version = %s"), (name, to_version))
            row = cur.fetchone()
            if row is None:
                raise ProjectionError(f"projection {name} v{to_version} does not exist")
            now = _now()
            cur.execute(self._sql(
                f"INSERT INTO {self._qualify('projection_live')} (projection, version, switched_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (projection) DO UPDATE SET version = excluded.version, switched_at = excluded.switched_at"),
                (name, to_version, self._encode_ts(now)))
            switch = Switch(name, expected, to_version, row[0], now, mode,
                            diff.digest if diff else None, diff.diff_rows if diff else None, accepted_with_diff)
            cur.execute(self._sql(
                f"INSERT INTO {self._qualify('projection_switches')} (projection, from_version, to_version, position, "
                "switched_at, mode, diff_digest, diff_rows, accepted_with_diff) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"),
                (name, expected, to_version, row[0], self._encode_ts(now), mode, switch.diff_digest,
                 switch.diff_rows, self._encode_bool(accepted_with_diff)))
        return switch

    def switches(self, name: str | None = None) -> list[Switch]:
        """The switch log (oldest first), of one projection or of all."""
        q = (f"SELECT projection, from_version, to_version, position, switched_at, mode, diff_digest, diff_rows, "
             f"accepted_with_diff FROM {self._qualify('projection_switches')}")
        params: tuple[Any, ...] = ()
        if name is not None:
            q += " WHERE projection = %s"
            params = (name,)
        with self._read_tx() as cur:
            cur.execute(self._sql(q + " ORDER BY id"), params)
            return [Switch(p, f, t, pos, self._decode_ts(at), m, d, n, bool(a))
                    for p, f, t, pos, at, m, d, n, a in cur.fetchall()]
