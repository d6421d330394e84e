"""SQLite backend (stdlib ``sqlite3``): the views live in the events' file, on their own connections.

* One connection per thread (``sqlite3`` connections must not be used by two threads at once), WAL
  journal (the event store already switches the file to WAL: readers never block the writer).
* Writes run in ``BEGIN IMMEDIATE`` transactions: the file's write lock is taken up front, so the
  tracking row read at the start of a batch cannot change before the commit. The lock is shared with the
  event store's writers, which is why batches are decoded before the transaction opens and kept short.
* Reads run in a deferred transaction: every statement of a ``reading`` block sees one snapshot.
* Types: STRICT tables; booleans as 0/1, json as canonical text (sorted keys), timestamps as fixed-width
  ISO-8601 UTC text (so text order is time order), unsigned 64-bit integers as 20-digit text (SQLite's
  INTEGER is signed; zero-padded text keeps the order and the exact value).
* Leases: rows of ``projection_leases``, checked and renewed by each write transaction of a build
  (``projections.leases``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Iterator

import msgspec

from projections import leases
from projections.backend import SqlBackend
from projections.sqlbase import _identity, _now, _q
from projections.engine import (
    BIGINT, BOOLEAN, INTEGER, JSON, REAL, TEXT, TIMESTAMP, UBIGINT, BuildBusy, Column, ProjectionError,
)

_DDL = {TEXT: "TEXT", INTEGER: "INTEGER", BIGINT: "INTEGER", UBIGINT: "TEXT", BOOLEAN: "INTEGER", REAL: "REAL",
        JSON: "TEXT", TIMESTAMP: "TEXT"}

#: How long a recorded waiter keeps its place in line without polling again.
WAITER_TTL = timedelta(seconds=2)


def _ts(v: datetime) -> str:
    return v.isoformat(timespec="microseconds")


_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def _json(v: Any) -> str:
    return _encode_sorted(v).decode()  # canonical: sorted keys, no spaces


def _u64(v: int) -> str:
    return f"{v:020d}"


_ENCODERS = {BOOLEAN: int, JSON: _json, TIMESTAMP: _ts, REAL: float, UBIGINT: _u64}
_DECODERS = {BOOLEAN: bool, JSON: msgspec.json.decode, TIMESTAMP: datetime.fromisoformat, REAL: float, UBIGINT: int}
_LEASE_COLS = "owner, purpose, pid, host, machine, process, acquired_at, expires_at, waiter, waiter_until"


class SqliteBackend(SqlBackend):
    kind = "sqlite"
    PARAM = "?"
    IS_DISTINCT = "IS NOT"
    FOR_UPDATE = ""

    def __init__(self, path: str, timeout: float = 30.0, cache_rows: int = 100_000) -> None:
        if path == ":memory:" or path.startswith("file:"):
            raise ProjectionError("projections need a SQLite file shared with the event store, not an "
                                  f"in-memory database ({path!r})")
        super().__init__(cache_rows)
        self.path = path
        self.timeout = timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.ensure_meta()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: no implicit transactions; we issue BEGIN/COMMIT ourselves.
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL is safe in WAL mode against crashes of the process (rows and position commit together
            # either way); a power loss may only lose the last commits, which catch-up redoes.
            conn.execute("PRAGMA synchronous=NORMAL")
            # a row deleted or replaced is zeroed in the file, not left in free space: the views hold people's text,
            # and an erasure rewrites them (docs/privacy.md)
            conn.execute("PRAGMA secure_delete=ON")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def _tx(self, begin: str) -> Iterator[sqlite3.Cursor]:
        conn = self._conn()
        cur = conn.cursor()
        cur.execute(begin)
        try:
            yield cur
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # also when COMMIT itself failed: never leave the connection in a tx
                conn.execute("ROLLBACK")
            raise
        finally:
            cur.close()

    @contextmanager
    def _write_tx(self) -> Iterator[sqlite3.Cursor]:
        with self._tx("BEGIN IMMEDIATE") as cur:
            yield cur

    @contextmanager
    def _read_tx(self) -> Iterator[sqlite3.Cursor]:
        with self._tx("BEGIN") as cur:
            yield cur

    def _ddl_type(self, col: Column) -> str:
        return _DDL[col.type]

    def _table_suffix(self) -> str:
        return " STRICT"

    def _encoder(self, col: Column) -> Any:
        return _ENCODERS.get(col.type, _identity)

    def _decoder(self, col: Column) -> Any:
        return _DECODERS.get(col.type, _identity)

    def _encode_ts(self, ts: datetime) -> Any:
        return _ts(ts)

    def _decode_ts(self, v: Any) -> datetime:
        return datetime.fromisoformat(v)

    def _encode_bool(self, v: bool) -> Any:
        return int(v)

    def _meta_ddl(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS projection_tracking (projection TEXT NOT NULL, version INTEGER NOT NULL, "
            "definition_version INTEGER NOT NULL, fingerprint TEXT NOT NULL, definition TEXT NOT NULL, "
            "position INTEGER NOT NULL, writer TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, "
            "PRIMARY KEY (projection, version)) STRICT",
            "CREATE TABLE IF NOT EXISTS projection_live (projection TEXT PRIMARY KEY, version INTEGER NOT NULL, "
            "switched_at TEXT NOT NULL) STRICT",
            "CREATE TABLE IF NOT EXISTS projection_switches (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "projection TEXT NOT NULL, from_version INTEGER, to_version INTEGER NOT NULL, position INTEGER NOT NULL, "
            "switched_at TEXT NOT NULL, mode TEXT NOT NULL, diff_digest TEXT, diff_rows INTEGER, "
            "accepted_with_diff INTEGER NOT NULL) STRICT",
            "CREATE TABLE IF NOT EXISTS projection_leases (projection TEXT NOT NULL, build INTEGER NOT NULL, "
            "owner TEXT, purpose TEXT, pid INTEGER, host TEXT, machine TEXT, process TEXT, acquired_at TEXT, "
            "expires_at TEXT, waiter TEXT, waiter_until TEXT, PRIMARY KEY (projection, build)) STRICT",
            "CREATE TABLE IF NOT EXISTS projection_failures (projection TEXT NOT NULL, version INTEGER NOT NULL, "
            "notification_id INTEGER NOT NULL, stream_id TEXT NOT NULL, stream_version INTEGER NOT NULL, "
            "topic TEXT NOT NULL, reason TEXT NOT NULL, failed_at TEXT NOT NULL, "
            "PRIMARY KEY (projection, version)) STRICT",
        ]

    # -- leases (see projections.leases) -----------------------------------------------------------
    def _lease_row(self, cur: sqlite3.Cursor, name: str, build: int) -> tuple[Any, ...] | None:
        cur.execute(f"SELECT {_LEASE_COLS} FROM projection_leases WHERE projection = ? AND build = ?", (name, build))
        return cur.fetchone()

    @staticmethod
    def _holder_alive(row: tuple[Any, ...], now: str) -> bool:
        owner, expires_at = row[0], row[7]
        if owner is None or expires_at is None or expires_at <= now:
            return False
        return SqliteBackend._process_alive(row)

    @staticmethod
    def _process_alive(row: tuple[Any, ...]) -> bool:
        """Whether the lease row's holder process lives (one on another machine is taken to)."""
        _, _, pid, _, machine, process = row[:6]
        return machine != leases.MACHINE or leases.process_alive(pid, process)

    @staticmethod
    def _holder(name: str, build: int, row: tuple[Any, ...] | None) -> leases.LeaseHolder | None:
        if row is None or row[0] is None:
            return None
        return leases.LeaseHolder(name, build, row[1], row[2], row[3], datetime.fromisoformat(row[6]))

    def _acquire(self, name: str, build: int, token: str, purpose: str, wait: float) -> None:
        started = time.monotonic()
        pause = 0.005
        while True:
            with self._write_tx() as cur:
                now = _now()
                stamp = _ts(now)
                row = self._lease_row(cur, name, build)
                holder = row if row is not None and self._holder_alive(row, stamp) else None
                queued = (row is not None and row[8] is not None and row[8] != token
                          and row[9] is not None and row[9] > stamp)
                if holder is None and not queued:
                    pid, process = leases.this_process()
                    cur.execute(
                        f"INSERT INTO projection_leases (projection, build, {_LEASE_COLS}) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL) ON CONFLICT (projection, build) DO UPDATE "
                        "SET owner = excluded.owner, purpose = excluded.purpose, pid = excluded.pid, "
                        "host = excluded.host, machine = excluded.machine, process = excluded.process, "
                        "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, "
                        "waiter = CASE WHEN waiter = excluded.owner OR waiter_until <= excluded.acquired_at "
                        "THEN NULL ELSE waiter END",
                        (name, build, token, purpose, pid, leases.HOST, leases.MACHINE, process, stamp,
                         _ts(now + timedelta(seconds=self.LEASE_TTL))))
                    return
                if wait > 0 and not queued:  # first in line: newcomers let this one go first
                    cur.execute("UPDATE projection_leases SET waiter = ?, waiter_until = ? "
                                "WHERE projection = ? AND build = ?", (token, _ts(now + WAITER_TTL), name, build))
            waited = time.monotonic() - started
            if waited >= wait:
                if wait > 0:  # out of line
                    with self._write_tx() as cur:
                        cur.execute("UPDATE projection_leases SET waiter = NULL, waiter_until = NULL "
                                    "WHERE projection = ? AND build = ? AND waiter = ?", (name, build, token))
                raise BuildBusy(leases.busy_message(name, build, self._holder(name, build, holder), wait))
            time.sleep(min(pause, wait - waited))
            pause = min(pause * 2, 0.05)

    def _release(self, name: str, build: int, token: str) -> None:
        with self._write_tx() as cur:
            cur.execute("UPDATE projection_leases SET owner = NULL, expires_at = NULL "
                        "WHERE projection = ? AND build = ? AND owner = ?", (name, build, token))

    def _check_lease(self, cur: sqlite3.Cursor, name: str, build: int) -> None:
        now = _now()
        stamp = _ts(now)
        token = self._held().get((name, build))
        row = self._lease_row(cur, name, build)
        if token is None:
            if row is not None and self._holder_alive(row, stamp):
                raise BuildBusy(leases.busy_message(name, build, self._holder(name, build, row), 0))
            return
        if row is None or row[0] != token:
            raise BuildBusy(f"projection {name} v{build}: this writer's lease was taken over by "
                            f"{self._describe(name, build, row)}; nothing written")
        mine = [t for (p, _), t in self._held().items() if p == name]
        cur.execute(f"UPDATE projection_leases SET expires_at = ? WHERE projection = ? AND owner IN "
                    f"({', '.join('?' * len(mine))})",
                    (_ts(now + timedelta(seconds=self.LEASE_TTL)), name, *mine))

    def _check_delegate(self, cur: sqlite3.Cursor, name: str, build: int, token: str) -> None:
        # As the holder's own writes do (``_check_lease``), a worker's keep the lease: it is the holder's while
        # its row names the holder's token (nobody took it over) and the holder's process lives, and each write
        # moves its expiry on (the holder itself writes nothing while its workers build, however long that takes)
        row = self._lease_row(cur, name, build)
        if row is None or row[0] != token or not self._process_alive(row):
            raise BuildBusy(f"projection {name} v{build}: the rebuild this worker writes for no longer holds "
                            "the build's lease; nothing written")
        cur.execute("UPDATE projection_leases SET expires_at = ? WHERE projection = ? AND build = ? AND owner = ?",
                    (_ts(_now() + timedelta(seconds=self.LEASE_TTL)), name, build, token))

    def reopen(self) -> SqliteBackend:
        return SqliteBackend(self.path, self.timeout, self.cache_rows)

    def _describe(self, name: str, build: int, row: tuple[Any, ...] | None) -> str:
        holder = self._holder(name, build, row)
        return holder.describe() if holder is not None else "nobody"

    def lease_holders(self, name: str | None = None) -> list[leases.LeaseHolder]:
        q = f"SELECT projection, build, {_LEASE_COLS} FROM projection_leases WHERE owner IS NOT NULL"
        params: tuple[Any, ...] = ()
        if name is not None:
            q += " AND projection = ?"
            params = (name,)
        with self._read_tx() as cur:
            cur.execute(q + " ORDER BY projection, build", params)
            rows = cur.fetchall()
        stamp = _ts(_now())
        return [self._holder(r[0], r[1], r[2:]) for r in rows if self._holder_alive(r[2:], stamp)]  # type: ignore[misc]

    # Full text: an external-content FTS5 table beside the rows, kept in step by triggers (so every write
    # path — batches, stream-wise builds — keeps it, in the same transaction). unicode61 without removing
    # diacritics and with the default separators (everything but letters and digits): the words
    # PostgreSQL's side (``postgres._create_text_search``) finds too.
    def _create_text_search(self, cur: Any, name: str, column: str) -> None:
        fts, base, col = _q(name + "_fts"), _q(name), _q(column)
        cur.execute(f"CREATE VIRTUAL TABLE {fts} USING fts5({col}, content={base}, content_rowid='rowid', "
                    "tokenize='unicode61 remove_diacritics 0')")
        self._text_triggers(cur, name, column)

    @staticmethod
    def _text_triggers(cur: Any, name: str, column: str) -> None:
        fts, base, col = _q(name + "_fts"), _q(name), _q(column)
        new, old = f"INSERT INTO {fts}(rowid, {col}) VALUES (new.rowid, new.{col})", \
            f"INSERT INTO {fts}({fts}, rowid, {col}) VALUES ('delete', old.rowid, old.{col})"
        cur.execute(f"CREATE TRIGGER {_q(name + '_fts_i')} AFTER INSERT ON {base} BEGIN {new}; END")
        cur.execute(f"CREATE TRIGGER {_q(name + '_fts_d')} AFTER DELETE ON {base} BEGIN {old}; END")
        cur.execute(f"CREATE TRIGGER {_q(name + '_fts_u')} AFTER UPDATE OF {col} ON {base} BEGIN {old}; {new}; END")

    # A stream-wise build inserts without the triggers and has FTS5 index the table once at its end ("rebuild"):
    # a tenth of the cost of indexing row by row. The triggers are absent only while the build is at position 0
    # (its last transaction restores them with its position), and a batch applied at position 0 restores them.
    def _suspend_text_search(self, cur: Any, name: str, column: str) -> None:
        for suffix in ("i", "d", "u"):
            cur.execute(f"DROP TRIGGER IF EXISTS {_q(f'{name}_fts_{suffix}')}")

    def _resume_text_search(self, cur: Any, name: str, column: str) -> None:
        cur.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?", (name,))
        if cur.fetchone()[0] == 3:
            return
        self._suspend_text_search(cur, name, column)
        fts = _q(name + "_fts")
        cur.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")
        self._text_triggers(cur, name, column)

    def scrub(self) -> None:
        """After an erasure: every full-text index merged into one segment (FTS5 keeps a deleted row's words in
        its older segments until they merge; the freed pages are zeroed, ``secure_delete``), then the write-ahead
        log folded into the file and truncated, so the words are in neither file. Best effort for the log: a
        reader in another process holding an old snapshot keeps the checkpoint from truncating it."""
        with self._write_tx() as cur:
            cur.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%fts5%'")
            for (fts,) in cur.fetchall():
                cur.execute(f"INSERT INTO {_q(fts)}({_q(fts)}) VALUES ('optimize')")
        self._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _drop_text_search(self, cur: Any, name: str) -> None:
        cur.execute(f"DROP TABLE IF EXISTS {_q(name + '_fts')}")  # (the triggers go with the rows' table)

    def _text_search_sql(self, docs: str, column: str, alias: str, newest: str | None) -> tuple[str, str, str, int, str]:
        # (recency: the FTS5 index gives matches in rowid order, the rows' insertion order, whatever ``newest``)
        fts = _q(docs + "_fts")
        return (f"{fts} JOIN {_q(docs)} {alias} ON {alias}.rowid = {fts}.rowid", f"{fts} MATCH ?",
                f"bm25({fts})", 0, f"{fts}.rowid")

    def _is_row_error(self, e: BaseException) -> bool:
        return isinstance(e, (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError, OverflowError,
                              UnicodeError))

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                try:
                    conn.close()
                except sqlite3.Error:  # pragma: no cover
                    pass
            self._connections.clear()
        self._local = threading.local()
