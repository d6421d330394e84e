"""The service layer's unit of work: load aggregates, record decided events, save atomically, retry.

A command runs as ``run(app, work)`` where ``work(uow)`` loads what it needs through ``uow.get``,
records events through ``uow.record``/``uow.create`` and returns its result. Everything recorded in one
attempt is saved in one transaction. On an optimistic-concurrency conflict (another writer saved the same
stream version first) the whole attempt is thrown away and ``work`` runs again on fresh state, up to
``MAX_ATTEMPTS`` times; then the command is refused with ``conflict``. A ``LedgerError`` raised by ``work``
records nothing.

The ledger service saves the commands of concurrent requests several to a transaction
(``commands.groupcommit``): there ``run`` stages the command's first attempt with the batch instead of
saving it, under the rules below, and a batch that cannot be saved runs each command again here.

Recently saved aggregates (``Recent``, per application object, i.e. per process): an aggregate this
process saved is kept in memory at its saved version, and the next command on it decides from that copy
instead of reading the stream again (the read was about a third of a command's time on SQLite). That is
optimistic, and safe only because of three rules:

* the save checks it: every aggregate taken from memory must be recorded on in the same attempt, and the
  store refuses a stale one (``IntegrityError`` on the stream's next version when another process wrote
  since) — then the attempt is redone from the store, as for any concurrent writer;
* an attempt that took something from memory and refuses the command (``LedgerError``), or records
  nothing on such an aggregate (a read-only use, or no change), is redone from the store, so a refusal
  or a no-op result is always decided on current state;
* a copy is taken out of memory for the attempt (never shared) and only put back by a successful save,
  so an attempt that fails cannot leave half-recorded state behind.

The same optimism, under the same rules, saves two more reads in an attempt that starts from memory:
catalog-type aggregates read for facts (``read``) come from the application's cache as they are, without
the fast-forward select (a stream the cache last found empty is taken as still empty: the deployment of a
ledger that has none). They are dependencies, so the save checks their versions: a stale one is
``DependencyChanged``, forgotten, and the attempt is decided again on the store. And a stream a command
creates (``get_new``) is taken as absent when this process has not saved it (the insert at version 1
checks it: ``IntegrityError`` when it exists, and the attempt is decided again on the store, which then
answers ``chat_already_exists`` or an idempotent repeat). An optimistic attempt that refuses the command or
records nothing is redone from the store, as above.

Facts from other streams: every aggregate an attempt loads (``get``, ``get_cached``) or reads (``read``)
and does not record on is a dependency of its decision (a catalog's membership, a model config claim, the
deployment, a parent chat, a tool call's chat; a stream found absent is one too). The save checks, in its
own transaction, that each is still at the version the attempt saw (``ledger.recorders``); if one moved,
the save is refused like a version conflict (``DependencyChanged``) and the attempt is decided again.

Lost replies (PostgreSQL): no layer below retries an insert. A save whose connection failed before
COMMIT was sent recorded nothing and is tried again (decided again) for ``RECONNECT_SECONDS``, then the
command is refused with ``database_unavailable``. A save whose connection failed after COMMIT was sent
is in doubt (``SaveInDoubt``) until the rows at the versions it wrote are read back, under a lock that
waits out any insert still in flight: its own events (same topic, same payload bytes) — it was recorded,
and the command reports the result it decided; none — nothing was recorded, the attempt runs again;
other events — another writer took those versions, the attempt is decided again. When the database
cannot be asked within ``IN_DOUBT_SECONDS``, the command is refused with ``outcome_unknown``, naming the
streams and versions to check.
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence, TypeVar
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError, StoredEvent

from commands.metrics import COUNTERS
from ledger.base import DeciderAggregate, LedgerEvent
from ledger.errors import LedgerError
from ledger.recorders import (
    EXPECTED_VERSIONS, ConnectionLost, DependencyChanged, ReplicationUnconfirmed, SaveInDoubt,
)

MAX_ATTEMPTS = 12
#: seconds from a command's start in which a save that failed before COMMIT was sent is tried again
RECONNECT_SECONDS = 2.0
#: seconds from a command's start in which an in-doubt save must be read back (else ``outcome_unknown``)
IN_DOUBT_SECONDS = 5.0
R = TypeVar("R")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Recent:
    """The aggregates this process saved last (an LRU of ``maxsize``), each at its saved version."""

    def __init__(self, maxsize: int = 1_000) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[UUID, DeciderAggregate] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, aggregate_id: UUID) -> DeciderAggregate | None:
        with self._lock:
            return self._items.pop(aggregate_id, None)

    def put(self, aggregates: Any) -> None:
        with self._lock:
            for aggregate in aggregates:
                self._items[aggregate.id] = aggregate
                self._items.move_to_end(aggregate.id)
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)


_recent: weakref.WeakKeyDictionary[Any, Recent] = weakref.WeakKeyDictionary()
_recent_lock = threading.Lock()


def recent_of(app: Any) -> Recent:
    """The ``Recent`` of an application object (made on first use, gone with the application)."""
    recent = _recent.get(app)
    if recent is None:
        with _recent_lock:
            recent = _recent.setdefault(app, Recent())
    return recent


class UnitOfWork:
    def __init__(self, app: Any, now: datetime | None = None, from_memory: bool = False) -> None:
        self.app = app
        self.now = now or utcnow()
        self._loaded: dict[UUID, DeciderAggregate | None] = {}
        self._dirty: dict[UUID, DeciderAggregate] = {}
        self._read: dict[UUID, DeciderAggregate | None] = {}
        self.attempt = 0
        self._recent = recent_of(app) if from_memory else None
        self.from_memory: set[UUID] = set()  # aggregates this attempt took from ``Recent`` (or took as absent)
        self.unverified: set[UUID] = set()  # catalog-type aggregates read from the cache without fast-forward
        self._versions: dict[UUID, int] = {}  # each aggregate's version as this attempt saw it (0: none)

    def _saw(self, aggregate_id: UUID, aggregate: DeciderAggregate | None) -> None:
        self._versions.setdefault(aggregate_id, aggregate.version if aggregate is not None else 0)

    def dependencies(self) -> dict[UUID, int]:
        """The streams this attempt's decision read but does not write, at the versions it read."""
        return {sid: v for sid, v in self._versions.items() if sid not in self._dirty}

    def get(self, aggregate_id: UUID) -> Any:
        """The aggregate as of now (loaded once per attempt), or None."""
        if aggregate_id not in self._loaded:
            aggregate = self._recent.take(aggregate_id) if self._recent is not None else None
            if aggregate is not None:
                self.from_memory.add(aggregate_id)
            else:
                aggregate = self.app.load(aggregate_id)
            self._loaded[aggregate_id] = aggregate
            self._saw(aggregate_id, aggregate)
        return self._loaded[aggregate_id]

    def get_new(self, aggregate_id: UUID) -> Any:
        """Like ``get``, for the stream a command creates: in an attempt from memory, a stream this process
        has not saved is taken as absent without reading the store (the create's insert checks it)."""
        if self._recent is not None and aggregate_id not in self._loaded:
            aggregate = self._recent.take(aggregate_id)
            self.from_memory.add(aggregate_id)
            self._loaded[aggregate_id] = aggregate
            self._saw(aggregate_id, aggregate)
        return self.get(aggregate_id)

    @property
    def optimistic(self) -> bool:
        """Whether this attempt decided on anything not read from the store (module docstring)."""
        return bool(self.from_memory or self.unverified)

    def checked_by_save(self) -> bool:
        """Whether the save will check every decision taken from memory (module docstring)."""
        return self.from_memory <= self._dirty.keys() and (bool(self._dirty) or not self.unverified)

    def get_cached(self, aggregate_id: UUID) -> Any:
        """Like ``get``, through the application's aggregate cache (catalog-type aggregates): a copy, current
        as of now, that this unit of work may record on."""
        if aggregate_id not in self._loaded:
            self._loaded[aggregate_id] = self.app.load_cached(aggregate_id)
            self._saw(aggregate_id, self._loaded[aggregate_id])
        return self._loaded[aggregate_id]

    def read(self, aggregate_id: UUID) -> Any:
        """A catalog-type aggregate to read facts from, never to record on: the cached object itself
        (fast-forwarded to now), so a hot read costs one indexed select and no replay or copy."""
        if aggregate_id in self._loaded:
            return self._loaded[aggregate_id]
        if aggregate_id not in self._read:
            # The cached object may be fast-forwarded in place by another thread's read while this
            # decision uses it; the version noted here is then older than the store's, and the check at
            # commit refuses the save (it can only pass when the object never moved past this version).
            peek = getattr(self.app, "peek_cached", None)
            hit, aggregate = peek(aggregate_id) if peek is not None and self._recent is not None else (False, None)
            if hit:
                self.unverified.add(aggregate_id)
            else:
                aggregate = self.app.load_cached(aggregate_id, copy=False)
            self._read[aggregate_id] = aggregate
            self._saw(aggregate_id, self._read[aggregate_id])
        return self._read[aggregate_id]

    def record(self, aggregate: DeciderAggregate, events: list[LedgerEvent]) -> None:
        if events:
            aggregate.record(events)
            self._dirty[aggregate.id] = aggregate

    def create(self, aggregate_class: type[DeciderAggregate], events: list[LedgerEvent]) -> Any:
        aggregate = aggregate_class.start(events)
        self._loaded[aggregate.id] = aggregate
        self._dirty[aggregate.id] = aggregate
        return aggregate

    def commit(self) -> int | None:
        """Save everything recorded in one transaction, checking the dependencies in it; the last
        notification id, if any."""
        if not self._dirty:
            return None
        dependencies = self.dependencies()
        recordings = self.app.save(*self._dirty.values(),
                                   **({EXPECTED_VERSIONS: dependencies} if dependencies else {}))
        self.saved()
        return recordings[-1].notification.id if recordings else None

    def saved(self) -> None:
        """What this process keeps of a save that was recorded (``Recent``)."""
        recent_of(self.app).put(a for a in self._dirty.values() if a.id in self._loaded)

    def written(self) -> list[UUID]:
        return list(self._dirty)

    def touched(self) -> set[UUID]:
        """Every stream this attempt read or writes."""
        return self._versions.keys() | self._dirty.keys()

    def recorded(self) -> list[DeciderAggregate]:
        """The aggregates this attempt recorded on (what ``commit`` saves)."""
        return list(self._dirty.values())


