"""The event store: one eventsourcing Application named ``chatledger`` for every aggregate type.

One application (so one gap-free notification order for projections) on SQLite (the embedded default)
or PostgreSQL. The database URL is translated into the library's environment variables here and
nowhere else. Postgres inserts take the library's table lock (so commit order equals notification
order); ``POSTGRES_ENABLE_DB_FUNCTIONS`` stays off because tailing readers skip events with it under
concurrent writers. The recorders are this project's (``ledger.recorders``): no blind insert retry,
in-doubt commits reported, the versions a decision read checked at commit, bounded waits.

Database URLs (how PostgreSQL URLs are read by libpq, the ledger's ``schema`` parameter) and the checks that a
ledger exists are in ``ledger.database``; every name there is importable from here as well.

Opening never creates anything unless asked: ``open_app(url, create=False)`` refuses a ledger that does not
exist with ``database_not_found`` (the check of commands that only read); ``create=True`` (the default,
for writers) makes the PostgreSQL schema and the event tables when they are missing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from copy import deepcopy
from typing import Any, Callable, Iterator, Sequence
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent, Recording, Repository
from eventsourcing.persistence import Mapper, Notification, PersistenceError
from eventsourcing.utils import strtobool

from ledger.base import DeciderAggregate, LedgerEvent, fast_project
from ledger.codec import FORMATS, MsgspecMapper

# Where a ledger lives (URLs, creating and requiring it) is ``ledger.database``; its names are this module's too.
from ledger.database import (  # noqa: F401  (re-exported: callers import them from here)
    APP_NAME,
    DEFAULT_CACHE_MAXSIZE,
    DEFAULT_SQLITE_TIMEOUT,
    DEFAULT_URL,
    PG_EVENTS_TABLE,
    SQLITE_EVENTS_TABLE,
    SQLITE_TIMEOUT_ENV,
    DatabaseURL,
    _one_line,
    ensure_database,
    redact,
    require_ledger,
    resolve_url,
    sqlite_timeout,
)
from ledger.errors import LedgerError
from ledger.recorders import CONNECT_TIMEOUT, FACTORY_TOPICS, KeysWithEvents
from ledger.snapshots import INTERVALS, LedgerRepository, take_snapshots


log = logging.getLogger(__name__)


class ChatLedgerApp(Application[UUID]):
    """Holds every aggregate type; replays with the fast projector; decodes with the msgspec mapper.

    Two repositories over the one event store: ``repository`` (chats, conversations, ...) never caches,
    because chats are many and each command reads its chat once; ``cached_repository`` serves ``load_cached``
    for the small, hot, rarely-written aggregates that model resolution reads on every command that
    resolves a model (organization catalogs, the deployment, model config claims). It is the library's
    repository cache, configured by the library's settings: ``AGGREGATE_CACHE_MAXSIZE`` (default here
    1024; ``<= 0`` unbounded), ``AGGREGATE_CACHE_FASTFORWARD`` (default ``y``: every read first applies the
    events recorded since the cached version, by any process, so a cached aggregate is exactly current at
    the cost of one indexed select) and ``AGGREGATE_CACHE_FASTFORWARD_SKIPPING``. With fast-forward off, the
    cache only sees this process's writes. Readers get the cached object, commands a deep copy (always:
    an attempt that fails after recording must not leave its events in the cache).
    """

    name = APP_NAME
    #: snapshots of long streams (``ledger.snapshots``): taken from the aggregate each save records when it
    #: carries the stream past a multiple of the interval, used by every load while their code is current
    snapshotting_intervals = INTERVALS

    def __init__(self, env: dict[str, str] | None = None, payload_format: str = "json") -> None:
        if payload_format not in FORMATS:
            raise LedgerError("invalid_setting", f"unknown payload format {payload_format!r}")
        self.payload_format = payload_format
        self.given_env = dict(env or {})
        from ledger.subjectkeys import master_key

        #: the master key (``CHAT_LEDGER_MASTER_KEY``): given, personal values are sealed (docs/privacy.md)
        self.master_key = master_key()
        super().__init__(env)
        if self.master_key is not None:
            from ledger.sealer import Sealer

            self.mapper.sealer = Sealer(self, self.master_key)  # type: ignore[attr-defined]
            if isinstance(self.recorder, KeysWithEvents):  # (the ledger's recorders: a new chat's key with its events)
                self.recorder.new_keys = self.mapper.sealer  # type: ignore[attr-defined]
            # a cached aggregate may hold content whose key was destroyed since: drop them all (erasures are rare)
            self.mapper.sealer.on_erasure.append(self._drop_cache)  # type: ignore[attr-defined]
        else:
            self._refuse_sealed_ledger()
        self.cached_repository = self.construct_cached_repository()
        #: called with the recordings of every save of this object, in the saving thread, after its commit
        #: (the library's ``_notify`` hook): the ledger service's log watcher streams this process's
        #: writes from them without reading them back
        self.listeners: list[Callable[[Sequence[Recording[UUID]]], None]] = []
        #: streams of cached types found empty by the last read through the cache (``peek_cached``)
        self._absent: set[UUID] = set()
        #: the database it was opened on (``open_app``; None: made otherwise, an in-memory ledger)
        self.database_url: Any = None
        # SQLite: threads sharing this application queue for its one writer connection. The library
        # gives up on that queue after 5 s (ConnectionUnavailableError) while the connection it waits
        # for may itself be waiting up to SQLITE_LOCK_TIMEOUT for another process's write lock: wait as
        # long for the writer as for the file lock.
        pool = getattr(getattr(self.recorder, "datastore", None), "pool", None)
        lock_timeout = self.env.get("SQLITE_LOCK_TIMEOUT")
        if pool is not None and lock_timeout and hasattr(pool, "pool_timeout"):
            pool.pool_timeout = max(float(pool.pool_timeout), float(lock_timeout))

    def _drop_cache(self) -> None:
        self.cached_repository = self.construct_cached_repository()

    def refresh_keys(self) -> None:
        """Forget every key and decrypted aggregate this process keeps, when a key was destroyed since it read
        them (now, not within ``Sealer.REFRESH`` seconds): what reads after an erasure calls first."""
        sealer = getattr(self.mapper, "sealer", None)
        if sealer is not None:
            sealer.refresh(force=True)

    def reopen(self) -> ChatLedgerApp:
        """A new application object on the same database, with connections of its own, creating nothing
        (what a forked worker process uses: its parent's connections are not its to use)."""
        return type(self)(env={**self.given_env, "CREATE_TABLE": "no"}, payload_format=self.payload_format)

    def construct_env(self, name: str, env: Any = None) -> Any:
        """The library's environment, with this project's factory for the library's persistence module: its
        recorders keep the hash chain (``ledger.recorders``: no blind insert retry, in-doubt commits, versions
        checked at commit)."""
        environment = super().construct_env(name, env)
        topic = FACTORY_TOPICS.get(environment.get("PERSISTENCE_MODULE") or "")
        if topic:
            environment["PERSISTENCE_MODULE"] = topic
        return environment

    def construct_factory(self, env: Any) -> Any:
        """The library's factory; a PostgreSQL pool gives up a failing reconnection after libpq's
        ``connect_timeout`` (its default backs off for 5 minutes, so a process kept refusing commands for about
        as long as the server had been gone; the next wait starts afresh). The connect timeout itself is in the
        connection string (``DatabaseURL.psycopg_conninfo``)."""
        factory = super().construct_factory(env)
        pool = getattr(getattr(factory, "datastore", None), "pool", None)
        if pool is not None and hasattr(pool, "reconnect_timeout"):  # psycopg's pool
            pool.reconnect_timeout = CONNECT_TIMEOUT
        return factory

    def _refuse_sealed_ledger(self) -> None:
        """A ledger that seals personal values (it has subjects' keys) is not opened without its master key:
        such a process could read none of the content, and would record new content unsealed."""
        from ledger.subjectkeys import MASTER_ENV, KeyRing

        try:
            sealed = KeyRing.exists(self)
        except (PersistenceError, sqlite3.Error):
            return  # (a ledger that cannot be read says so at its first read)
        if sealed:
            self.close()
            raise LedgerError("master_key_required", f"this ledger seals people's data: give its master key "
                                                     f"({MASTER_ENV} or {MASTER_ENV}_FILE; docs/privacy.md)")

    def construct_snapshot_store(self) -> Any:
        """The library's snapshot store, or None when its table cannot be made (a ledger written before
        snapshots, opened read-only by a writer: its commands are then refused one by one, as before). None too
        when personal values are sealed: a snapshot would hold them unsealed (docs/privacy.md)."""
        if self.master_key is not None:
            return None
        try:
            return super().construct_snapshot_store()
        except (PersistenceError, sqlite3.Error):
            return None

    def construct_repository(self) -> Repository[UUID]:
        return LedgerRepository(event_store=self.events, snapshot_store=self.snapshots)

    def construct_cached_repository(self) -> Repository[UUID]:
        maxsize = self.env.get(self.AGGREGATE_CACHE_MAXSIZE)
        return LedgerRepository(
            event_store=self.events,
            snapshot_store=self.snapshots,
            cache_maxsize=int(maxsize) if maxsize else DEFAULT_CACHE_MAXSIZE,
            fastforward=strtobool(self.env.get(self.AGGREGATE_CACHE_FASTFORWARD, "y")),
            fastforward_skipping=strtobool(self.env.get(self.AGGREGATE_CACHE_FASTFORWARD_SKIPPING, "n")),
            deepcopy_from_cache=False,  # load_cached copies when asked
        )

    def load_cached(self, aggregate_id: UUID, copy: bool = True) -> DeciderAggregate | None:
        """The aggregate at its latest version through the cache, or None when the stream is empty.

        ``copy=False`` returns the cached object itself: for readers that never change it (it is
        fast-forwarded in place by a later read). Commands that record on it take a copy.
        """
        try:
            aggregate = self.cached_repository.get(aggregate_id, projector_func=fast_project,
                                                   deepcopy_from_cache=False)
        except AggregateNotFoundError:
            self._absent.add(aggregate_id)
            return None
        self._absent.discard(aggregate_id)
        return deepcopy(aggregate) if copy else aggregate

    def peek_cached(self, aggregate_id: UUID) -> tuple[bool, DeciderAggregate | None]:
        """``(True, the cached object as it is)`` with no fast-forward (it may be behind the store), or
        ``(True, None)`` for a stream the last read through the cache found empty, or ``(False, None)``
        when the cache knows nothing of it. For optimistic readers whose save checks the version they saw
        (``commands.uow``)."""
        cache = self.cached_repository.cache
        if aggregate_id in self._absent:
            return True, None
        if cache is None:
            return False, None
        try:
            return True, cache.get(aggregate_id)
        except KeyError:
            return False, None

    def cached_behind(self, aggregate_ids: Any) -> None:
        """These cached aggregates were found behind the store (a save's check): with fast-forward the next
        read through the cache brings them up to date in place; without it they are dropped (the cache would
        never learn). Either way no optimistic reader takes them as they are any more."""
        if self.cached_repository.fastforward:
            self._absent.difference_update(aggregate_ids)
        else:
            self.forget_cached(aggregate_ids)

    def forget_cached(self, aggregate_ids: Any) -> None:
        """Drop these aggregates from the cache (read from the store next time): the unit of work's remedy
        for a cached copy found stale at commit (without fast-forward the cache never learns of it)."""
        cache = self.cached_repository.cache
        for aggregate_id in aggregate_ids:
            self._absent.discard(aggregate_id)
            if cache is None:
                continue
            try:
                cache.get(aggregate_id, evict=True)
            except KeyError:
                pass

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        """The library's ``save``, collecting the ledger's own aggregates and events without its runtime
        ``Protocol`` checks (two per aggregate saved, about 20 us each on Python 3.11)."""
        processing = ProcessingEvent[UUID]()
        for obj in objs:
            if isinstance(obj, DeciderAggregate):
                processing.events.extend(obj.collect_events())
                processing.aggregates[obj.id] = obj
            elif isinstance(obj, LedgerEvent):
                processing.events.append(obj)
            else:
                processing.collect_events(obj)
        processing.saved_kwargs.update(kwargs)
        sealer = getattr(self.mapper, "sealer", None)
        with sealer.saving() if sealer is not None else contextlib.nullcontext():
            recordings = self._record(processing)
        self._take_snapshots(processing)
        self._notify(recordings)
        self.notify(processing.events)  # (deprecated in the library, kept as it calls it)
        repo = getattr(self, "cached_repository", None)
        if repo is not None and repo.cache is not None and not repo.fastforward:
            # Without fast-forward the cache learns of writes only here (as the library does for its own).
            for obj in objs:
                if getattr(type(obj), "CACHED", False):
                    repo.cache.put(obj.id, obj)
        elif repo is not None:
            # With it, the cached object (not the one saved: that one is the writer's copy) is behind this
            # save: dropped, so that optimistic readers (``peek_cached``) do not decide on it in vain.
            self.forget_cached([obj.id for obj in objs if getattr(type(obj), "CACHED", False)])
        return recordings

    def _notify(self, recordings: list[Recording[UUID]]) -> None:
        for listener in self.listeners:
            try:
                listener(recordings)
            except Exception:  # the save is committed: a listener's failure must not make it look failed
                log.exception("a listener of saves failed")

    def _take_snapshots(self, processing: ProcessingEvent[UUID]) -> None:
        take_snapshots(self, processing)

    def construct_mapper(self) -> Mapper[UUID]:
        return MsgspecMapper(
            transcoder=None, compressor=self.factory.compressor(), cipher=self.factory.cipher(),
            fmt=self.payload_format,
        )

    def load(self, aggregate_id: UUID, version: int | None = None) -> DeciderAggregate | None:
        """The aggregate at its latest version (or at ``version``), or None when the stream is empty."""
        try:
            return self.repository.get(aggregate_id, version=version, projector_func=fast_project)
        except AggregateNotFoundError:
            return None

    def stream(self, aggregate_id: UUID, gt: int | None = None, lte: int | None = None) -> list[Any]:
        return list(self.events.get(aggregate_id, gt=gt, lte=lte))

    def notifications(self, start: int, limit: int, stop: int | None = None) -> list[Notification]:
        """Notifications with ids > start (global order), at most ``limit``."""
        return self.recorder.select_notifications(start=start, limit=limit, stop=stop,
                                                  inclusive_of_start=False)

    def head(self) -> int:
        return self.recorder.max_notification_id() or 0

    def iter_events(self, start: int = 0, page: int = 500) -> Iterator[tuple[int, Any]]:
        """Every event after notification ``start`` in global order, decoded, with its notification id."""
        while True:
            notes = self.notifications(start, page)
            if not notes:
                return
            for n in notes:
                yield n.id, self.mapper.to_domain_event(n)
            start = notes[-1].id


#: Held while the library creates its tables: concurrent CREATE ... IF NOT EXISTS statements on one
#: PostgreSQL schema otherwise fail with "tuple concurrently updated".
_DDL_LOCK = 0x63686174  # "chat"


def _located(app: ChatLedgerApp, db: DatabaseURL) -> ChatLedgerApp:
    app.database_url = db  # (where its views are: what an erasure rewrites, ``commands.protection``)
    return app


def open_app(url: str | None = None, payload_format: str | None = None, create: bool = True) -> ChatLedgerApp:
    """Open the ledger at ``url`` (default ``$CHAT_LEDGER_DB`` or ``sqlite:///chat-ledger.db``).

    ``create=True``: make what is missing (the PostgreSQL schema, the event tables). ``create=False``: the
    ledger must exist (else ``database_not_found``) and nothing is created — the mode of reading commands.
    """
    import ledger.registry  # noqa: F401  (every event class is known before anything is read)

    db = DatabaseURL.parse(resolve_url(url))
    fmt = payload_format or os.environ.get("CHAT_LEDGER_PAYLOAD_FORMAT", "json")
    env = db.env()
    if create:
        ensure_database(db)
    else:
        require_ledger(db)
        env["CREATE_TABLE"] = "no"  # the library's setting: a reader creates no table
    try:
        if create and db.backend == "postgres":
            import psycopg

            from psycopg import sql

            from ledger.database import local_commits
            from ledger.libpq import POSTGRES_CONNINFO

            with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (_DDL_LOCK,))
                try:
                    table = sql.Identifier(db.schema, PG_EVENTS_TABLE).as_string(conn)
                    if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                        # A new ledger's tables are made by an application whose commits do not wait for a
                        # synchronous standby: making tables is no command (nothing is acknowledged), and were
                        # the primary lost now, the next command would make them again on the new one. So a
                        # standby that has gone never holds up the making of a ledger (its first command is
                        # bounded like any other: --commit-timeout).
                        ChatLedgerApp(env={**env, POSTGRES_CONNINFO: local_commits(env[POSTGRES_CONNINFO])},
                                      payload_format=fmt).close()
                    return _located(ChatLedgerApp(env=env, payload_format=fmt), db)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))
        return _located(ChatLedgerApp(env=env, payload_format=fmt), db)
    except sqlite3.Error as e:  # pragma: no cover - depends on the file system
        raise LedgerError("database_unavailable", f"cannot open SQLite database {db.path}: {e}") from e
    except Exception as e:
        if db.backend == "sqlite" and type(e).__module__.startswith("eventsourcing"):
            raise LedgerError("database_unavailable", f"cannot open SQLite database {db.path}: {e}") from e
        if db.backend == "postgres" and type(e).__module__.startswith(("psycopg", "eventsourcing")):
            raise LedgerError("database_unavailable",
                              f"cannot open PostgreSQL at {db.host}:{db.port}/{db.dbname}: {_one_line(e)}") from e
        raise
