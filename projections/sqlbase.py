"""The bottom layer of the SQL backends: the dialect hooks, leases, SQL spellings and helpers.

``SqlBase`` holds what every other layer of ``SqlBackend`` builds on (``builds``, ``reading``, ``compare``,
``batch``): the connection and transaction hooks a dialect (``sqlite``, ``postgres``) supplies, this
process's leases and writers, and the SQL text of quoting, parameters, WHERE/ORDER BY and row decoding.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

from projections.engine import Column, ProjectionError, RowCache, Table
from projections.leases import LeaseHolder


_TRANSIENT: dict[bool, tuple[type[BaseException], ...]] = {}


def transient_errors() -> tuple[type[BaseException], ...]:
    """Errors of an unavailable or busy database (worth retrying), as opposed to errors of the data. psycopg's
    are among them once psycopg is imported (only then can they be raised): a SQLite ledger never imports it."""
    loaded = "psycopg" in sys.modules
    found = _TRANSIENT.get(loaded)
    if found is None:
        from eventsourcing.persistence import InterfaceError, OperationalError

        errors: list[type[BaseException]] = [sqlite3.OperationalError, OperationalError, InterfaceError]
        if loaded:
            import psycopg
            import psycopg_pool

            errors += [psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout]
        found = _TRANSIENT[loaded] = tuple(errors)
    return found


class TextStatistics(NamedTuple):
    """A table's statistics as its database gathered them: rows, the share of rows holding each of the text
    search column's most common words, and per column its most common values' shares and the share of any
    other value (for the rows an equality filter keeps)."""

    rows: float
    words: dict[str, float]
    values: dict[str, tuple[dict[str, float], float]]

    def share(self, where: Mapping[str, Any]) -> float:
        """The share of rows with these column values (columns taken as independent; a column without
        statistics keeps every row)."""
        out = 1.0
        for column, value in where.items():
            common, other = self.values.get(column, ({}, 1.0))
            out *= common.get(str(value), other)
        return out


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


class SqlBase:
    """Dialect hooks, leases and SQL helpers of a backend (the layers of ``SqlBackend`` build on it)."""

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

    def _create_text_search(self, cur: Any, name: str, column: str) -> None:  # pragma: no cover - dialect
        """Index ``column`` of the new table ``name`` for full-text search, kept in step with its rows by
        the database (``Table.text_search``)."""
        raise NotImplementedError

    def _drop_text_search(self, cur: Any, name: str) -> None:
        """Drop what ``_create_text_search`` made beside table ``name`` (before the table is dropped)."""

    def _suspend_text_search(self, cur: Any, name: str, column: str) -> None:
        """Stop keeping the index of table ``name`` in step row by row, while a stream-wise build bulk-inserts
        into it (``_resume_text_search`` indexes every row at once, in the build's last transaction)."""

    def _resume_text_search(self, cur: Any, name: str, column: str) -> None:
        """Undo ``_suspend_text_search``: index the rows, keep the index in step again (a no-op if it is)."""

    def _text_search_sql(self, docs: str, column: str, alias: str,
                         newest: str | None) -> tuple[str, str, str, int, str]:  # pragma: no cover - dialect
        """The dialect's pieces of a full-text query over table ``docs`` (aliased ``alias``): a FROM fragment,
        the match condition (one parameter: the query in the dialect's syntax), the rank expression (lower is
        better) and how many times it takes the query as a parameter, and an expression of recency (higher:
        newer, by column ``newest`` when given) the index can give matches in."""
        raise NotImplementedError

    def _analyze(self, cur: Any, name: str) -> None:
        """Gather the planner's statistics of table ``name``, filled at once by a stream-wise build (where the
        planner needs them to choose between its indexes)."""

    def _text_statistics(self, cur: Any, name: str, column: str) -> TextStatistics | None:
        """What the database's statistics say of table ``name`` (``TextStatistics``); None where the engine gives
        matches newest first anyway (``Reader.text_search`` then never walks the newest rows itself)."""
        return None

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

    def scrub(self) -> None:
        """After an erasure, what the dialect does so the rewritten rows' old text is in none of its files
        (SQLite: ``SqliteBackend.scrub``). PostgreSQL keeps old row versions until vacuum reuses their space, and
        in its write-ahead log and archives: docs/privacy.md says for how long; nothing is done here."""

    def close(self) -> None:  # pragma: no cover - dialect
        raise NotImplementedError

    def _check_delegate(self, cur: Any, name: str, build: int, token: str) -> None:  # pragma: no cover - dialect
        """Inside a worker's write transaction: refuse (``BuildBusy``) unless lease ``token`` of the build is
        still held, by a live holder."""
        raise NotImplementedError

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

    def lease_token(self, name: str, build: int) -> str:
        """The token of the lease of ``build`` the calling thread holds (what its workers write under)."""
        try:
            return self._held()[(name, build)]
        except KeyError:
            raise ProjectionError(f"projection {name} v{build}: this thread does not hold its lease") from None

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

    def _encode_definition(self, definition: str) -> Any:
        return definition

    def _encode_ts(self, ts: datetime) -> Any:
        return ts

    def _decode_ts(self, v: Any) -> datetime:
        return v

    def _encode_bool(self, v: bool) -> Any:
        return v


def _iter(cur: Any, size: int = 1000) -> Iterator[Sequence[Any]]:
    while True:
        rows = cur.fetchmany(size)
        if not rows:
            return
        yield from rows


def _identity(v: Any) -> Any:
    """The encoder/decoder of values the driver takes and returns as they are."""
    return v


def _q(name: str) -> str:
    """Quote an identifier (names are validated; quoting keeps reserved words usable)."""
    return '"' + name.replace('"', '""') + '"'