#: ``staging.batch``: the group commit (``commands.groupcommit``) running in this thread, if any; ``run``
#: then hands it the command's work (``stage``) instead of deciding and saving it here
staging = threading.local()


def run(app: Any, work: Callable[[UnitOfWork], R], max_attempts: int = MAX_ATTEMPTS) -> R:
    batch = getattr(staging, "batch", None)
    if batch is not None and batch.app is app:
        return batch.stage(work)  # type: ignore[no-any-return]
    from_memory = True  # first try deciding on recently saved aggregates (module docstring)
    attempt = 0
    started = time.monotonic()
    while attempt < max_attempts:
        uow = UnitOfWork(app, from_memory=from_memory)
        uow.attempt = attempt
        conflict = False
        try:
            result = work(uow)
            if not uow.checked_by_save():
                from_memory = False  # a read-only use or a no-op on remembered state: decide again on current
                continue
            uow.commit()
        except LedgerError:
            if uow.optimistic:
                from_memory = False  # refusals are decided on current state
                continue
            raise
        except IntegrityError as e:
            # Someone else wrote one of these streams first, or one this decision read: re-load, re-decide.
            if isinstance(e, DependencyChanged):
                cached_behind(app, e.stale)
            conflict = True
        except SaveInDoubt as doubt:
            outcome = settle(app, doubt.stored_events, started + IN_DOUBT_SECONDS)
            if outcome == "recorded":
                uow.saved()
                forget_cached(app, uow.written())  # the cache did not see this save
                return result
            if outcome == "absent":  # nothing recorded: run the attempt again
                attempt += 1
                continue
            conflict = True  # another writer has those versions
        except ReplicationUnconfirmed as e:
            # Committed on the primary, not confirmed by a synchronous standby within the bound: not an error of
            # the command, not a success either. The answer says so; a repeat with the same key settles it.
            forget_cached(app, uow.written())
            raise LedgerError("replication_unconfirmed", str(e)) from e
        except ConnectionLost as e:
            # Nothing recorded: the connection failed before COMMIT was sent. Try again while there is time.
            if time.monotonic() - started < RECONNECT_SECONDS:
                attempt += 1
                time.sleep(random.uniform(0.01, 0.05))  # let the pool replace the connection
                continue
            raise unavailable(app, e) from e
        except PersistenceError as e:
            # The database refused or failed the command's transaction (disk full, pool exhausted, a read
            # that kept failing): it did not commit, so nothing was recorded.
            raise unavailable(app, e) from e
        if conflict:
            # (A remembered copy gone stale is not counted as an attempt: the next one reads the store.)
            if uow.optimistic:
                from_memory = False
                continue
            attempt += 1
            COUNTERS.add("chat_ledger_conflict_retries_total")
            time.sleep(random.uniform(0, 0.002 * (2 ** min(attempt - 1, 6))))
            continue
        return result
    raise LedgerError("conflict", f"concurrent writers: gave up after {max_attempts} attempts")


