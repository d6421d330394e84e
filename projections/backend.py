"""What both SQL backends share: bookkeeping tables, the exactly-once batch, reads, blue/green diffs.

Tables (in the SQLite file of the events, or in the events' Postgres schema):

* ``<projection>_v<version>_<table>``: the rows of one *build* of a projection. A build is one
  version number; ``definition_version`` records which ``Projection.version`` produced it (a blue/green
  rebuild of an unchanged definition gets the next number).
* ``projection_tracking``: per projection and version, the last notification id applied
  (``position``), the definition (table specs, so readers decode and drops find the tables without the
  code), its fingerprint, and the token of the writer that committed last (validates its row cache).
* ``projection_live``: per projection, the version readers use. Only a switch (one transaction) changes it.
* ``projection_switches``: the log of switches (from, to, when, at which position, diff digest and size,
  whether it was accepted with a diff).
* ``projection_leases``: who holds the lease of a build, or of a projection's rebuild (``projections.leases``).
* ``projection_failures``: per build, the event it could not apply (stream, version, notification, reason),
  until a batch of that build commits past it.

Exactly once: ``apply_batch`` checks the build's lease and locks the tracking row, refuses a batch read from
another position than the tracked one, or whose first position is at or below it (``PositionConflict``,
nothing written), applies the events, writes the rows and the new position, and commits: rows and position
move together or not at all.

Dialects supply connections/transactions, type mapping and a few spellings; everything else is here.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import uuid
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, Sequence

import msgspec

from projections.engine import (
    BuildsNotAligned, Column, OrderBy, PositionConflict, Projection, ProjectionError, ProjectionFailed,
    RowCache, Table, ViewState, check_identifier, parse_order_by, physical_name,
)
from projections.leases import LeaseHolder

#: ``_batch_writes``' "most rows" for stream-wise inserts: always the bulk path (PostgreSQL: COPY).
COPY_ROWS = 1_000_000

#: How many diff entries a ``Diff`` keeps for display (the digest and counts cover all of them).
DIFF_SAMPLES = 20


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


def _transient_errors() -> tuple[type[BaseException], ...]:
    """Errors of an unavailable or busy database (worth retrying), as opposed to errors of the data."""
    errors: list[type[BaseException]] = [sqlite3.OperationalError]
    try:
        import psycopg
        import psycopg_pool

        errors += [psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout]
    except ImportError:  # pragma: no cover
        pass
    from eventsourcing.persistence import InterfaceError, OperationalError

    errors += [OperationalError, InterfaceError]
    return tuple(errors)


TRANSIENT_ERRORS = _transient_errors()


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _digest_value(v: Any) -> Any:
    return v.isoformat() if isinstance(v, datetime) else v


class _Writer:
    """Per (projection, version) state of this process's writer: its token and row cache.

    The cache stays valid while the tracking row still shows our token and the position we committed
    (nobody else wrote in between)."""

    def __init__(self, max_rows: int) -> None:
        self.token = uuid.uuid4().hex
        self.cache = RowCache(max_rows)
        self.position: int | None = None
        # Threads of one process writing the same build take turns (they would queue on the tracking
        # row anyway); the cache is never used by two transactions at once.
        self.lock = threading.Lock()

    def invalidate(self) -> None:
        self.cache.clear()
        self.position = None


class SqlBackend:
    """Base of ``SqliteBackend`` and ``PostgresBackend``. Use them through ``projections.open_backend``."""

    kind = ""
    #: dialect spellings
    PARAM = "%s"
    IS_DISTINCT = "IS DISTINCT FROM"
    FOR_UPDATE = " FOR UPDATE"
    #: rows per multi-row statement chunk
    CHUNK = 500

    #: SQLite: how long a lease stays held without a write renewing it (a holder on another machine, or
    #: one whose release failed); PostgreSQL leases end with their session instead.
    LEASE_TTL = 300.0

    def __init__(self, cache_rows: int = 100_000) -> None:
        self.cache_rows = cache_rows
        self._writers: dict[tuple[str, int], _Writer] = {}
        self._definitions: dict[tuple[str, int, str], dict[str, Table]] = {}
        self._row_encoders: dict[Table, Any] = {}
        self._leases = threading.local()  # .held: (projection, build) -> token, this thread's leases

    # -- dialect hooks -------------------------------------------------------------------------
    @contextmanager
    def _write_tx(self) -> Iterator[Any]:  # pragma: no cover - dialect
        """A write transaction (serialized with other writers of the same rows); yields a cursor."""
        raise NotImplementedError
        yield

    @contextmanager
    def _read_tx(self) -> Iterator[Any]:  # pragma: no cover - dialect
        """A read-only transaction over one consistent snapshot; yields a cursor."""
        raise NotImplementedError
        yield

    def _ddl_type(self, col: Column) -> str:  # pragma: no cover - dialect
        raise NotImplementedError

    def _meta_ddl(self) -> list[str]:  # pragma: no cover - dialect
        raise NotImplementedError

    def _encoder(self, col: Column) -> Any:  # pragma: no cover - dialect
        """A function normalized value -> database parameter."""
        raise NotImplementedError

    def _decoder(self, col: Column) -> Any:  # pragma: no cover - dialect
        """A function database value -> normalized value."""
        raise NotImplementedError

    def _qualify(self, name: str) -> str:
        return _q(name)

    def _table_suffix(self) -> str:
        return ""

    def _upsert_rows(self, cur: Any, table: Table, name: str, rows: list[dict[str, Any]]) -> None:
        """Insert or replace whole rows (dialects may override with a faster bulk path)."""
        cur.executemany(self._upsert_sql(table, name), list(map(self._row_encoder(table), rows)))

    def _row_encoder(self, table: Table) -> Any:
        """A function: normalized row dict -> tuple of parameters in column order (cached per table shape)."""
        fn = self._row_encoders.get(table)
        if fn is None:
            cols = table.column_names
            encoders = [(i, self._encoder(c)) for i, c in enumerate(table.columns)]
            encoders = [(i, e) for i, e in encoders if e is not _identity]

            def fn(row: Mapping[str, Any]) -> tuple[Any, ...]:
                values = [row[c] for c in cols]
                for i, e in encoders:
                    if values[i] is not None:
                        values[i] = e(values[i])
                return tuple(values)

            self._row_encoders[table] = fn
        return fn

    def _lock_tracking(self, cur: Any) -> None:
        """Serialize DDL and switches (Postgres: an advisory lock; SQLite: the write lock is enough)."""

    def _acquire(self, name: str, build: int, token: str, purpose: str, wait: float) -> None:  # pragma: no cover
        """Take the lease for ``token`` within ``wait`` seconds, else raise ``BuildBusy``."""
        raise NotImplementedError

    def _release(self, name: str, build: int, token: str) -> None:  # pragma: no cover - dialect
        raise NotImplementedError

    def _check_lease(self, cur: Any, name: str, build: int) -> None:  # pragma: no cover - dialect
        """Inside a write transaction of a build: refuse (``BuildBusy``) when another writer holds its lease;
        renew this thread's leases of the projection."""
        raise NotImplementedError

    def lease_holders(self, name: str | None = None) -> list[LeaseHolder]:  # pragma: no cover - dialect
        """The leases held now (of one projection, or of all), by live holders."""
        raise NotImplementedError

    def _is_row_error(self, e: BaseException) -> bool:  # pragma: no cover - dialect
        """Does ``e``, raised while writing a batch's rows, say the rows cannot be stored (an error of the
        data, not of the database's availability)?"""
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - dialect
        raise NotImplementedError

    def __enter__(self) -> SqlBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- leases ----------------------------------------------------------------------------------
    @contextmanager
    def lease(self, name: str, build: int, purpose: str, wait: float = 0.0) -> Iterator[None]:
        """Hold the lease of ``build`` of projection ``name`` (``leases.REBUILD``: its rebuild lease) for
        the block. Waits up to ``wait`` seconds for the holder to release it, then raises ``BuildBusy``
        naming the holder. Reentrant within a thread (an inner block of a held lease holds it already)."""
        held = self._held()
        if (name, build) in held:
            yield
            return
        token = uuid.uuid4().hex
        self._acquire(name, build, token, purpose, wait)
        held[(name, build)] = token
        try:
            yield
        finally:
            del held[(name, build)]
            self._release(name, build, token)

    def _held(self) -> dict[tuple[str, int], str]:
        held = getattr(self._leases, "held", None)
        if held is None:
            held = self._leases.held = {}
        return held

    def holds(self, name: str, build: int) -> bool:
        """Does the calling thread hold this lease?"""
        return (name, build) in self._held()

    # -- SQL helpers ---------------------------------------------------------------------------
    def _sql(self, q: str) -> str:
        return q if self.PARAM == "%s" else q.replace("%s", self.PARAM)

    def _upsert_sql(self, table: Table, name: str) -> str:
        cols = table.column_names
        values = ", ".join([self.PARAM] * len(cols))
        sql = (f"INSERT INTO {self._qualify(name)} ({', '.join(map(_q, cols))}) VALUES ({values}) "
               f"ON CONFLICT ({', '.join(map(_q, table.primary_key))}) ")
        rest = [c for c in cols if c not in table.primary_key]
        if rest:
            return sql + "DO UPDATE SET " + ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in rest)
        return sql + "DO NOTHING"

    def _where(self, table: Table, where: Mapping[str, Any], alias: str = "") -> tuple[str, list[Any]]:
        parts, params = [], []
        for name, value in where.items():
            col = f"{alias}{_q(name)}"
            enc = self._encoder(table.column(name))
            if value is None:
                parts.append(f"{col} IS NULL")
            elif isinstance(value, tuple):
                if not value:
                    parts.append("1 = 0")
                else:
                    parts.append(f"{col} IN ({', '.join([self.PARAM] * len(value))})")
                    params.extend(enc(v) for v in value)
            else:
                parts.append(f"{col} = {self.PARAM}")
                params.append(enc(value))
        return (" WHERE " + " AND ".join(parts)) if parts else "", params

    def _order(self, order: list[tuple[str, bool]]) -> str:
        if not order:
            return ""
        return " ORDER BY " + ", ".join(
            f"{_q(n)} DESC NULLS LAST" if desc else f"{_q(n)} ASC NULLS FIRST" for n, desc in order)

    def _decode_rows(self, table: Table, rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
        cols = table.column_names
        dec = [self._decoder(c) for c in table.columns]
        return [{c: (d(v) if v is not None else None) for c, d, v in zip(cols, dec, r)} for r in rows]

    # -- bookkeeping ---------------------------------------------------------------------------
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
            cur.execute(f"DROP TABLE IF EXISTS {self._qualify(physical_name(build.projection, build.version, spec['name']))}")
        for meta in ("projection_tracking", "projection_failures"):
            cur.execute(self._sql(f"DELETE FROM {self._qualify(meta)} WHERE projection = %s AND version = %s"),
                        (build.projection, build.version))

    def _create_table(self, cur: Any, name: str, table: Table) -> None:
        cols = [f"{_q(c.name)} {self._ddl_type(c)}{'' if c.nullable else ' NOT NULL'}" for c in table.columns]
        cols.append(f"PRIMARY KEY ({', '.join(map(_q, table.primary_key))})")
        cur.execute(f"CREATE TABLE {self._qualify(name)} ({', '.join(cols)}){self._table_suffix()}")
        for i, index in enumerate(table.indexes, 1):
            iname = check_identifier(f"{name}_i{i}", "index")
            cur.execute(f"CREATE INDEX {_q(iname)} ON {self._qualify(name)} ({', '.join(map(_q, index))})")

    def _forget(self, name: str, version: int) -> None:
        w = self._writers.pop((name, version), None)
        if w is not None:
            w.invalidate()
        for k in [k for k in self._definitions if k[:2] == (name, version)]:
            del self._definitions[k]

    def _encode_definition(self, definition: str) -> Any:
        return definition

    def _encode_ts(self, ts: datetime) -> Any:
        return ts

    def _decode_ts(self, v: Any) -> datetime:
        return v

    # -- the exactly-once batch -----------------------------------------------------------------
    def apply_batch(self, projection: Projection, version: int, items: Sequence[tuple[int, Any]],
                    upto: int | None = None, after: int | None = None) -> int:
        """Apply ``items`` ((notification id, event), ids ascending) to build ``version`` and move its
        position to ``max(last id, upto)``, in one transaction. Returns the new position.

        ``upto`` lets a topic-filtered projection record that it has seen every notification up to a
        head even when the last ones were not for it (an empty ``items`` just moves the position).
        ``after`` is the position the batch was read from: the batch is refused unless the build is
        still there. Raises ``PositionConflict`` (nothing written) when the build moved from ``after``, or
        when the first position (first id, or ``upto`` for an empty batch) is at or below the tracked
        position; ``BuildBusy`` when another writer holds the build's lease. A failure of the projection on
        the events, or rows it gives that cannot be stored, raise ``ProjectionFailed`` and roll the whole
        batch back: the previous position and rows stay."""
        if not items and upto is None:
            raise ValueError("empty batch without upto")
        ids = [i for i, _ in items]
        if any(b <= a for a, b in zip(ids, ids[1:])):
            raise ProjectionError("batch notification ids must be strictly ascending")
        first = ids[0] if ids else upto
        assert first is not None
        new_position = max(ids[-1] if ids else 0, upto or 0)
        key = (projection.name, version)
        writer = self._writers.get(key)
        if writer is None:
            writer = self._writers.setdefault(key, _Writer(self.cache_rows))
        topics = projection.topic_set()
        if topics is not None:  # not for this projection (catch-up filters in SQL already)
            items = [(nid, e) for nid, e in items if getattr(type(e), "TOPIC", None) in topics]
        with writer.lock:
            # Whatever the projection reads from elsewhere (a fold's states from the event store) is
            # read now, before the view transaction holds its locks (on SQLite, the file's write lock).
            try:
                projection.prepare([e for _, e in items])
            except (ProjectionError, *TRANSIENT_ERRORS):
                raise
            except Exception as e:
                raise ProjectionFailed(projection.name, version, f"{type(e).__name__}: {e}") from e
            return self._apply_batch(projection, version, items, first, new_position, after, writer)

    def _batch_writes(self, cur: Any, most_rows: int) -> Any:
        """Context of a batch's row writes and position update (``most_rows``: the most rows written
        to one table); dialects may send them together."""
        return nullcontext()

    def _apply_batch(self, projection: Projection, version: int, items: Sequence[tuple[int, Any]],
                     first: int, new_position: int, after: int | None, writer: _Writer) -> int:
        name = projection.name
        try:
            with self._write_tx() as cur:
                self._check_lease(cur, name, version)
                cur.execute(self._sql(
                    f"SELECT position, writer, fingerprint FROM {self._qualify('projection_tracking')} "
                    f"WHERE projection = %s AND version = %s{self.FOR_UPDATE}"), (name, version))
                row = cur.fetchone()
                if row is None:
                    raise ProjectionError(f"projection {name} v{version} has no tables here "
                                          "(create the build first)")
                position, token, fingerprint = row
                if fingerprint != projection.fingerprint():
                    raise ProjectionError(
                        f"projection {name} v{version} was built with other tables than the "
                        "code defines: bump the projection's version or rebuild it")
                if after is not None and position != after:
                    raise PositionConflict(
                        f"batch refused: projection {name} v{version} is at notification {position}, the "
                        f"batch was read at {after} (another writer moved or reset the build)")
                if first <= position:
                    raise PositionConflict(
                        f"batch refused: projection {name} v{version} is at notification "
                        f"{position}, the batch starts at {first} (already applied)")
                if token != writer.token or position != writer.position:
                    writer.cache.clear()  # someone else wrote since we filled the cache
                state = ViewState(projection.table_map(), _TxStore(self, cur, name, version), writer.cache)
                projection.begin_batch()
                for nid, event in items:
                    try:
                        ops = projection.apply(event, state)
                        for op in ops or ():
                            state.apply(op)
                    except Exception as e:
                        if isinstance(e, TRANSIENT_ERRORS) and not self._is_row_error(e):
                            raise
                        raise ProjectionFailed(name, version, f"{type(e).__name__}: {e}").at(nid, event) from e
                try:
                    for op in projection.end_batch(state) or ():
                        state.apply(op)
                    with self._batch_writes(cur, max(map(len, state.dirty.values()), default=0)):
                        state.flush()
                        cur.execute(self._sql(
                            f"UPDATE {self._qualify('projection_tracking')} SET position = %s, writer = %s, "
                            "updated_at = %s WHERE projection = %s AND version = %s"),
                            (new_position, writer.token, self._encode_ts(_now()), name, version))
                        cur.execute(self._sql(
                            f"DELETE FROM {self._qualify('projection_failures')} WHERE projection = %s "
                            "AND version = %s AND notification_id <= %s"), (name, version, new_position))
                except Exception as e:
                    # Rows are computed and written for the whole batch at its end: which event gave a row
                    # that cannot be stored is not known here (the runner narrows the batch down).
                    if isinstance(e, TRANSIENT_ERRORS) and not self._is_row_error(e):
                        raise
                    raise ProjectionFailed(name, version, f"{type(e).__name__}: {e}") from e
        except BaseException:
            writer.invalidate()  # the cache may hold rows of the rolled-back batch
            raise
        writer.position = new_position
        writer.cache.trim()
        return new_position

    # -- stream-wise builds (``projections.streamwise``) -------------------------------------------
    def insert_rows(self, projection: Projection, version: int, rows: Mapping[str, Sequence[dict[str, Any]]],
                    position: int | None = None, delegate: str | None = None) -> None:
        """Insert normalized rows into build ``version`` while it is built stream-wise (none of their keys is
        in it yet: a duplicate key is an error), in one transaction; with ``position``, the build's position
        moves there from 0 in the same transaction (the last one of the build). Checks the build's lease:
        held by the calling thread, or, with ``delegate`` (the holder's lease token), by the rebuilding process
        this worker writes for. The build's row cache is dropped (rows were written around it)."""
        name = projection.name
        with self._write_tx() as cur:
            if delegate is None:
                self._check_lease(cur, name, version)
            else:
                self._check_delegate(cur, name, version, delegate)
            most = max(map(len, rows.values()), default=0)
            with self._batch_writes(cur, max(most, COPY_ROWS)):
                for table in projection.tables:
                    some = rows.get(table.name)
                    if some:
                        self._insert_rows(cur, table, physical_name(name, version, table.name), some)
                if position is not None:
                    cur.execute(self._sql(
                        f"UPDATE {self._qualify('projection_tracking')} SET position = %s, writer = NULL, "
                        "updated_at = %s WHERE projection = %s AND version = %s AND position = 0"),
                        (position, self._encode_ts(_now()), name, version))
                    if cur.rowcount != 1:
                        raise PositionConflict(f"projection {name} v{version} is no longer an empty build at 0")
        self._forget(name, version)

    def _insert_rows(self, cur: Any, table: Table, name: str, rows: Sequence[dict[str, Any]]) -> None:
        cols = table.column_names
        cur.executemany(f"INSERT INTO {self._qualify(name)} ({', '.join(map(_q, cols))}) "
                        f"VALUES ({', '.join([self.PARAM] * len(cols))})", list(map(self._row_encoder(table), rows)))

    def _check_delegate(self, cur: Any, name: str, build: int, token: str) -> None:  # pragma: no cover - dialect
        """Inside a worker's write transaction: refuse (``BuildBusy``) unless lease ``token`` of the build is
        still held, by a live holder."""
        raise NotImplementedError

    def lease_token(self, name: str, build: int) -> str:
        """The token of the lease of ``build`` the calling thread holds (what its workers write under)."""
        try:
            return self._held()[(name, build)]
        except KeyError:
            raise ProjectionError(f"projection {name} v{build}: this thread does not hold its lease") from None

    def reopen(self) -> SqlBackend:  # pragma: no cover - dialect
        """A new backend on the same database, with connections of its own (for a worker process)."""
        raise NotImplementedError

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

    def _encode_bool(self, v: bool) -> Any:
        return v

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

    # -- reading ---------------------------------------------------------------------------------
    @contextmanager
    def reading(self, projection: Projection | type[Projection] | str,
                version: int | None = None) -> Iterator[Reader]:
        """A reader of the LIVE version's tables (or of build ``version``), all reads in one snapshot::

            with backend.reading("chat_status") as r:
                chats = r.query("status", where={"organization_id": org}, order_by="-updated_at")

        Raises ``ProjectionError`` when the projection has no live version yet (catch it up first)."""
        name = projection if isinstance(projection, str) else projection.name
        with self._read_tx() as cur:
            reader = self._reader(cur, name, version)
            if reader is None:
                if version is not None:
                    raise ProjectionError(f"projection {name} has no build v{version}")
                raise ProjectionError(f"projection {name} has no live version yet: catch it up first")
            yield reader

    def _reader(self, cur: Any, name: str, version: int | None) -> Reader | None:
        if version is None:
            cur.execute(self._sql(
                f"SELECT l.version, t.fingerprint, t.definition FROM {self._qualify('projection_live')} l "
                f"JOIN {self._qualify('projection_tracking')} t ON t.projection = l.projection "
                "AND t.version = l.version WHERE l.projection = %s"), (name,))
        else:
            cur.execute(self._sql(
                f"SELECT version, fingerprint, definition FROM {self._qualify('projection_tracking')} "
                "WHERE projection = %s AND version = %s"), (name, version))
        row = cur.fetchone()
        if row is None:
            return None
        version, fingerprint, definition = row
        tables = self._definitions.get((name, version, fingerprint))
        if tables is None:
            specs = json.loads(definition) if isinstance(definition, str) else definition
            tables = {s["name"]: Table.from_spec(s) for s in specs}
            self._definitions[(name, version, fingerprint)] = tables
        return Reader(self, cur, name, version, tables)

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One read transaction over every projection's live build, position and recorded failure (what
        ``events verify`` compares with the log)."""
        with self._read_tx() as cur:
            yield Snapshot(self, cur)

    def stored_form(self, table: Table, row: dict[str, Any]) -> dict[str, Any]:
        """A normalized row as reading it back from this database gives it (PostgreSQL: see NUL)."""
        return row

    def query(self, projection: Projection | type[Projection] | str, table: str,
              where: Mapping[str, Any] | None = None, order_by: OrderBy = None,
              limit: int | None = None, version: int | None = None,
              after: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of ``table`` in the live version (or build ``version``): ``where`` = {column: value |
        [values] | None}, ``order_by`` = "col" | "-col" | [..] (default: primary key order), ``after`` =
        {column: value, ..}: only rows whose (columns) > (values), a keyset page. Values are
        canonical (text as str, timestamps as aware UTC datetimes, json as builtins)."""
        with self.reading(projection, version) as r:
            return r.query(table, where, order_by, limit, after)

    def _select(self, cur: Any, table: Table, name: str, where: Mapping[str, Any],
                order: list[tuple[str, bool]], limit: int | None = None,
                after: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        w, params = self._where(table, where)
        if after:
            keyset = f"({', '.join(map(_q, after))}) > ({', '.join([self.PARAM] * len(after))})"
            w = f"{w} AND {keyset}" if w else f" WHERE {keyset}"
            params += [self._encoder(table.column(c))(v) for c, v in after.items()]
        sql = f"SELECT {', '.join(map(_q, table.column_names))} FROM {self._qualify(name)}{w}{self._order(order)}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        cur.execute(sql, params)
        return self._decode_rows(table, cur.fetchall())

    # -- blue/green comparison -----------------------------------------------------------------
    def compare(self, name: str, live_version: int, new_version: int) -> Diff:
        """Compare two builds row by row, in one snapshot, at the same position (else raise).

        Per table: tables only in one version count every row as added/removed; for common tables,
        added/removed columns and columns whose type changed are reported, and rows are compared on the
        common, same-typed columns, matched by the new primary key (if it is among them; otherwise whole
        rows are compared as sets). Any schema difference or differing row makes the diff non-empty.
        The digest covers all of it in a deterministic order, so the same diff gives the same digest."""
        h = hashlib.sha256()
        samples: list[dict[str, Any]] = []
        table_diffs: list[TableDiff] = []
        total = 0

        def record(entry: dict[str, Any]) -> None:
            h.update(json.dumps(entry, sort_keys=True, default=_digest_value).encode())
            h.update(b"\n")
            if len(samples) < DIFF_SAMPLES and "kind" in entry:
                samples.append(entry)

        with self._read_tx() as cur:
            cur.execute(self._sql(f"SELECT {self._BUILD_COLS} FROM {self._qualify('projection_tracking')} "
                                  "WHERE projection = %s AND version IN (%s, %s)"), (name, live_version, new_version))
            builds = {b.version: b for b in map(self._build_from_row, cur.fetchall())}
            if live_version not in builds or new_version not in builds:
                raise ProjectionError(f"projection {name}: cannot compare v{live_version} with v{new_version}: "
                                      "missing build")
            old_b, new_b = builds[live_version], builds[new_version]
            if old_b.position != new_b.position:
                raise BuildsNotAligned(f"projection {name}: v{live_version} is at {old_b.position}, v{new_version} at "
                                      f"{new_b.position}: builds must be compared at the same position")
            old_t, new_t = old_b.table_specs(), new_b.table_specs()
            for tname in sorted(set(old_t) | set(new_t)):
                if tname not in old_t or tname not in new_t:
                    status = "added" if tname not in old_t else "removed"
                    b = new_b if status == "added" else old_b
                    cur.execute(f"SELECT COUNT(*) FROM {self._qualify(physical_name(name, b.version, tname))}")
                    n = cur.fetchone()[0]
                    td = TableDiff(tname, status, rows_added=n if status == "added" else 0,
                                   rows_removed=n if status == "removed" else 0)
                    record({"table": tname, "status": status, "rows": n})
                else:
                    td = self._compare_table(cur, name, old_b.version, old_t[tname], new_b.version, new_t[tname], record)
                    if td.columns_added or td.columns_removed or td.columns_retyped:
                        record({"table": tname, "columns_added": td.columns_added,
                                "columns_removed": td.columns_removed, "columns_retyped": td.columns_retyped})
                table_diffs.append(td)
                total += td.rows_added + td.rows_removed + td.rows_changed
            live_rows, new_rows = (self._rows_digest(cur, name, b) for b in (old_b, new_b))
        equal = total == 0 and all(td.status == "common" and not (td.columns_added or td.columns_removed
                                                                   or td.columns_retyped) for td in table_diffs)
        digest = hashlib.sha256(f"{live_rows}\n{new_rows}\n{h.hexdigest()}".encode()).hexdigest()
        return Diff(name, live_version, new_version, new_b.position, equal, total,
                    digest, table_diffs, samples, live_rows, new_rows)

    def _rows_digest(self, cur: Any, name: str, build: Build) -> str:
        """sha256 over a build's rows: each table by name, each row (canonical JSON) in primary-key order."""
        h = hashlib.sha256()
        tables = build.table_specs()
        reader = Reader(self, cur, name, build.version, tables)
        for tname in sorted(tables):
            h.update(f"table {tname}\n".encode())
            for row in reader.scan(tname):
                h.update(json.dumps(row, sort_keys=True, default=_digest_value).encode())
                h.update(b"\n")
        return h.hexdigest()

    def _compare_table(self, cur: Any, name: str, old_v: int, old: Table, new_v: int, new: Table,
                       record: Any) -> TableDiff:
        old_types = {c.name: c.type for c in old.columns}
        new_types = {c.name: c.type for c in new.columns}
        added = [c for c in new.column_names if c not in old_types]
        removed = [c for c in old.column_names if c not in new_types]
        retyped = [c for c in new.column_names if c in old_types and old_types[c] != new_types[c]]
        common = [c for c in new.column_names if c in old_types and c not in retyped]
        td = TableDiff(new.name, "common", added, removed, retyped)
        o_name = self._qualify(physical_name(name, old_v, old.name))
        n_name = self._qualify(physical_name(name, new_v, new.name))
        cols = [new.column(c) for c in common]
        dec = [self._decoder(c) for c in cols]

        def decode(values: Sequence[Any]) -> dict[str, Any]:
            return {c.name: (d(v) if v is not None else None) for c, d, v in zip(cols, dec, values)}

        if common and all(k in common for k in new.primary_key):
            keys = list(new.primary_key)
            rest = [c for c in common if c not in keys]
            on = " AND ".join(f"n.{_q(k)} = o.{_q(k)}" for k in keys)
            k0 = _q(keys[0])
            cond = [f"n.{k0} IS NULL", f"o.{k0} IS NULL"] + [f"n.{_q(c)} {self.IS_DISTINCT} o.{_q(c)}" for c in rest]
            sel = ", ".join([f"n.{_q(c)}" for c in common] + [f"o.{_q(c)}" for c in common])
            order = ", ".join(f"COALESCE(n.{_q(k)}, o.{_q(k)})" for k in keys)
            cur.execute(f"SELECT {sel} FROM {n_name} n FULL OUTER JOIN {o_name} o ON {on} "
                        f"WHERE {' OR '.join(cond)} ORDER BY {order}")
            n = len(common)
            for r in _iter(cur):
                nrow, orow = decode(r[:n]), decode(r[n:])
                if r[common.index(keys[0])] is None:
                    td.rows_removed += 1
                    record({"table": new.name, "kind": "removed", "key": [orow[k] for k in keys], "old": orow})
                elif r[n + common.index(keys[0])] is None:
                    td.rows_added += 1
                    record({"table": new.name, "kind": "added", "key": [nrow[k] for k in keys], "new": nrow})
                else:
                    td.rows_changed += 1
                    changed = [c for c in rest if nrow[c] != orow[c]]
                    record({"table": new.name, "kind": "changed", "key": [nrow[k] for k in keys],
                            "columns": changed, "old": {c: orow[c] for c in changed},
                            "new": {c: nrow[c] for c in changed}})
        else:
            td.compared_by = "row"
            sel = ", ".join(map(_q, common)) if common else "1"
            order = ", ".join(str(i + 1) for i in range(max(len(common), 1)))
            for kind, a, b in (("added", n_name, o_name), ("removed", o_name, n_name)):
                cur.execute(f"SELECT {sel} FROM {a} EXCEPT SELECT {sel} FROM {b} ORDER BY {order}")
                for r in _iter(cur):
                    row = decode(r) if common else {}
                    if kind == "added":
                        td.rows_added += 1
                    else:
                        td.rows_removed += 1
                    record({"table": new.name, "kind": kind, ("new" if kind == "added" else "old"): row})
        return td


def _iter(cur: Any, size: int = 1000) -> Iterator[Sequence[Any]]:
    while True:
        rows = cur.fetchmany(size)
        if not rows:
            return
        yield from rows


class Reader:
    """Reads one live version inside one read transaction (see ``SqlBackend.reading``)."""

    def __init__(self, backend: SqlBackend, cur: Any, name: str, version: int, tables: dict[str, Table]) -> None:
        self.backend, self.cur, self.projection, self.version, self.tables = backend, cur, name, version, tables

    def query(self, table: str, where: Mapping[str, Any] | None = None, order_by: OrderBy = None,
              limit: int | None = None, after: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        t = self.tables.get(table)
        if t is None:
            raise ProjectionError(f"projection {self.projection} v{self.version} has no table {table!r}")
        return self.backend._select(self.cur, t, physical_name(self.projection, self.version, table),
                                    t.normalize_where(where), parse_order_by(t, order_by), limit, after)

    def scan(self, table: str, page: int = 1000) -> Iterator[dict[str, Any]]:
        """Every row of ``table`` in primary-key order, read ``page`` rows at a time (memory stays bounded)."""
        t = self.tables[table]
        b = self.backend
        keys = t.primary_key
        encoders = [b._encoder(t.column(k)) for k in keys]
        select = f"SELECT {', '.join(map(_q, t.column_names))} FROM {b._qualify(physical_name(self.projection, self.version, table))}"
        after = f" WHERE ({', '.join(map(_q, keys))}) > ({', '.join([b.PARAM] * len(keys))})"
        order = f" ORDER BY {', '.join(map(_q, keys))} LIMIT {int(page)}"
        last: tuple[Any, ...] | None = None
        while True:
            if last is None:
                self.cur.execute(select + order)
            else:
                self.cur.execute(select + after + order, [e(v) for e, v in zip(encoders, last)])
            rows = b._decode_rows(t, self.cur.fetchall())
            if not rows:
                return
            yield from rows
            last = t.key_of(rows[-1])

    def position(self) -> int:
        """The notification the rows read here reflect (same snapshot as ``query``)."""
        b = self.backend
        self.cur.execute(b._sql(f"SELECT position FROM {b._qualify('projection_tracking')} "
                                "WHERE projection = %s AND version = %s"), (self.projection, self.version))
        return self.cur.fetchone()[0]


class Snapshot:
    """Reads of several projections in one read transaction (``SqlBackend.snapshot``)."""

    def __init__(self, backend: SqlBackend, cur: Any) -> None:
        self.backend, self.cur = backend, cur

    def live(self, name: str) -> Reader | None:
        """A reader of the projection's live build, or None when nothing is live."""
        return self.backend._reader(self.cur, name, None)

    def build(self, name: str, version: int) -> Reader | None:
        """A reader of build ``version``, or None when there is no such build."""
        return self.backend._reader(self.cur, name, version)

    def failure(self, name: str, version: int) -> Failure | None:
        b = self.backend
        q = b._FAILURES.format(b._qualify("projection_failures")) + " WHERE projection = %s AND version = %s"
        return b._failures(self.cur, q, (name, version)).get((name, version))


class _TxStore:
    """The ``RowStore`` of one build inside a backend's write transaction."""

    def __init__(self, backend: SqlBackend, cur: Any, projection: str, version: int) -> None:
        self.b, self.cur, self.projection, self.version = backend, cur, projection, version
        self._fetch_sql: dict[str, str] = {}

    def _name(self, table: Table) -> str:
        return physical_name(self.projection, self.version, table.name)

    def fetch(self, table: Table, key: tuple[Any, ...]) -> dict[str, Any] | None:
        sql = self._fetch_sql.get(table.name)
        if sql is None:
            cond = " AND ".join(f"{_q(k)} = {self.b.PARAM}" for k in table.primary_key)
            sql = self._fetch_sql[table.name] = (
                f"SELECT {', '.join(map(_q, table.column_names))} FROM {self.b._qualify(self._name(table))} WHERE {cond}")
        enc = [self.b._encoder(table.column(k)) for k in table.primary_key]
        self.cur.execute(sql, tuple(e(v) for e, v in zip(enc, key)))
        row = self.cur.fetchone()
        return self.b._decode_rows(table, [row])[0] if row is not None else None

    def fetch_where(self, table: Table, where: Mapping[str, Any], order: list[tuple[str, bool]]) -> list[dict[str, Any]]:
        return self.b._select(self.cur, table, self._name(table), where, order)

    def write(self, table: Table, deletes: list[tuple[Any, ...]], upserts: list[dict[str, Any]]) -> None:
        name = self._name(table)
        qname = self.b._qualify(name)
        enc = [self.b._encoder(table.column(k)) for k in table.primary_key]
        if deletes:
            if len(table.primary_key) == 1:
                e = enc[0]
                for i in range(0, len(deletes), self.b.CHUNK):
                    chunk = deletes[i:i + self.b.CHUNK]
                    self.cur.execute(f"DELETE FROM {qname} WHERE {_q(table.primary_key[0])} IN "
                                     f"({', '.join([self.b.PARAM] * len(chunk))})", [e(k[0]) for k in chunk])
            else:
                cond = " AND ".join(f"{_q(k)} = {self.b.PARAM}" for k in table.primary_key)
                self.cur.executemany(f"DELETE FROM {qname} WHERE {cond}",
                                     [tuple(e(v) for e, v in zip(enc, k)) for k in deletes])
        if upserts:
            self.b._upsert_rows(self.cur, table, name, upserts)


def _identity(v: Any) -> Any:
    """The encoder/decoder of values the driver takes and returns as they are."""
    return v


def _q(name: str) -> str:
    """Quote an identifier (names are validated; quoting keeps reserved words usable)."""
    return '"' + name.replace('"', '""') + '"'
