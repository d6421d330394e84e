"""Each data subject's keys, wrapped by the ledger's master key (issue 28, point 2; docs/privacy.md).

A subject (a user) has data keys, one per **scope** (the chat or conversation whose content it
seals): its content there is sealed under the current one (``ledger.sealing``). Keys live in a table of their own
beside the events — ``subject_keys(subject, number, scope, wrapped, created_at, destroyed_at)``, never in an event — each AES-256-GCM-wrapped under the **master key**, with
the subject and number as associated data (a wrapped key copied to another row does not unwrap). The master key is
given to the ledger, never stored by it: ``CHAT_LEDGER_MASTER_KEY`` (base64 of 32 bytes) or the file named by
``CHAT_LEDGER_MASTER_KEY_FILE`` (the same, one line).

Destroying a subject's keys overwrites their wrapped bytes with nothing and marks them destroyed; the rows stay,
so numbering goes on (a subject who writes again gets a new key) and a reader can tell "erased" from "missing".

A key's number comes from the ledger's allocator (``subject_key_numbers``): no two keys share one, whoever makes
them at once. The key of a new chat or conversation is written in the transaction of the stream's first event
(``new_key``, ``insert_new``; the recorders call them through ``ledger.sealer``), so a new chat's first command pays
no transaction of its own; any other new key is made in a small transaction of its own first (``current``).
"""

from __future__ import annotations

import base64
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, NamedTuple, TypeVar
from uuid import UUID

from ledger.sealing import aead

T = TypeVar("T")
MASTER_ENV, MASTER_FILE_ENV = "CHAT_LEDGER_MASTER_KEY", "CHAT_LEDGER_MASTER_KEY_FILE"
_WRAP_CONTEXT = b"chat-ledger-data-key/v1"
#: the first number the allocator hands out (``KeyRing.number``): above every number made before it, when each
#: subject's keys were numbered 1, 2, 3...; integers of 4 bytes (the box's associated data) leave 2.1 billion keys
FIRST_NUMBER = 1 << 24


class SubjectKeyError(LookupError):
    """A key that cannot be had: no master key, the wrong one, or a wrapped key that was changed."""


def master_key(env: dict[str, str] | None = None) -> bytes | None:
    """The master key from the environment (None: none given)."""
    env = os.environ if env is None else env
    text = env.get(MASTER_ENV)
    if not text and env.get(MASTER_FILE_ENV):
        try:
            text = Path(env[MASTER_FILE_ENV]).read_text().strip()
        except OSError as e:
            raise SubjectKeyError(f"cannot read the master key file {env[MASTER_FILE_ENV]}: {e}") from e
    if not text:
        return None
    try:
        key = base64.b64decode(text, validate=True)
    except ValueError as e:
        raise SubjectKeyError(f"{MASTER_ENV} must be base64 of 32 bytes: {e}") from e
    if len(key) != 32:
        raise SubjectKeyError(f"{MASTER_ENV} must be base64 of 32 bytes, not {len(key)}")
    return key


def new_master_key() -> str:
    """A new master key, as ``CHAT_LEDGER_MASTER_KEY`` takes it."""
    return base64.b64encode(os.urandom(32)).decode("ascii")


def _context(subject: UUID, number: int) -> bytes:
    return _WRAP_CONTEXT + subject.bytes + number.to_bytes(4, "big")


def wrap(master: bytes, subject: UUID, number: int, key: bytes) -> bytes:
    nonce = os.urandom(12)
    return nonce + aead(master).encrypt(nonce, key, _context(subject, number))


def unwrap(master: bytes, subject: UUID, number: int, wrapped: bytes) -> bytes:
    from cryptography.exceptions import InvalidTag

    try:
        return aead(master).decrypt(wrapped[:12], wrapped[12:], _context(subject, number))
    except InvalidTag:
        raise SubjectKeyError(f"key {number} of subject {subject} does not unwrap: another master key, or the stored key "
                        "was changed") from None


