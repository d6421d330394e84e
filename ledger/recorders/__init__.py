"""The chatledger application's recorders, handed out by its factories (``LogKeepingFactory``).

Two rules the library's own recorders do not keep:

* **No blind insert retry.** The library retries ``insert_events`` on any connection error; when the
  server had committed and only its reply was lost, the retry meets its own rows (``IntegrityError``) and
  the command is decided again on top of itself. Here an insert runs once. On PostgreSQL a connection
  that fails before ``COMMIT`` is sent raises ``ConnectionLost`` (nothing was recorded: the unit of work
  may run the attempt again); one that fails after raises ``SaveInDoubt`` with the stored events it tried
  to write, and the unit of work reads them back (``read_back``) before anything is decided again.
  SQLite commits locally (a commit returns, or raises before committing): it has no in-doubt path.
* **Facts read from other streams are checked at commit.** ``save(..., expected_versions={id: version})``
  checks, in the insert's own transaction and after its table lock (PostgreSQL) or write lock (SQLite),
  that every stream a decision read but does not write is still at the version it read (0: no stream);
  otherwise the transaction rolls back with ``DependencyChanged`` (an ``IntegrityError``: decide again).

This module holds what the unit of work needs (importing neither database driver); the recorders are in
``ledger.recorders.postgres`` and ``ledger.recorders.sqlite``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, TypeVar
from uuid import UUID

from eventsourcing.persistence import (
    InfrastructureFactoryError, IntegrityError, OperationalError, PersistenceError, StoredEvent,
)

#: ``save`` keyword: the version each stream the decision read (and does not write) was at; 0 = no stream
EXPECTED_VERSIONS = "expected_versions"

# PostgreSQL waits, which bound a command against a server that has gone (docs/commands.md, "Errors"):
#: seconds: libpq's connect_timeout, and the pool's wait for a connection (POSTGRES_CONNECT_TIMEOUT)
CONNECT_TIMEOUT = 2
#: libpq's TCP settings, unless the URL sets them: a server that stops answering without closing the
#: connection (a partition, a host that lost power) ends a wait in about 10 s instead of the kernel's
#: retransmissions (Linux gives up after about 15 minutes). ``tcp_user_timeout`` (ms) bounds data left
#: unacknowledged (a query or COMMIT sent into the partition); the keepalives find a reply that never
#: comes (probes from 2 s idle; with the user timeout set, the kernel ends the connection once it has
#: heard nothing for that long). The price: a live server that stops reading while the client's data
#: fills its window (Linux counts that too; measured on loopback, a 5 s timeout cut a reader paused for
#: 8 s) is cut after 10 s. The ledger's saves are a few kB, which the server's kernel takes whether or not
#: the backend reads, and COPY sends its rows only after the server has asked for them.
TCP_DEFAULTS = {"tcp_user_timeout": "10000", "keepalives": "1", "keepalives_idle": "2",
                "keepalives_interval": "1", "keepalives_count": "3"}
#: seconds a read goes on retrying failed connections (a terminated connection fails at once and the
#: next one works; against a server that has gone, the first pool wait ends it)
READ_RETRY_SECONDS = 1.0
#: seconds (whole: the library's setting is an int) an orphaned transaction may hold the table lock
IDLE_IN_TRANSACTION_TIMEOUT = 2
#: seconds a read-back waits for the table lock (an insert still in flight on the lost connection)
READ_BACK_LOCK_TIMEOUT = 3.0

#: PERSISTENCE_MODULE -> the factory the application uses instead: the library's, handing out this project's
#: recorders for everything that writes the log (``LogKeepingFactory``)
FACTORY_TOPICS = {
    "eventsourcing.postgres": "ledger.libpq:LibpqPostgresFactory",
    "eventsourcing.sqlite": "ledger.recorders.sqlite:SQLiteLedgerFactory",
}


T = TypeVar("T")


class KeysWithEvents:
    """A recorder that writes the new data keys of the streams it saves in their transaction (``ledger.sealer``:
    a new chat's key goes with the chat's first event)."""

    #: the application's ``ledger.sealer.Sealer`` when it seals (``ledger.store`` sets it)
    new_keys: Any = None

    def _with_new_keys(self, stored_events: Sequence[Any], insert: Callable[[list[Any]], T]) -> T:
        """``insert(new keys)``: the insert of ``stored_events`` writing those keys in its transaction; unless it
        returned (committed), the sealer forgets them — rolled back, or in doubt."""
        new = self.new_keys.take_new_keys(stored_events) if self.new_keys is not None else []
        try:
            return insert(new)
        except BaseException:
            if new:
                self.new_keys.forget_new_keys(new)
            raise


class LogKeepingFactory:
    """Mixed into the library's factories: every recorder the factory hands out for the log keeps its hash
    chain. The application and process recorders are this project's (class attributes set by each factory).
    ``aggregate_recorder("events")`` — the library's plain recorder on the log's table, which would write rows
    without hashes (PostgreSQL) or fail on the table's extra column (SQLite) — is refused with a clear error:
    the log is written through the application recorder. Other purposes (``"snapshots"``) and the tracking
    recorder write other tables and stay the library's."""

    def aggregate_recorder(self, purpose: str = "events") -> Any:
        if purpose == "events":
            raise InfrastructureFactoryError(
                "the ledger's log keeps a hash chain: write it through application_recorder() or "
                "process_recorder(), not aggregate_recorder('events')")
        return super().aggregate_recorder(purpose)  # type: ignore[misc]


