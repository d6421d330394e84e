"""SQLite backend (stdlib ``sqlite3``): the views live in the events' file, on their own connections.

* One connection per thread (``sqlite3`` connections must not be used by two threads at once), WAL
  journal (the event store already switches the file to WAL: readers never block the writer).
* Writes run in ``BEGIN IMMEDIATE`` transactions: the file's write lock is taken up front, so the
  tracking row read at the start of a batch cannot change before the commit. The lock is shared with the
  event store's writers, which is why batches are decoded before the transaction opens and kept short.
* Reads run in a deferred transaction: every statement of a ``reading`` block sees one snapshot.
* Types: STRICT tables; booleans as 0/1, json as canonical text (sorted keys), timestamps as fixed-width
  ISO-8601 UTC text (so text order is time order).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator

import msgspec

from projections.backend import SqlBackend, _identity
from projections.engine import BIGINT, BOOLEAN, INTEGER, JSON, REAL, TEXT, TIMESTAMP, Column, ProjectionError

_DDL = {TEXT: "TEXT", INTEGER: "INTEGER", BIGINT: "INTEGER", BOOLEAN: "INTEGER", REAL: "REAL",
        JSON: "TEXT", TIMESTAMP: "TEXT"}


def _ts(v: datetime) -> str:
    return v.isoformat(timespec="microseconds")


_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def _json(v: Any) -> str:
    return _encode_sorted(v).decode()  # canonical: sorted keys, no spaces


_ENCODERS = {BOOLEAN: int, JSON: _json, TIMESTAMP: _ts, REAL: float}
_DECODERS = {BOOLEAN: bool, JSON: msgspec.json.decode, TIMESTAMP: datetime.fromisoformat, REAL: float}


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
        ]

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                try:
                    conn.close()
                except sqlite3.Error:  # pragma: no cover
                    pass
            self._connections.clear()
        self._local = threading.local()
