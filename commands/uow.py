"""The service layer's unit of work: load aggregates, record decided events, save atomically, retry.

A command runs as ``run(app, work)`` where ``work(uow)`` loads what it needs through ``uow.get``,
records events through ``uow.record``/``uow.create`` and returns its result. Everything recorded in one
attempt is saved in one transaction. On an optimistic-concurrency conflict (another writer saved the same
stream version first) the whole attempt is thrown away and ``work`` runs again on fresh state, up to
``MAX_ATTEMPTS`` times; then the command is refused with ``conflict``. A ``LedgerError`` raised by ``work``
records nothing.
"""

from __future__ import annotations

import random
import time
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


class UnitOfWork:
    def __init__(self, app: Any, now: datetime | None = None) -> None:
        self.app = app
        self.now = now or utcnow()
        self._loaded: dict[UUID, DeciderAggregate | None] = {}
        self._dirty: dict[UUID, DeciderAggregate] = {}
        self._read: dict[UUID, DeciderAggregate | None] = {}
        self.attempt = 0

    def get(self, aggregate_id: UUID) -> Any:
        """The aggregate as of now (loaded once per attempt), or None."""
        if aggregate_id not in self._loaded:
            self._loaded[aggregate_id] = self.app.load(aggregate_id)
        return self._loaded[aggregate_id]

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
        return recordings[-1].notification.id if recordings else None


def run(app: Any, work: Callable[[UnitOfWork], R], max_attempts: int = MAX_ATTEMPTS) -> R:
    for attempt in range(max_attempts):
        uow = UnitOfWork(app)
        uow.attempt = attempt
        try:
            result = work(uow)
            uow.commit()
        except IntegrityError:
            # Someone else wrote one of these streams first: re-load, re-decide.
            time.sleep(random.uniform(0, 0.002 * (2 ** min(attempt, 6))))
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
