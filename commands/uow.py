"""The service layer's unit of work: load aggregates, record decided events, save atomically, retry.

A command runs as ``run(app, work)`` where ``work(uow)`` loads what it needs through ``uow.get``,
records events through ``uow.record``/``uow.create`` and returns its result. Everything recorded in one
attempt is saved in one transaction. On an optimistic-concurrency conflict (another writer saved the same
stream version first) the whole attempt is thrown away and ``work`` runs again on fresh state, up to
``MAX_ATTEMPTS`` times; then the command is refused with ``conflict``. A ``LedgerError`` raised by ``work``
records nothing.

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
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable, TypeVar
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError

from ledger.base import DeciderAggregate, LedgerEvent
from ledger.errors import LedgerError

MAX_ATTEMPTS = 12
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
        self.from_memory: set[UUID] = set()  # aggregates this attempt took from ``Recent``

    def get(self, aggregate_id: UUID) -> Any:
        """The aggregate as of now (loaded once per attempt), or None."""
        if aggregate_id not in self._loaded:
            aggregate = self._recent.take(aggregate_id) if self._recent is not None else None
            if aggregate is not None:
                self.from_memory.add(aggregate_id)
            else:
                aggregate = self.app.load(aggregate_id)
            self._loaded[aggregate_id] = aggregate
        return self._loaded[aggregate_id]

    def checked_by_save(self) -> bool:
        """Whether the save will check every decision taken from memory (module docstring)."""
        return self.from_memory <= self._dirty.keys()

    def get_cached(self, aggregate_id: UUID) -> Any:
        """Like ``get``, through the application's aggregate cache (catalog-type aggregates): a copy, current
        as of now, that this unit of work may record on."""
        if aggregate_id not in self._loaded:
            self._loaded[aggregate_id] = self.app.load_cached(aggregate_id)
        return self._loaded[aggregate_id]

    def read(self, aggregate_id: UUID) -> Any:
        """A catalog-type aggregate to read facts from, never to record on: the cached object itself
        (fast-forwarded to now), so a hot read costs one indexed select and no replay or copy."""
        if aggregate_id in self._loaded:
            return self._loaded[aggregate_id]
        if aggregate_id not in self._read:
            self._read[aggregate_id] = self.app.load_cached(aggregate_id, copy=False)
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
        """Save everything recorded in one transaction; the last notification id, if any."""
        if not self._dirty:
            return None
        recordings = self.app.save(*self._dirty.values())
        recent_of(self.app).put(a for a in self._dirty.values() if a.id in self._loaded)
        return recordings[-1].notification.id if recordings else None


def run(app: Any, work: Callable[[UnitOfWork], R], max_attempts: int = MAX_ATTEMPTS) -> R:
    from_memory = True  # first try deciding on recently saved aggregates (module docstring)
    attempt = 0
    while attempt < max_attempts:
        uow = UnitOfWork(app, from_memory=from_memory)
        uow.attempt = attempt
        try:
            result = work(uow)
            if not uow.checked_by_save():
                from_memory = False  # a read-only use or a no-op on remembered state: decide again on current
                continue
            uow.commit()
        except LedgerError:
            if uow.from_memory:
                from_memory = False  # refusals are decided on current state
                continue
            raise
        except IntegrityError:
            # Someone else wrote one of these streams first: re-load, re-decide. (A remembered copy gone
            # stale is not counted as an attempt: the next one reads the store.)
            if uow.from_memory:
                from_memory = False
                continue
            attempt += 1
            time.sleep(random.uniform(0, 0.002 * (2 ** min(attempt - 1, 6))))
            continue
        except PersistenceError as e:
            # The database failed under the command (connection lost after the library's own retries,
            # disk full, pool exhausted): the transaction did not commit, so nothing was recorded.
            raise LedgerError("database_unavailable", f"{_database(app)}: {type(e).__name__}: "
                                                      f"{str(e).strip() or 'no detail'}") from e
        return result
    raise LedgerError("conflict", f"concurrent writers: gave up after {max_attempts} attempts")


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
