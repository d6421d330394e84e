"""The event store: one eventsourcing Application named ``chatledger`` for every aggregate type.

One application (so one gap-free notification order for projections) on SQLite (the embedded default)
or PostgreSQL. The database URL is translated into the library's environment variables here and
nowhere else. Postgres inserts take the library's table lock (so commit order equals notification
order); ``POSTGRES_ENABLE_DB_FUNCTIONS`` stays off because tailing readers skip events with it under
concurrent writers. The recorders are this project's (``ledger.recorders``): no blind insert retry,
in-doubt commits reported, the versions a decision read checked at commit, bounded waits.
"""

from __future__ import annotations

import os
import re
import sqlite3
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, unquote, urlsplit
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, Repository
from eventsourcing.persistence import InfrastructureFactory, Mapper, Notification
from eventsourcing.utils import strtobool

from ledger.base import DeciderAggregate, fast_project
from ledger.codec import FORMATS, MsgspecMapper
from ledger.errors import LedgerError
from ledger.recorders import CONNECT_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT, RECORDER_TOPICS

DEFAULT_URL = "sqlite:///chat-ledger.db"
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
APP_NAME = "chatledger"
#: size of the cache of catalog-type aggregates when ``AGGREGATE_CACHE_MAXSIZE`` is not set
DEFAULT_CACHE_MAXSIZE = 1024


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed ``--db`` URL."""

    url: str
    backend: str  # "sqlite" | "postgres"
    path: str = ""  # sqlite file path (or ":memory:")
    host: str = ""
    port: int = 5432
    user: str = ""
    password: str = ""
    dbname: str = ""
    schema: str = "public"

    @classmethod
    def parse(cls, url: str) -> DatabaseURL:
        parts = urlsplit(url)
        if parts.scheme == "sqlite":
            # sqlite:///relative.db, sqlite:////abs/path.db, sqlite:///:memory:
            path = url[len("sqlite://"):]
            if path.startswith("/"):
                path = path[1:]
            if not path:
                raise LedgerError("invalid_database_url", f"no SQLite file path in database URL {url!r}")
            return cls(url=url, backend="sqlite", path=unquote(path))
        if parts.scheme in ("postgresql", "postgres"):
            dbname = unquote(parts.path.lstrip("/"))
            if not dbname or not parts.hostname:
                raise LedgerError(
                    "invalid_database_url",
                    f"PostgreSQL URL must name a host and a database: {redact(url)!r}",
                )
            try:
                port = parts.port
            except ValueError:
                raise LedgerError("invalid_database_url",
                                  f"invalid port in PostgreSQL URL {redact(url)!r}") from None
            query = parse_qs(parts.query)
            schema = query.get("schema", ["public"])[0] or "public"
            if not _SCHEMA.match(schema):
                raise LedgerError("invalid_database_url",
                                  f"invalid schema name {schema!r}: use lower-case letters, digits and _")
            return cls(
                url=url, backend="postgres", host=parts.hostname, port=port or 5432,
                user=unquote(parts.username or "postgres"), password=unquote(parts.password or ""),
                dbname=dbname, schema=schema,
            )
        raise LedgerError(
            "invalid_database_url",
            f"unsupported database URL {redact(url)!r}: use sqlite:///FILE or postgresql://USER@HOST[:PORT]/DB[?schema=S]",
        )

    def env(self) -> dict[str, str]:
        if self.backend == "sqlite":
            return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": self.path,
                    "SQLITE_LOCK_TIMEOUT": "30"}
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_HOST": self.host, "POSTGRES_PORT": str(self.port), "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": self.password, "POSTGRES_DBNAME": self.dbname,
            "POSTGRES_SCHEMA": self.schema, "POSTGRES_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
            "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": str(IDLE_IN_TRANSACTION_TIMEOUT),
            "POSTGRES_POOL_SIZE": "2", "POSTGRES_MAX_OVERFLOW": "8",
        }

    def psycopg_conninfo(self) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(host=self.host, port=self.port, user=self.user,
                             password=self.password or None, dbname=self.dbname,
                             connect_timeout=CONNECT_TIMEOUT)


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def resolve_url(url: str | None) -> str:
    return url or os.environ.get("CHAT_LEDGER_DB") or DEFAULT_URL


def ensure_database(db: DatabaseURL) -> None:
    """Make the place the tables live in: the SQLite file's folder is checked, the Postgres schema created."""
    if db.backend == "sqlite":
        if db.path != ":memory:" and not db.path.startswith("file:"):
            folder = Path(db.path).expanduser().resolve().parent
            if not folder.is_dir():
                raise LedgerError("database_unavailable", f"SQLite folder does not exist: {folder}")
            target = Path(db.path)
            if target.exists() and not os.access(target, os.W_OK):
                raise LedgerError("database_unavailable", f"SQLite file is read-only: {db.path}")
        return
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(db.schema)))
    except psycopg.Error as e:
        raise LedgerError(
            "database_unavailable",
            f"cannot reach PostgreSQL at {db.host}:{db.port}/{db.dbname}: {str(e).strip()}",
        ) from e


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

    def __init__(self, env: dict[str, str] | None = None, payload_format: str = "json") -> None:
        if payload_format not in FORMATS:
            raise LedgerError("invalid_setting", f"unknown payload format {payload_format!r}")
        self.payload_format = payload_format
        super().__init__(env)
        self.cached_repository = self.construct_cached_repository()
        # SQLite: threads sharing this application queue for its one writer connection. The library
        # gives up on that queue after 5 s (ConnectionUnavailableError) while the connection it waits
        # for may itself be waiting up to SQLITE_LOCK_TIMEOUT for another process's write lock: wait as
        # long for the writer as for the file lock.
        pool = getattr(getattr(self.recorder, "datastore", None), "pool", None)
        lock_timeout = self.env.get("SQLITE_LOCK_TIMEOUT")
        if pool is not None and lock_timeout and hasattr(pool, "pool_timeout"):
            pool.pool_timeout = max(float(pool.pool_timeout), float(lock_timeout))

    def construct_env(self, name: str, env: Any = None) -> Any:
        """The library's environment, with this project's recorder for the persistence module unless one is
        named (``ledger.recorders``: no blind insert retry, in-doubt commits, versions checked at commit)."""
        environment = super().construct_env(name, env)
        topic = RECORDER_TOPICS.get(environment.get("PERSISTENCE_MODULE") or "")
        if topic and not environment.get(InfrastructureFactory.APPLICATION_RECORDER_TOPIC):
            environment[InfrastructureFactory.APPLICATION_RECORDER_TOPIC] = topic
        return environment

    def construct_factory(self, env: Any) -> Any:
        """The library's factory; a PostgreSQL pool also gets libpq's ``connect_timeout``, and gives up a
        failing reconnection after as long (its default backs off for 5 minutes, so a process kept
        refusing commands for about as long as the server had been gone; the next wait starts afresh)."""
        factory = super().construct_factory(env)
        pool = getattr(getattr(factory, "datastore", None), "pool", None)
        kwargs = getattr(pool, "kwargs", None)
        if isinstance(kwargs, dict) and "dbname" in kwargs:  # psycopg's pool
            kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT)
            pool.reconnect_timeout = CONNECT_TIMEOUT
        return factory

    def construct_repository(self) -> Repository[UUID]:
        return Repository(event_store=self.events, snapshot_store=self.snapshots)

    def construct_cached_repository(self) -> Repository[UUID]:
        maxsize = self.env.get(self.AGGREGATE_CACHE_MAXSIZE)
        return Repository(
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
            return None
        return deepcopy(aggregate) if copy else aggregate

    def forget_cached(self, aggregate_ids: Any) -> None:
        """Drop these aggregates from the cache (read from the store next time): the unit of work's remedy
        for a cached copy found stale at commit (without fast-forward the cache never learns of it)."""
        cache = self.cached_repository.cache
        for aggregate_id in aggregate_ids if cache is not None else ():
            try:
                cache.get(aggregate_id, evict=True)
            except KeyError:
                pass

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        recordings = super().save(*objs, **kwargs)
        repo = getattr(self, "cached_repository", None)
        if repo is not None and repo.cache is not None and not repo.fastforward:
            # Without fast-forward the cache learns of writes only here (as the library does for its own).
            for obj in objs:
                if getattr(type(obj), "CACHED", False):
                    repo.cache.put(obj.id, obj)
        return recordings

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


def open_app(url: str | None = None, payload_format: str | None = None) -> ChatLedgerApp:
    """Open the ledger at ``url`` (default ``$CHAT_LEDGER_DB`` or ``sqlite:///chat-ledger.db``)."""
    import ledger.registry  # noqa: F401  (every event class is known before anything is read)

    db = DatabaseURL.parse(resolve_url(url))
    ensure_database(db)
    fmt = payload_format or os.environ.get("CHAT_LEDGER_PAYLOAD_FORMAT", "json")
    try:
        if db.backend == "postgres":
            import psycopg

            with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (_DDL_LOCK,))
                try:
                    return ChatLedgerApp(env=db.env(), payload_format=fmt)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))
        return ChatLedgerApp(env=db.env(), payload_format=fmt)
    except sqlite3.Error as e:  # pragma: no cover - depends on the file system
        raise LedgerError("database_unavailable", f"cannot open SQLite database {db.path}: {e}") from e
    except Exception as e:
        if db.backend == "sqlite" and type(e).__module__.startswith("eventsourcing"):
            raise LedgerError("database_unavailable", f"cannot open SQLite database {db.path}: {e}") from e
        if db.backend == "postgres" and type(e).__module__.startswith(("psycopg", "eventsourcing")):
            raise LedgerError(
                "database_unavailable", f"cannot open PostgreSQL at {db.host}:{db.port}/{db.dbname}: {e}"
            ) from e
        raise