class KeyRing:
    """The subject keys of one ledger application (its events' datastore), unwrapped on use.

    A key has a **scope**: the stream whose content it seals (a chat — its tool calls' executions too — or a
    conversation). A subject writing in several chats has a key per chat, so the content of one chat can be
    erased (retention) without the subject's other chats, and the erasure of a subject names the chats it
    touched (the views to rewrite). Keys made before scopes existed have none (null)."""

    def __init__(self, app: Any, master: bytes) -> None:
        from eventsourcing.sqlite import SQLiteDatastore

        #: None: an in-memory ledger (the library's POPO recorders), whose keys live in an in-memory SQLite
        self.datastore = getattr(app.recorder, "datastore", None)
        self.sqlite = self.datastore is None or isinstance(self.datastore, SQLiteDatastore)
        self.table = "subject_keys" if self.sqlite else f'"{getattr(self.datastore, "schema", "")}".subject_keys'
        #: the numbers' allocator: a one-row table (SQLite), a sequence (PostgreSQL)
        self.numbers = ("subject_key_numbers" if self.sqlite
                        else f'"{getattr(self.datastore, "schema", "")}".subject_key_numbers')
        self._block: list[int] = []  # numbers reserved by this process, not handed out yet (``number``)
        self._block_lock = threading.Lock()  # (not ``_lock``: the reservation's transaction may take that one)
        self.p = "?" if self.sqlite else "%s"
        self.same = "IS" if self.sqlite else "IS NOT DISTINCT FROM"  # (null-safe equality)
        #: a new key's row (``_new_row``'s values)
        self.insert_sql = (f"INSERT INTO {self.table} (subject, number, scope, wrapped, created_at) VALUES "
                           f"({', '.join([self.p] * 5)})")
        self.master = master
        self._lock = threading.Lock()
        self._memory: Any = None
        if self.datastore is None:
            import sqlite3

            self._memory = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._made = False
        self._fast: Any = None

    @staticmethod
    def exists(app: Any) -> bool:
        """Whether the ledger of ``app`` has a key table (it seals personal values)."""
        datastore = getattr(app.recorder, "datastore", None)
        return datastore is not None and table_exists(datastore)

    # -- SQL, on the ledger's datastore (or the in-memory database) ----------------------------------------------

    def _sql(self, statements: list[tuple[str, tuple[Any, ...]]], commit: bool = False,
             unsynced: bool = False) -> list[tuple[Any, ...]]:
        """Run the statements in one transaction; the rows of the last one, as tuples (``unsynced``: ``_tx``'s)."""
        def run(c: Any) -> list[tuple[Any, ...]]:
            for sql, params in statements:
                c.execute(sql, params)
            return _rows(c) if statements[-1][0].startswith(("SELECT", "PRAGMA table_info")) else []
        return self._tx(run, commit, unsynced)

    def _tx(self, work: Callable[[Any], T], commit: bool = False, unsynced: bool = False) -> T:
        """``work(cursor)`` in one transaction (of the ledger's datastore, or the in-memory database). ``unsynced``:
        on a SQLite file, on a connection of this ring's own that does not wait for the disk (``_unsynced``)."""
        own = self._memory if self._memory is not None else self._unsynced() if unsynced and self.sqlite else None
        if own is not None:
            with self._lock:
                c = own.cursor()
                c.execute("BEGIN IMMEDIATE")
                try:
                    out = work(c)
                except BaseException:
                    c.execute("ROLLBACK")
                    raise
                c.execute("COMMIT")
                return out
        with self.datastore.transaction(commit=commit) as c:
            return work(c)

    def _unsynced(self) -> Any:
        """A connection to the SQLite file that commits without fsync (``synchronous=OFF``), for making keys: the
        first event sealed under a key commits after it on the ledger's own connection, whose fsync of the shared
        write-ahead log makes the key's pages durable too (a key lost in a crash before that sealed nothing). None
        for a database in memory."""
        if self._fast is None:
            import sqlite3

            pool = self.datastore.pool
            if pool.is_sqlite_memory_mode:
                return None
            self._fast = sqlite3.connect(pool.db_name, timeout=float(pool.lock_timeout or 5), isolation_level=None,
                                         check_same_thread=False)
            self._fast.execute("PRAGMA synchronous=OFF")
        return self._fast

    def ensure(self) -> None:
        """Make the table and its indexes (once per process; several processes at once: the losers of PostgreSQL's
        catalog race try again, finding them made)."""
        if self._made:
            return
        from eventsourcing.persistence import PersistenceError

        blob, uuid, t = ("BLOB", "TEXT", self.table) if self.sqlite else ("bytea", "uuid", self.table)
        ddl = [f"CREATE TABLE IF NOT EXISTS {t} (subject {uuid} NOT NULL, number integer NOT NULL, wrapped {blob}, "
               f"created_at text NOT NULL, destroyed_at text, scope {uuid}, PRIMARY KEY (subject, number))",
               f"CREATE INDEX IF NOT EXISTS subject_keys_scope ON {t} (scope)",
               f"CREATE INDEX IF NOT EXISTS subject_keys_destroyed ON {t} (destroyed_at)",
               # one live key per subject and scope, however many processes make one at once
               f"CREATE UNIQUE INDEX IF NOT EXISTS subject_keys_live ON {t} (subject, scope) WHERE wrapped IS NOT NULL"]
        n = self.numbers
        ddl += ([f"CREATE TABLE IF NOT EXISTS {n} (next integer NOT NULL)",
                 f"INSERT INTO {n} (next) SELECT {FIRST_NUMBER} WHERE NOT EXISTS (SELECT 1 FROM {n})"]
                if self.sqlite else [f"CREATE SEQUENCE IF NOT EXISTS {n} AS integer START WITH {FIRST_NUMBER}"])
        for attempt in range(5):
            try:
                if self._memory is None and table_exists(self.datastore) and not self._has_scope():
                    # a table made before keys had scopes (the first build of issue 28)
                    self._sql([(f"ALTER TABLE {t} ADD COLUMN scope {uuid}", ())], commit=True)
                # SQLite: in a transaction that takes the write lock first (BEGIN IMMEDIATE, waiting its turn), as
                # ``_tx`` does on its own connection: the statements read the schema, then the allocator's first row
                # is a write, and a transaction that read first cannot become a writer once another process wrote
                # ("database is locked" at once, whatever the timeout). Durable as the keys are (``_unsynced``).
                self._sql([(statement, ()) for statement in ddl], commit=True, unsynced=True)
                break
            except PersistenceError:  # PostgreSQL: another process made one of them at the same moment
                if attempt == 4:
                    raise
        self._made = True

    def _ready(self) -> bool:
        """Whether the table exists (a read of a ledger that never sealed makes nothing: it finds no key)."""
        if not self._made and self._memory is None and not table_exists(self.datastore):
            return False
        self.ensure()
        return True

    def _has_scope(self) -> bool:
        if self.sqlite:
            return any(r[1] == "scope" for r in self._sql([(f"PRAGMA table_info({self.table})", ())]))
        return bool(self._sql([("SELECT count(*) FROM information_schema.columns WHERE table_schema = %s AND "
                                "table_name = 'subject_keys' AND column_name = 'scope'", (self.datastore.schema,))])[0][0])

    def _id(self, value: UUID | None) -> Any:
        return None if value is None else value.hex if self.sqlite else value

    @staticmethod
    def _uuid(value: Any) -> UUID | None:
        return None if value is None else value if isinstance(value, UUID) else UUID(str(value))

    # -- the keys ------------------------------------------------------------------------------------------------

    def current(self, subject: UUID, scope: UUID) -> tuple[int, bytes]:
        """The subject's current key for ``scope`` (made when it has none there, or only destroyed ones): its
        number and bytes. Numbers come from the ledger's allocator (``number``): no two keys have one."""
        from eventsourcing.persistence import IntegrityError

        self.ensure()
        p, s, t = self.p, self._id(subject), self.table

        def find_or_make(c: Any) -> tuple[int, bytes | None, bytes | None]:
            # SQLite's (PostgreSQL: ``_find_or_make_pg``), one transaction: the live key of the scope, else a new one
            c.execute(f"SELECT number, wrapped FROM {t} WHERE subject = {p} AND scope {self.same} {p} AND wrapped IS "
                      "NOT NULL ORDER BY number DESC LIMIT 1", (s, self._id(scope)))
            found = _rows(c)
            if found:
                return int(found[0][0]), bytes(found[0][1]), None
            number = self._next_numbers(c, 1)  # (in this transaction: ``number`` would open another)
            key = os.urandom(32)
            c.execute(self.insert_sql, self._new_row(subject, number, scope, key))
            return number, None, key

        for _ in range(10):
            try:
                number, wrapped, key = (self._find_or_make_pg(subject, scope) if not self.sqlite else
                                        self._tx(find_or_make, commit=True, unsynced=True))
            except (IntegrityError, sqlite3_integrity_error()):
                continue  # another process (or thread) made it first: read theirs
            if number == 0:
                continue  # (PostgreSQL: the same)
            return number, key if key is not None else unwrap(self.master, subject, number, wrapped)  # type: ignore[arg-type]
        raise SubjectKeyError(f"no key could be made for subject {subject}")

    def _find_or_make_pg(self, subject: UUID, scope: UUID) -> tuple[int, bytes | None, bytes | None]:
        """``current``'s transaction on PostgreSQL in two round trips: one statement reads the scope's live key;
        when there is none, one pipeline sends BEGIN, the insert of a new key (its number from the allocator) and
        COMMIT. No wait for the disk (or a synchronous standby) there: the first event sealed under this key commits
        after it, and a commit makes the log durable up to it — this insert included; a key lost in a crash before
        any event used it sealed nothing (SQLite: ``_unsynced``). The insert does nothing where another process
        made the scope's key meanwhile: then (0, None, None), and ``current`` reads again."""
        from psycopg.rows import tuple_row

        t = self.table
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as c, \
                conn.cursor(row_factory=tuple_row) as insert:
            c.execute(f"SELECT number, wrapped FROM {t} WHERE subject = %s AND scope = %s AND wrapped IS NOT NULL "
                      "ORDER BY number DESC LIMIT 1", (subject, scope), prepare=True)
            found = c.fetchone()
            if found is not None:
                return int(found[0]), bytes(found[1]), None
            number, key = self.number(), os.urandom(32)
            try:
                with conn.pipeline():
                    c.execute("BEGIN")
                    c.execute("SET LOCAL synchronous_commit TO OFF")
                    insert.execute(self.insert_sql + " ON CONFLICT DO NOTHING RETURNING number",
                                   self._new_row(subject, number, scope, key), prepare=True)
                    c.execute("COMMIT")
            except BaseException:
                import psycopg

                if not conn.broken and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.rollback()
                raise
            return (number, None, key) if insert.fetchall() else (0, None, None)

    #: how many numbers a process reserves at once (one round trip each)
    BLOCK = 32

    def number(self) -> int:
        """A key number no other key of any subject has: from the ledger's allocator, reserved ``BLOCK`` at a time
        (a reservation not used is skipped, never handed out again). Numbers start at ``FIRST_NUMBER``, above
        those made before the allocator (each subject's count of keys)."""
        self.ensure()
        with self._block_lock:
            if not self._block:
                self._block = self._reserve(self.BLOCK)
            return self._block.pop()

    def _reserve(self, n: int) -> list[int]:
        """``n`` new numbers, highest first. SQLite: on the connection that does not wait for the disk (a number
        is only used by a row committed after its reservation, on the same write-ahead log, whose sync makes
        the reservation durable too: ``_unsynced``)."""
        if self.sqlite:
            end = self._tx(lambda c: self._next_numbers(c, n) + n, commit=True, unsynced=True)
            return list(range(end - 1, end - n - 1, -1))
        rows = self._sql([(f"SELECT nextval('{self.numbers}') FROM generate_series(1, {int(n)})", ())], commit=True)
        return sorted((int(r[0]) for r in rows), reverse=True)

    def _next_numbers(self, c: Any, n: int) -> int:
        """The first of ``n`` numbers taken from the SQLite allocator with ``c``, in its transaction."""
        c.execute(f"UPDATE {self.numbers} SET next = next + {int(n)} RETURNING next")
        return int(_rows(c)[0][0]) - n

    def new_key(self, subject: UUID, scope: UUID) -> tuple[int, bytes, tuple[Any, ...]]:
        """A new key of ``subject`` for a scope that has none yet, not stored: its number, its bytes and its row,
        which ``insert_new`` writes in the transaction of the first event sealed under it (``ledger.sealer``: a
        stream's first event, whose stream is the scope). Rolled back with that event, the key was never had."""
        number, key = self.number(), os.urandom(32)
        return number, key, self._new_row(subject, number, scope, key)

    def _new_row(self, subject: UUID, number: int, scope: UUID, key: bytes) -> tuple[Any, ...]:
        """The values of ``insert_sql`` for a new key: the key wrapped under the master key."""
        return self._id(subject), number, self._id(scope), wrap(self.master, subject, number, key), _now()

    def insert_new(self, cursor: Any, rows: list[tuple[Any, ...]]) -> None:
        """Write ``new_key``'s rows with ``cursor``, in the caller's transaction (the events' insert). A row whose
        scope has a live key already fails the transaction: its events were sealed under a key that would not
        be stored."""
        for row in rows:
            cursor.execute(self.insert_sql, row)

    def get(self, subject: UUID, number: int) -> bytes | None:
        """The subject's key ``number``; None when it was destroyed (or never made)."""
        if not self._ready():
            return None
        rows = self._sql([(f"SELECT wrapped FROM {self.table} WHERE subject = {self.p} AND number = {self.p}",
                           (self._id(subject), number))])
        if not rows or rows[0][0] is None:
            return None
        return unwrap(self.master, subject, number, bytes(rows[0][0]))

    def keys_of(self, subject: UUID, live: bool = True) -> list[KeyRef]:
        """The subject's keys, live (``live``) or destroyed."""
        if not self._ready():
            return []
        alive = "IS NOT NULL" if live else "IS NULL"
        rows = self._sql([(f"SELECT number, scope FROM {self.table} WHERE subject = {self.p} AND wrapped {alive} "
                           "ORDER BY number", (self._id(subject),))])
        return [KeyRef(subject, int(n), self._uuid(scope)) for n, scope in rows]

    def keys_in(self, scopes: list[UUID], live: bool = True) -> list[KeyRef]:
        """Every subject's keys of these scopes, live (``live``) or destroyed."""
        if not self._ready():
            return []
        alive = "IS NOT NULL" if live else "IS NULL"
        out: list[KeyRef] = []
        for i in range(0, len(scopes), 500):
            chunk = [self._id(s) for s in scopes[i:i + 500]]
            rows = self._sql([(f"SELECT subject, number, scope FROM {self.table} WHERE wrapped {alive} AND scope IN "
                               f"({', '.join([self.p] * len(chunk))})", tuple(chunk))])
            out.extend(KeyRef(self._uuid(s), int(n), self._uuid(sc)) for s, n, sc in rows)  # type: ignore[arg-type]
        return sorted(out)

    def live_scopes(self) -> set[UUID]:
        """Every scope that has a live key (content that can still be read)."""
        if not self._ready():
            return set()
        rows = self._sql([(f"SELECT DISTINCT scope FROM {self.table} WHERE wrapped IS NOT NULL AND scope IS NOT NULL",
                           ())])
        return {self._uuid(r[0]) for r in rows}  # type: ignore[misc]

    def destroy(self, keys: list[KeyRef]) -> list[KeyRef]:
        """Destroy these keys (their wrapped bytes overwritten, marked destroyed; the rows stay); the ones that
        were live until now. On SQLite with ``secure_delete``, then a checkpoint that folds and truncates the
        write-ahead log: the wrapped key is in neither file afterwards."""
        self.ensure()
        if not keys:
            return []
        p, now = self.p, _now()

        def overwrite(c: Any) -> list[KeyRef]:
            if self.sqlite and self._memory is None:
                c.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left in the file
            gone = []
            for k in keys:  # (RETURNING: whether it was live until now, read in the same statement)
                c.execute(f"UPDATE {self.table} SET wrapped = NULL, destroyed_at = {p} WHERE subject = {p} AND "
                          f"number = {p} AND wrapped IS NOT NULL RETURNING number", (now, self._id(k.subject), k.number))
                if _rows(c):
                    gone.append(k)
            return gone

        gone = self._tx(overwrite, commit=True)
        if self.sqlite and self._memory is None:  # the write-ahead log still holds the pages as they were
            with self.datastore.transaction(commit=False) as c:
                c.execute("COMMIT")  # (a checkpoint cannot run inside a transaction)
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                c.execute("BEGIN")
        return gone

    def epoch(self) -> Any:
        """What changes whenever a key is destroyed (the latest destruction's time and how many there are): a
        process that kept keys in memory compares it to drop the destroyed ones (``ledger.sealer``)."""
        if not self._ready():
            return None
        return tuple(self._sql([(f"SELECT max(destroyed_at), count(destroyed_at) FROM {self.table}", ())])[0])

    # -- export and import (the rows as they are: wrapped, or destroyed) ------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        """Every key row as plain data (wrapped keys in base64; a destroyed key has none)."""
        if not self._ready():
            return []
        rows = self._sql([(f"SELECT subject, number, scope, wrapped, created_at, destroyed_at FROM {self.table} "
                           "ORDER BY subject, number", ())])
        return [{"subject": str(self._uuid(s)), "number": int(n), "scope": None if sc is None else str(self._uuid(sc)),
                 "wrapped": None if w is None else base64.b64encode(bytes(w)).decode("ascii"), "created_at": c,
                 "destroyed_at": d} for s, n, sc, w, c, d in rows]

    def check_rows(self, rows: list[dict[str, Any]]) -> None:
        """``SubjectKeyError`` unless every wrapped key of ``rows`` (``rows()``'s shape) unwraps under this ledger's
        master key: the right master key, and keys not changed."""
        for r in rows:
            if r.get("wrapped") is not None:
                unwrap(self.master, UUID(r["subject"]), int(r["number"]), base64.b64decode(r["wrapped"]))

    def restore(self, rows: list[dict[str, Any]]) -> int:
        """Add key rows (``rows()``'s shape) this ledger does not have; a row it has is kept as it is (so a key
        destroyed here stays destroyed, whatever an older export says). Returns how many were added. Each
        wrapped key must unwrap under this ledger's master key (else ``SubjectKeyError``: nothing added)."""
        self.ensure()
        self.check_rows(rows)
        p = self.p
        statements = []
        for r in rows:
            subject, number = UUID(r["subject"]), int(r["number"])
            wrapped = None if r.get("wrapped") is None else base64.b64decode(r["wrapped"])
            scope = None if r.get("scope") is None else UUID(r["scope"])
            conflict = "OR IGNORE " if self.sqlite else ""
            tail = "" if self.sqlite else " ON CONFLICT DO NOTHING"
            statements.append((f"INSERT {conflict}INTO {self.table} (subject, number, scope, wrapped, created_at, "
                               f"destroyed_at) VALUES ({p}, {p}, {p}, {p}, {p}, {p}){tail}",
                               (self._id(subject), number, self._id(scope), wrapped, r["created_at"],
                                r.get("destroyed_at"))))
        count = f"SELECT count(*) FROM {self.table}"
        before = self._sql([(count, ())])[0][0]
        if statements:
            # and the allocator moved past the numbers restored (this process's reserved numbers given up)
            top = f"(SELECT max(number) FROM {self.table})"
            statements.append((f"UPDATE {self.numbers} SET next = {top} + 1 WHERE {top} >= next", ()) if self.sqlite
                              else (f"SELECT setval('{self.numbers}', m) FROM {top} AS x(m) WHERE m >= (SELECT "
                                    f"last_value FROM {self.numbers})", ()))
            self._sql(statements, commit=True)
            with self._block_lock:
                self._block = []
        return int(self._sql([(count, ())])[0][0]) - int(before)


class KeyRef(NamedTuple):
    """One data key: whose, its number, and the stream whose content it seals (None: made before scopes)."""

    subject: UUID
    number: int
    scope: UUID | None


def _rows(c: Any) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in c.fetchall()]


def sqlite3_integrity_error() -> type:
    import sqlite3

    return sqlite3.IntegrityError


def table_exists(datastore: Any) -> bool:
    """Whether the datastore's ledger has ``subject_keys``."""
    from eventsourcing.sqlite import SQLiteDatastore

    with datastore.transaction(commit=False) as c:
        if isinstance(datastore, SQLiteDatastore):
            c.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'subject_keys'")
        else:
            c.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = 'subject_keys'",
                      (datastore.schema,))
        row = c.fetchone()
    return bool(row[0] if not isinstance(row, dict) else next(iter(row.values())))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()
