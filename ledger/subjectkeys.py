"""Each data subject's keys, wrapped by the ledger's master key (issue 28, point 2; docs/privacy.md).

A subject (a user) has data keys numbered from 1: its content is sealed under the current one
(``ledger.sealing``). Keys live in a table of their own beside the events — ``subject_keys(subject, number,
wrapped, created_at, destroyed_at)``, never in an event — each AES-256-GCM-wrapped under the **master key**, with
the subject and number as associated data (a wrapped key copied to another row does not unwrap). The master key is
given to the ledger, never stored by it: ``CHAT_LEDGER_MASTER_KEY`` (base64 of 32 bytes) or the file named by
``CHAT_LEDGER_MASTER_KEY_FILE`` (the same, one line).

Destroying a subject's keys overwrites their wrapped bytes with nothing and marks them destroyed; the rows stay,
so numbering goes on (a subject who writes again gets a new key) and a reader can tell "erased" from "missing".
"""

from __future__ import annotations

import base64
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

MASTER_ENV, MASTER_FILE_ENV = "CHAT_LEDGER_MASTER_KEY", "CHAT_LEDGER_MASTER_KEY_FILE"
_WRAP_CONTEXT = b"chat-ledger-data-key/v1"


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
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(12)
    return nonce + AESGCM(master).encrypt(nonce, key, _context(subject, number))


def unwrap(master: bytes, subject: UUID, number: int, wrapped: bytes) -> bytes:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        return AESGCM(master).decrypt(wrapped[:12], wrapped[12:], _context(subject, number))
    except InvalidTag:
        raise SubjectKeyError(f"key {number} of subject {subject} does not unwrap: another master key, or the stored key "
                        "was changed") from None


class KeyRing:
    """The subject keys of one ledger application (its events' datastore), unwrapped on use."""

    def __init__(self, app: Any, master: bytes) -> None:
        from eventsourcing.sqlite import SQLiteDatastore

        #: None: an in-memory ledger (the library's POPO recorders), whose keys live in ``_memory``
        self.datastore = getattr(app.recorder, "datastore", None)
        self._memory: dict[tuple[UUID, int], bytes | None] = {}
        self.sqlite = isinstance(self.datastore, SQLiteDatastore)
        self.table = "subject_keys" if self.sqlite else f'"{getattr(self.datastore, "schema", "")}".subject_keys'
        self.p = "?" if self.sqlite else "%s"
        self.master = master
        self._lock = threading.Lock()
        self._made = False

    @staticmethod
    def exists(app: Any) -> bool:
        """Whether the ledger of ``app`` has a key table (it seals personal values)."""
        datastore = getattr(app.recorder, "datastore", None)
        return datastore is not None and table_exists(datastore)

    def ensure(self) -> None:
        if self._made or self.datastore is None:
            return
        from eventsourcing.persistence import PersistenceError

        blob, subject = ("BLOB", "TEXT") if self.sqlite else ("bytea", "uuid")
        try:
            with self.datastore.transaction(commit=True) as c:
                c.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (subject {subject} NOT NULL, number integer NOT "
                          f"NULL, wrapped {blob}, created_at text NOT NULL, destroyed_at text, "
                          "PRIMARY KEY (subject, number))")
        except PersistenceError:  # PostgreSQL: another process made it at the same moment (its catalog's key)
            if not table_exists(self.datastore):
                raise
        self._made = True



    def _subject(self, subject: UUID) -> Any:
        return subject.hex if self.sqlite else subject

    def _rows(self, subject: UUID) -> list[tuple[int, bytes | None]]:
        if self.datastore is None:
            return sorted((n, w) for (s, n), w in self._memory.items() if s == subject)
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT number, wrapped FROM {self.table} WHERE subject = {self.p} ORDER BY number",
                      (self._subject(subject),))
            return [(int(r["number"] if isinstance(r, dict) else r[0]),
                     (lambda w: None if w is None else bytes(w))(r["wrapped"] if isinstance(r, dict) else r[1]))
                    for r in c.fetchall()]

    def current(self, subject: UUID) -> tuple[int, bytes]:
        """The subject's current key (made when it has none, or only destroyed ones): its number and bytes."""
        from eventsourcing.persistence import IntegrityError

        self.ensure()
        for _ in range(10):
            rows = self._rows(subject)
            if rows and rows[-1][1] is not None:
                number, wrapped = rows[-1]
                return number, unwrap(self.master, subject, number, wrapped)
            number = rows[-1][0] + 1 if rows else 1
            key = os.urandom(32)
            if self.datastore is None:
                with self._lock:
                    self._memory.setdefault((subject, number), wrap(self.master, subject, number, key))
                continue  # (read back: another thread may have made it first)
            try:
                with self.datastore.transaction(commit=True) as c:
                    c.execute(f"INSERT INTO {self.table} (subject, number, wrapped, created_at) VALUES "
                              f"({self.p}, {self.p}, {self.p}, {self.p})",
                              (self._subject(subject), number, wrap(self.master, subject, number, key), _now()))
                return number, key
            except IntegrityError:
                continue  # another process made it first: read theirs
        raise SubjectKeyError(f"no key could be made for subject {subject}")

    def get(self, subject: UUID, number: int) -> bytes | None:
        """The subject's key ``number``; None when it was destroyed (or never made)."""
        self.ensure()
        for n, wrapped in self._rows(subject):
            if n == number:
                return None if wrapped is None else unwrap(self.master, subject, number, wrapped)
        return None

    def destroy(self, subject: UUID) -> list[int]:
        """Destroy every key of the subject (overwritten, marked destroyed); the numbers destroyed now."""
        self.ensure()
        if self.datastore is None:
            with self._lock:
                gone = [n for (s, n), w in self._memory.items() if s == subject and w is not None]
                self._memory.update({(subject, n): None for n in gone})
            return sorted(gone)
        with self.datastore.transaction(commit=True) as c:
            if self.sqlite:
                c.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left readable in the file
            c.execute(f"SELECT number FROM {self.table} WHERE subject = {self.p} AND wrapped IS NOT NULL",
                      (self._subject(subject),))
            numbers = [int(r["number"] if isinstance(r, dict) else r[0]) for r in c.fetchall()]
            c.execute(f"UPDATE {self.table} SET wrapped = NULL, destroyed_at = {self.p} WHERE subject = {self.p} "
                      "AND wrapped IS NOT NULL", (_now(), self._subject(subject)))
        if self.sqlite:  # the write-ahead log still holds the pages as they were: fold it in and empty it
            with self.datastore.transaction(commit=False) as c:
                c.execute("COMMIT")  # (a checkpoint cannot run inside a transaction)
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                c.execute("BEGIN")
        return numbers


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
