"""PostgreSQL backend (psycopg 3 + psycopg_pool): the views live in the events' database and schema.

* A small connection pool (autocommit connections; every unit of work is an explicit transaction). The
  pool checks a connection before lending it, so a connection the server terminated is replaced
  instead of failing the next batch.
* Writes: ``SELECT ... FOR UPDATE`` on the tracking row serializes writers of one build; DDL and
  switches also take a transaction-scoped advisory lock (concurrent ``CREATE TABLE IF NOT EXISTS`` can
  otherwise collide in the catalog).
* Leases (``projections.leases``): session advisory locks on a connection the thread keeps while it holds
  any; that thread's transactions run on it.
* Bulk rows: small batches are upserted with a pipelined ``executemany``; large ones are ``COPY``-ed
  into a temporary table and merged with one ``INSERT ... SELECT ... ON CONFLICT`` statement.
* Reads run in ``REPEATABLE READ READ ONLY`` transactions (one snapshot per ``reading`` block).
* Types: text is ``COLLATE "C"`` (byte order: the same order as SQLite and Python), json is ``jsonb``,
  timestamps are ``timestamptz`` (read back in UTC), unsigned 64-bit integers ``numeric(20)``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from typing import Any, Iterator

import msgspec
import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from projections import leases
from projections.backend import SqlBackend
from projections.sqlbase import TextStatistics, _identity, _now, _q
from projections.engine import BIGINT, BOOLEAN, INTEGER, JSON, REAL, TEXT, TIMESTAMP, UBIGINT, BuildBusy, Column, Table

log = logging.getLogger(__name__)

_DDL = {TEXT: 'text COLLATE "C"', INTEGER: "integer", BIGINT: "bigint", UBIGINT: "numeric(20)", BOOLEAN: "boolean",
        REAL: "double precision", JSON: "jsonb", TIMESTAMP: "timestamptz"}


def _utc(v: datetime) -> datetime:
    return v.astimezone(timezone.utc)


_msgspec_json = msgspec.json.Encoder().encode

# PostgreSQL text and jsonb cannot hold NUL (U+0000): one chat message or title containing it made every
# batch of the chat views fail ("PostgreSQL text fields cannot contain NUL (0x00) bytes"), wedging the
# views of every chat. The views store U+FFFD (the replacement character) instead; the ledger itself keeps
# the exact text (its payloads are bytes), so ``show`` and replays still give it back byte for byte.
NUL, NUL_STANDIN = "\x00", "\ufffd"


def _text(v: Any) -> Any:
    return v.replace(NUL, NUL_STANDIN) if type(v) is str and NUL in v else v


def _without_nul(v: Any) -> Any:
    if isinstance(v, str):
        return v.replace(NUL, NUL_STANDIN)
    if isinstance(v, dict):
        return {_without_nul(k): _without_nul(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_without_nul(x) for x in v]
    return v


def _encode_json(v: Any) -> bytes:
    out = _msgspec_json(v)
    if b"\\u0000" in out:  # rare: clean the value and encode again
        out = _msgspec_json(_without_nul(v))
    return out


def _jsonb(v: Any) -> Jsonb:
    return Jsonb(v, dumps=_encode_json)


_ENCODERS = {JSON: _jsonb, TEXT: _text}
_DECODERS = {TIMESTAMP: _utc, REAL: float, UBIGINT: int}

#: The holder of lease (projection, build), if its session still holds the advisory lock: ``%s`` are the
#: projection, the build and the lock's text key.
_LIVE_HOLDER = (
    "SELECT l.purpose, l.pid, l.host, l.acquired_at FROM {leases} l WHERE l.projection = %s AND l.build = %s "
    "AND EXISTS (SELECT 1 FROM pg_locks k WHERE k.locktype = 'advisory' AND k.granted "
    "AND k.pid = l.backend_pid AND k.objsubid = 2 AND k.objid = l.build::oid "
    "AND k.classid = (hashtext(%s)::bigint & 4294967295)::oid "
    "AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database()))")

#: From this many rows on, upserts go through COPY + one merge statement.
COPY_THRESHOLD = 200


def _local_commits(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET synchronous_commit = local")


class PostgresBackend(SqlBackend):
    kind = "postgres"

    def __init__(self, conninfo: str, schema: str = "public", pool_size: int = 4,
                 cache_rows: int = 100_000, read_only: bool = False) -> None:
        """``read_only``: a hot standby's copy of the views (``serve --replica-url``): nothing is created, and
        the views are read as the standby has them (kept by the primary's follower, replicated)."""
        super().__init__(cache_rows)
        self.conninfo = conninfo
        self.schema = schema
        self._statistics: dict[tuple[str, str], tuple[float, TextStatistics | None]] = {}
        self._pin = threading.local()  # .conn, .count: the connection of this thread's leases
        # The views are derived data, rebuilt from the events at will: their commits need no standby's
        # confirmation (``synchronous_commit = local``), so a synchronous standby that has gone never holds up a
        # read that catches a view up, nor the follower
        self.pool = ConnectionPool(conninfo, min_size=1, max_size=pool_size, open=True,
                                   kwargs={"autocommit": True}, check=ConnectionPool.check_connection,
                                   configure=_local_commits, name=f"projections-{schema}")
        try:
            self.pool.wait(timeout=15)
            if not read_only:
                with self.pool.connection() as conn:
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {_q(schema)}")
                self.ensure_meta()
        except BaseException:
            self.pool.close()
            raise

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """The connection of this thread's leases while it holds any (its writes must run in the session
        that holds the lock), else one from the pool."""
        pinned = getattr(self._pin, "conn", None)
        if pinned is not None:
            yield pinned
            return
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def _write_tx(self) -> Iterator[psycopg.Cursor[Any]]:
        with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    @contextmanager
    def _read_tx(self) -> Iterator[psycopg.Cursor[Any]]:
        with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield cur

    # -- leases (see projections.leases) -----------------------------------------------------------
    def _lease_key(self, name: str) -> str:
        return f"chat-ledger projection {self.schema}.{name}"

    def _pinned(self) -> psycopg.Connection[Any]:
        pin = self._pin
        if getattr(pin, "conn", None) is None:
            pin.conn, pin.count = self.pool.getconn(), 0
        pin.count += 1
        return pin.conn  # type: ignore[no-any-return]

    def _unpin(self) -> None:
        pin = self._pin
        pin.count -= 1
        if pin.count > 0:
            return
        conn, pin.conn = pin.conn, None
        try:
            # Whatever an interrupted lock request may have been granted after all goes with the lease:
            # a pooled connection never keeps a lock.
            if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                conn.execute("SELECT pg_advisory_unlock_all()")
        except psycopg.Error:
            pass  # a broken connection holds nothing any more; the pool discards it
        finally:
            self.pool.putconn(conn)

    def _holder(self, conn_or_cur: Any, name: str, build: int) -> leases.LeaseHolder | None:
        row = conn_or_cur.execute(_LIVE_HOLDER.format(leases=self._qualify("projection_leases")),
                                  (name, build, self._lease_key(name))).fetchone()
        return leases.LeaseHolder(name, build, row[0], row[1], row[2], _utc(row[3])) if row else None

    def _acquire(self, name: str, build: int, token: str, purpose: str, wait: float) -> None:
        conn = self._pinned()
        key, got = self._lease_key(name), False
        try:
            if wait > 0:  # queue in the server's lock queue (first come, first served)
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(1, int(wait * 1000))}ms",))
                try:
                    conn.execute("SELECT pg_advisory_lock(hashtext(%s), %s)", (key, build))
                    got = True
                except psycopg.errors.LockNotAvailable:
                    pass
                finally:
                    conn.execute("SELECT set_config('lock_timeout', '0', false)")
            else:
                got = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s), %s)", (key, build)).fetchone()[0]
            if not got:
                raise BuildBusy(leases.busy_message(name, build, self._holder(conn, name, build), wait))
            pid, _ = leases.this_process()
            conn.execute(
                f"INSERT INTO {self._qualify('projection_leases')} (projection, build, owner, purpose, pid, host, "
                "backend_pid, acquired_at) VALUES (%s, %s, %s, %s, %s, %s, pg_backend_pid(), %s) "
                "ON CONFLICT (projection, build) DO UPDATE SET owner = excluded.owner, purpose = excluded.purpose, "
                "pid = excluded.pid, host = excluded.host, backend_pid = excluded.backend_pid, "
                "acquired_at = excluded.acquired_at", (name, build, token, purpose, pid, leases.HOST, _now()))
        except BaseException:
            if got:
                try:
                    conn.execute("SELECT pg_advisory_unlock(hashtext(%s), %s)", (key, build))
                except psycopg.Error:
                    pass
            self._unpin()
            raise

    def _release(self, name: str, build: int, token: str) -> None:
        conn = self._pin.conn
        try:
            conn.execute(f"DELETE FROM {self._qualify('projection_leases')} WHERE projection = %s AND build = %s "
                         "AND owner = %s", (name, build, token))
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s), %s)", (self._lease_key(name), build))
        except psycopg.Error as e:
            # A closed connection took the session's advisory lock with it (the lease row left behind names a
            # session that no longer holds the lock, which is how every reader tells a dead holder): nothing
            # to report. Any other failure is worth a warning.
            (log.debug if conn.closed else log.warning)("releasing the lease of %s build %s: %s", name, build, e)
        finally:
            self._unpin()

    def _check_lease(self, cur: Any, name: str, build: int) -> None:
        cur.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s), %s)", (self._lease_key(name), build))
        if not cur.fetchone()[0]:
            holder = self._holder(cur, name, build)
            if self.holds(name, build):  # pragma: no cover - our session holds it: cannot be refused
                raise BuildBusy(f"projection {name} v{build}: this writer lost its lease; nothing written")
            raise BuildBusy(leases.busy_message(name, build, holder, 0))

    def _check_delegate(self, cur: Any, name: str, build: int, token: str) -> None:
        cur.execute(_LIVE_HOLDER.format(leases=self._qualify("projection_leases")) + " AND l.owner = %s",
                    (name, build, self._lease_key(name), token))
        if cur.fetchone() is None:
            raise BuildBusy(f"projection {name} v{build}: the rebuild this worker writes for no longer holds "
                            "the build's lease; nothing written")

    def reopen(self) -> PostgresBackend:
        return PostgresBackend(self.conninfo, self.schema, pool_size=2, cache_rows=self.cache_rows)

    def _insert_rows(self, cur: Any, table: Table, name: str, rows: Any) -> None:
        encode = self._row_encoder(table)
        with cur.copy(f"COPY {self._qualify(name)} ({', '.join(map(_q, table.column_names))}) FROM STDIN") as copy:
            for r in rows:
                copy.write_row(encode(r))

    def lease_holders(self, name: str | None = None) -> list[leases.LeaseHolder]:
        out = []
        with self._read_tx() as cur:
            cur.execute(self._sql(f"SELECT projection, build FROM {self._qualify('projection_leases')}"
                                  + (" WHERE projection = %s" if name is not None else "")
                                  + " ORDER BY projection, build"), (name,) if name is not None else ())
            for projection, build in cur.fetchall():
                holder = self._holder(cur, projection, build)
                if holder is not None:
                    out.append(holder)
        return out

    def stored_form(self, table: Table, row: dict[str, Any]) -> dict[str, Any]:
        out = dict(row)
        for col in table.columns:
            v = out[col.name]
            if v is not None and col.type == TEXT:
                out[col.name] = _text(v)
            elif v is not None and col.type == JSON:
                out[col.name] = _without_nul(v)
        return out

    def _is_row_error(self, e: BaseException) -> bool:
        # class 22 (data exception), 23 (integrity), 54 (program limit: an index row too big, a value
        # nested too deep): the rows cannot be stored, however often they are retried
        return isinstance(e, (psycopg.DataError, psycopg.IntegrityError, UnicodeError)) or (
            isinstance(e, psycopg.Error) and (e.sqlstate or "").startswith("54"))

    def _lock_tracking(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"chat-ledger projections {self.schema}",))

    def _qualify(self, name: str) -> str:
        return f"{_q(self.schema)}.{_q(name)}"

    def _ddl_type(self, col: Column) -> str:
        return _DDL[col.type]

    def _encoder(self, col: Column) -> Any:
        return _ENCODERS.get(col.type, _identity)

    def _decoder(self, col: Column) -> Any:
        return _DECODERS.get(col.type, _identity)

    def _decode_ts(self, v: Any) -> datetime:
        return _utc(v)

    def _encode_definition(self, definition: str) -> Any:
        return Jsonb(json.loads(definition))

    @contextmanager
    def _batch_writes(self, cur: Any, most_rows: int) -> Iterator[None]:
        # Small batches: every statement of the write phase in one pipeline (statements sent without
        # waiting for each other: fewer round trips). Big ones go through COPY, which pipeline mode
        # does not allow.
        with cur.connection.pipeline() if most_rows < COPY_THRESHOLD else nullcontext():
            # Asynchronous commit (no WAL flush wait): a view is derived data whose rows and position
            # commit atomically, so a server crash can only lose the last batches whole — the position
            # goes back with them and they are applied again from the log. Ledger writes are not
            # affected (their own transactions, synchronous).
            cur.execute("SET LOCAL synchronous_commit TO off")
            yield

    def _upsert_rows(self, cur: Any, table: Table, name: str, rows: list[dict[str, Any]]) -> None:
        if len(rows) < COPY_THRESHOLD:
            return super()._upsert_rows(cur, table, name, rows)
        # COPY into a temporary copy of the table, then merge in one statement. The staging table lives
        # as long as the connection (emptied at each commit), so a batch does not create and drop one.
        cols = table.column_names
        # named by the table and its columns: a connection's staging table never has other columns
        stage = _q("stage_" + hashlib.sha1(f"{name}:{cols}".encode()).hexdigest()[:20])
        collist = ", ".join(map(_q, cols))
        cur.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} "
                    f"(LIKE {self._qualify(name)} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
        encode = self._row_encoder(table)
        with cur.copy(f"COPY {stage} ({collist}) FROM STDIN") as copy:
            for r in rows:
                copy.write_row(encode(r))
        rest = [c for c in cols if c not in table.primary_key]
        action = ("DO UPDATE SET " + ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in rest)) if rest else "DO NOTHING"
        cur.execute(f"INSERT INTO {self._qualify(name)} ({collist}) SELECT {collist} FROM {stage} "
                    f"ON CONFLICT ({', '.join(map(_q, table.primary_key))}) {action}")
        # A later COPY in the same transaction starts empty. DELETE, not TRUNCATE: TRUNCATE gives the table
        # a new relation file each time (0.8 ms against 0.3 ms per merge).
        cur.execute(f"DELETE FROM {stage}")

    # Full text: a stored generated tsvector column (maintained by every INSERT, COPY and UPDATE) with a GIN
    # index. The text is cut into words at every character that is not a letter or digit first, so that
    # paths, e-mail addresses and URLs are words as SQLite's FTS5 side sees them (PostgreSQL's parser
    # would keep ``/etc/passwd`` as one token); 'simple': no stemming, no stop words, on both sides. The cut
    # uses the database's character classes (``COLLATE "default"``: the view's text columns are "C", whose
    # [:alnum:] is ASCII only), as the text search parser does: letters beyond ASCII are letters on a
    # database with a UTF-8 ctype (docs/search.md).
    TSV = "search_tsv"

    def _create_text_search(self, cur: Any, name: str, column: str) -> None:
        t = self._qualify(name)
        cur.execute(f"ALTER TABLE {t} ADD COLUMN {self.TSV} tsvector GENERATED ALWAYS AS "
                    f"(to_tsvector('simple', regexp_replace({_q(column)} COLLATE \"default\", '[^[:alnum:]]+', ' ', "
                    "'g'))) STORED")
        cur.execute(f"CREATE INDEX {_q(name + '_fts')} ON {t} USING GIN ({self.TSV})")

    # A stream-wise build COPYs its rows without the GIN index and builds it once at the end (the generated
    # column is computed either way). See ``sqlite`` for when the index may be absent.
    def _suspend_text_search(self, cur: Any, name: str, column: str) -> None:
        cur.execute(f"DROP INDEX IF EXISTS {self._qualify(name + '_fts')}")

    def _resume_text_search(self, cur: Any, name: str, column: str) -> None:
        cur.execute(f"CREATE INDEX IF NOT EXISTS {_q(name + '_fts')} ON {self._qualify(name)} USING GIN ({self.TSV})")

    #: how long a table's statistics are kept (seconds): they change with ANALYZE
    STATISTICS_TTL = 300.0

    def _analyze(self, cur: Any, name: str) -> None:
        # (autovacuum would, some time later: until then every plan over the new rows guesses their number)
        cur.execute(f"ANALYZE {self._qualify(name)}")

    def _text_statistics(self, cur: Any, name: str, column: str) -> TextStatistics | None:
        # The table's statistics (ANALYZE: autovacuum's, or a stream-wise build's last transaction): its rows, the
        # tsvector column's most common lexemes and the share of rows holding each (a word not among them is
        # rarer than all), and the other columns' most common values, for the share of rows a scope keeps.
        key = (name, column)
        now = time.monotonic()
        kept = self._statistics.get(key)
        if kept is not None and now - kept[0] < self.STATISTICS_TTL:
            return kept[1]
        cur.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (self._qualify(name),))
        rows = float(cur.fetchone()[0])
        cur.execute("SELECT e, f FROM pg_stats s, unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) "
                    "AS u(e, f) WHERE s.schemaname = %s AND s.tablename = %s AND s.attname = %s AND e IS NOT NULL",
                    (self.schema, name, self.TSV))
        words = {e: float(f) for e, f in cur.fetchall()}
        cur.execute("SELECT attname, most_common_vals::text::text[], most_common_freqs, n_distinct FROM pg_stats "
                    "WHERE schemaname = %s AND tablename = %s AND attname <> %s", (self.schema, name, self.TSV))
        values: dict[str, tuple[dict[str, float], float]] = {}
        for attname, vals, freqs, distinct in cur.fetchall():
            common = dict(zip(vals or (), map(float, freqs or ())))
            distinct = -distinct * rows if distinct < 0 else distinct  # (negative: a share of the rows)
            rest = max(distinct - len(common), 1.0)
            values[attname] = (common, max(0.0, 1.0 - sum(common.values())) / rest)
        found = TextStatistics(rows, words, values) if rows > 0 else None
        self._statistics[key] = (now, found)
        return found

    def _text_search_sql(self, docs: str, column: str, alias: str, newest: str | None) -> tuple[str, str, str, int, str]:
        return (f"{self._qualify(docs)} {alias}", f"{alias}.{self.TSV} @@ to_tsquery('simple', %s)",
                f"-ts_rank({alias}.{self.TSV}, to_tsquery('simple', %s))", 1,
                f"{alias}.{_q(newest)}" if newest else "1")

    def _meta_ddl(self) -> list[str]:
        t, l, s = (self._qualify(n) for n in ("projection_tracking", "projection_live", "projection_switches"))
        return [
            f"CREATE TABLE IF NOT EXISTS {t} (projection text NOT NULL, version integer NOT NULL, "
            "definition_version integer NOT NULL, fingerprint text NOT NULL, definition jsonb NOT NULL, "
            "position bigint NOT NULL, writer text, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, "
            "PRIMARY KEY (projection, version))",
            f"CREATE TABLE IF NOT EXISTS {l} (projection text PRIMARY KEY, version integer NOT NULL, "
            "switched_at timestamptz NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {s} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "projection text NOT NULL, from_version integer, to_version integer NOT NULL, position bigint NOT NULL, "
            "switched_at timestamptz NOT NULL, mode text NOT NULL, diff_digest text, diff_rows bigint, "
            "accepted_with_diff boolean NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {self._qualify('projection_leases')} (projection text NOT NULL, "
            "build integer NOT NULL, owner text NOT NULL, purpose text NOT NULL, pid integer NOT NULL, "
            "host text NOT NULL, backend_pid integer NOT NULL, acquired_at timestamptz NOT NULL, "
            "PRIMARY KEY (projection, build))",
            f"CREATE TABLE IF NOT EXISTS {self._qualify('projection_failures')} (projection text NOT NULL, "
            "version integer NOT NULL, notification_id bigint NOT NULL, stream_id text NOT NULL, "
            "stream_version bigint NOT NULL, topic text NOT NULL, reason text NOT NULL, "
            "failed_at timestamptz NOT NULL, PRIMARY KEY (projection, version))",
        ]

    def close(self) -> None:
        self.pool.close()