class ConnectionLost(OperationalError):
    """The connection failed before ``COMMIT`` was sent (or none could be had): nothing was recorded."""


class SaveInDoubt(PersistenceError):
    """The connection failed after ``COMMIT`` was sent: the server may or may not have committed."""

    def __init__(self, stored_events: Sequence[StoredEvent], cause: BaseException) -> None:
        super().__init__("connection lost waiting for the reply to COMMIT: "
                         f"{str(cause).strip() or type(cause).__name__}")
        self.stored_events = list(stored_events)


#: seconds a statement of a save — its COMMIT above all, which waits for a synchronous standby — may take
#: before it is abandoned (PostgreSQL's ``statement_timeout``, set for the save's transaction only);
#: ``CHAT_LEDGER_COMMIT_TIMEOUT`` or ``--commit-timeout`` sets it
COMMIT_TIMEOUT = 10.0
COMMIT_TIMEOUT_ENV = "CHAT_LEDGER_COMMIT_TIMEOUT"


def commit_timeout() -> float:
    import os

    value = os.environ.get(COMMIT_TIMEOUT_ENV)
    try:
        return float(value) if value else COMMIT_TIMEOUT
    except ValueError:
        return COMMIT_TIMEOUT


class ReplicationUnconfirmed(PersistenceError):
    """COMMIT waited ``commit_timeout()`` for a synchronous standby and was abandoned: the server committed the
    save locally, but no standby confirmed it (it would be lost if the primary were lost now)."""

    def __init__(self, stored_events: Sequence[StoredEvent], seconds: float) -> None:
        first = stored_events[0] if stored_events else None
        where = f"stream {first.originator_id} version {first.originator_version}" if first else "the save"
        super().__init__(f"{where} is committed on the primary but no synchronous standby confirmed it within "
                         f"{seconds:g} s (repeat with the same idempotency key to settle it)")
        self.stored_events = list(stored_events)


class StatementTimedOut(PersistenceError):
    """A statement of the save before COMMIT did not return within ``commit_timeout()``: it was rolled back,
    nothing was recorded."""


class DependencyChanged(IntegrityError):
    """A stream the decision read is no longer at the version it read."""

    def __init__(self, stale: Mapping[UUID, tuple[int, int]]) -> None:
        detail = ", ".join(f"{sid} read at version {read}, now {now}" for sid, (read, now) in stale.items())
        super().__init__(f"streams changed since the decision read them: {detail}")
        self.stale = dict(stale)


def stale_versions(expected: Mapping[UUID, int], current: Mapping[UUID, int]) -> dict[UUID, tuple[int, int]]:
    """The streams whose current version (no stream: 0) is not the one read: id -> (read, current)."""
    return {sid: (v, current.get(sid, 0)) for sid, v in expected.items() if current.get(sid, 0) != v}