InDoubtOutcome = Literal["recorded", "absent", "conflict"]


def in_doubt_outcome(wrote: Sequence[StoredEvent],
                     found: Mapping[tuple[UUID, int], tuple[str, bytes]]) -> InDoubtOutcome:
    """What became of a save whose reply was lost, from the rows now at the versions it wrote: all of them
    its own events (same topic, same payload bytes) — recorded; none — absent; anything else — another
    writer's events (a save is one transaction: it cannot be partly there)."""
    if not found:
        return "absent"
    mine = {(s.originator_id, s.originator_version): (s.topic, bytes(s.state)) for s in wrote}
    return "recorded" if found == mine else "conflict"


def settle(app: Any, wrote: Sequence[StoredEvent], deadline: float) -> InDoubtOutcome:
    """Read back an in-doubt save (``ledger.recorders``: under a lock no in-flight insert holds), retrying
    a failed connection until ``deadline``; then ``outcome_unknown``."""
    keys = [(s.originator_id, s.originator_version) for s in wrote]
    pause = 0.05
    while True:
        try:
            return in_doubt_outcome(wrote, app.recorder.read_back(keys))
        except PersistenceError as e:
            if time.monotonic() + pause > deadline:
                raise outcome_unknown(app, wrote, e) from e
            time.sleep(pause)  # back off before asking a failing server again
            pause = min(pause * 2, 0.5)


def forget_cached(app: Any, aggregate_ids: Iterable[UUID]) -> None:
    forget = getattr(app, "forget_cached", None)
    if forget is not None:
        forget(aggregate_ids)


def cached_behind(app: Any, aggregate_ids: Iterable[UUID]) -> None:
    behind = getattr(app, "cached_behind", None)
    if behind is not None:
        behind(aggregate_ids)
    else:
        forget_cached(app, aggregate_ids)


def unavailable(app: Any, e: BaseException) -> LedgerError:
    return LedgerError("database_unavailable", f"{_database(app)}: {type(e).__name__}: "
                                               f"{str(e).strip() or 'no detail'}")


def outcome_unknown(app: Any, wrote: Sequence[StoredEvent], e: BaseException) -> LedgerError:
    """The command may have been recorded: name each stream and the version it would have reached, and
    how to look. The stream recorded last comes first (handlers record the command's own stream after
    the relatives it touches); the save was one transaction, so any of them tells."""
    heads: dict[UUID, int] = {}
    for s in reversed(wrote):
        heads[s.originator_id] = max(heads.get(s.originator_id, 0), s.originator_version)
    (stream, version), *others = heads.items()
    also = "".join(f", stream {sid} version {v}" for sid, v in others)
    return LedgerError(
        "outcome_unknown",
        f"{_database(app)} stopped answering after the command was sent ({type(e).__name__}: "
        f"{str(e).strip() or 'no detail'}), so the command may have been recorded: it would have written "
        f"stream {stream} version {version}{also} (in one transaction). Check with "
        f"`chat-ledger audit {stream} --at {version}`: the command was recorded if that version shows its events.")


def _database(app: Any) -> str:
    """Which database failed, for error messages (never the password)."""
    env = getattr(app, "env", None)
    get = env.get if env is not None else (lambda *_: None)
    if get("SQLITE_DBNAME"):
        return f"SQLite database {get('SQLITE_DBNAME')}"
    if get("POSTGRES_HOST"):
        return (f"PostgreSQL at {get('POSTGRES_HOST')}:{get('POSTGRES_PORT')}/{get('POSTGRES_DBNAME')}"
                f" (schema {get('POSTGRES_SCHEMA')})")
    return "the database"
