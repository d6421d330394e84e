"""The event store: one eventsourcing Application named ``chatledger`` for every aggregate type.

One application (so one gap-free notification order for projections) on SQLite (the embedded default)
or PostgreSQL. The database URL is translated into the library's environment variables here and
nowhere else. Postgres inserts take the library's table lock (so commit order equals notification
order); ``POSTGRES_ENABLE_DB_FUNCTIONS`` stays off because tailing readers skip events with it under
concurrent writers. The recorders are this project's (``ledger.recorders``): no blind insert retry,
in-doubt commits reported, the versions a decision read checked at commit, bounded waits.

PostgreSQL URLs are read by libpq itself (``psycopg.conninfo``): every libpq connection parameter in the
URL's query (``sslmode``, ``host=/socket/dir``, ``application_name``, ...) is passed through, what the URL
leaves out comes from the ``PG*`` environment variables and libpq's defaults (no host: the default local
socket), and a parameter libpq does not know is refused. ``schema`` is the ledger's own parameter.

Opening never creates anything unless asked: ``open_app(url, create=False)`` refuses a ledger that does not
exist with ``database_not_found`` (the check of commands that only read); ``create=True`` (the default,
for writers) makes the PostgreSQL schema and the event tables when they are missing.
"""

from __future__ import annotations

import os
import re
import sqlite3
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import quote, unquote, urlsplit
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent, Repository
from eventsourcing.persistence import InfrastructureFactory, Mapper, Notification, PersistenceError
from eventsourcing.utils import strtobool

from ledger.base import DeciderAggregate, LedgerEvent, fast_project
from ledger.codec import FORMATS, MsgspecMapper
from ledger.errors import LedgerError
from ledger.recorders import CONNECT_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT, RECORDER_TOPICS
from ledger.snapshots import INTERVALS, LedgerRepository, take_snapshots

DEFAULT_URL = "sqlite:///chat-ledger.db"
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # matched in full: no trailing newline slips through
APP_NAME = "chatledger"
#: size of the cache of catalog-type aggregates when ``AGGREGATE_CACHE_MAXSIZE`` is not set
DEFAULT_CACHE_MAXSIZE = 1024
#: Seconds a SQLite connection (the event store's and the views') waits for another process's write lock
#: before the command fails with ``database_unavailable``; the environment variable overrides it.
SQLITE_TIMEOUT_ENV, DEFAULT_SQLITE_TIMEOUT = "CHAT_LEDGER_SQLITE_TIMEOUT", 30
#: The event table whose presence says a ledger exists: the library's names on SQLite and PostgreSQL.
SQLITE_EVENTS_TABLE, PG_EVENTS_TABLE = "stored_events", f"{APP_NAME}_events"
_URL_FORMS = "use sqlite:///FILE or postgresql://[USER[:PASSWORD]@][HOST][:PORT][/DB][?PARAM=VALUE&...]"


def _bad_url(message: str) -> LedgerError:
    return LedgerError("invalid_database_url", message)


def _query_items(query: str) -> list[tuple[str, str, str]]:
    """``(key, value, raw item)`` of each ``key=value`` item of a URL query, percent-decoded as libpq does
    (``+`` stays a plus)."""
    out = []
    for item in query.split("&"):
        if item:
            key, _, value = item.partition("=")
            out.append((unquote(key), unquote(value), item))
    return out


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed ``--db`` URL.

    PostgreSQL: ``params`` holds the libpq connection parameters the URL gives (as libpq parses it); the
    properties ``host``, ``port``, ``user`` and ``dbname`` say what libpq will use (the URL's value, else
    the ``PG*`` environment variable, else libpq's default) and serve messages only.
    """

    url: str
    backend: str  # "sqlite" | "postgres"
    path: str = ""  # sqlite file path (or ":memory:")
    params: Mapping[str, str] = field(default_factory=dict)
    schema: str = "public"

    @classmethod
    def parse(cls, url: str) -> DatabaseURL:
        scheme = url.partition(":")[0]
        if scheme == "sqlite":
            return cls._parse_sqlite(url)
        if scheme in ("postgresql", "postgres") and url.startswith(f"{scheme}://"):
            return cls._parse_postgres(url)
        raise _bad_url(f"unsupported database URL {redact(url)!r}: {_URL_FORMS}")

    @classmethod
    def _parse_sqlite(cls, url: str) -> DatabaseURL:
        # sqlite:///relative.db, sqlite:////abs/path.db, sqlite:///:memory:
        if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            raise _bad_url(f"no SQLite file path in database URL {url!r}: {_URL_FORMS}")
        path = unquote(url[len("sqlite:///"):])
        if "\x00" in path:
            raise _bad_url(f"SQLite file path in database URL {url!r} contains a NUL character")
        return cls(url=url, backend="sqlite", path=path)

    @classmethod
    def _parse_postgres(cls, url: str) -> DatabaseURL:
        from psycopg import ProgrammingError, pq
        from psycopg.conninfo import conninfo_to_dict

        base, _, query = url.partition("?")
        items = _query_items(query)
        known = {o.keyword.decode() for o in pq.Conninfo.get_defaults()}
        unknown = sorted({key for key, _, _ in items if key != "schema" and key not in known})
        if unknown:
            raise _bad_url(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                           f"in database URL {redact(url)!r}: give libpq connection parameters (sslmode, host, "
                           "port, connect_timeout, application_name, ...) and schema")
        schemas = [value for key, value, _ in items if key == "schema"]
        if len(schemas) > 1:
            raise _bad_url(f"schema given {len(schemas)} times in database URL {redact(url)!r}")
        schema = (schemas[0] if schemas else "") or "public"
        if not _SCHEMA.fullmatch(schema):
            raise _bad_url(f"invalid schema name {schema!r}: use lower-case letters, digits and _ "
                           "(at most 63, not starting with a digit)")
        rest = "&".join(raw for key, _, raw in items if key != "schema")
        try:
            params = conninfo_to_dict(base + ("?" + rest if rest else ""))
        except ProgrammingError as e:
            raise _bad_url(f"invalid PostgreSQL URL {redact(url)!r}: {_one_line(e)}") from None
        for port in str(params.get("port", "")).split(","):
            if port and not (port.isdigit() and 0 < int(port) < 65536):
                raise _bad_url(f"invalid port {port!r} in PostgreSQL URL {redact(url)!r}")
        return cls(url=url, backend="postgres", params={k: str(v) for k, v in params.items()}, schema=schema)

    def setting(self, keyword: str) -> str | None:
        """A libpq parameter as libpq will use it: the URL's, else its ``PG*`` variable, else the default."""
        if keyword in self.params:
            return self.params[keyword]
        from psycopg import pq

        for option in pq.Conninfo.get_defaults():
            if option.keyword.decode() == keyword:
                return option.val.decode() if option.val is not None else None
        return None

    @property
    def host(self) -> str:
        return self.setting("host") or self.setting("hostaddr") or "the default socket"

    @property
    def port(self) -> str:
        return self.setting("port") or "5432"

    @property
    def user(self) -> str:
        return self.setting("user") or ""

    @property
    def dbname(self) -> str:
        return self.setting("dbname") or self.user

    @property
    def where(self) -> str:
        """The database, for messages (never the password)."""
        if self.backend == "sqlite":
            return f"SQLite database {self.path}"
        return f"PostgreSQL at {self.host}:{self.port}/{self.dbname} (schema {self.schema})"

    def with_schema(self, schema: str) -> str:
        """This URL naming another schema (every other parameter kept)."""
        base, _, query = self.url.partition("?")
        items = [raw for key, _, raw in _query_items(query) if key != "schema"]
        return f"{base}?{'&'.join([*items, 'schema=' + quote(schema, safe='')])}"

    def env(self) -> dict[str, str]:
        if self.backend == "sqlite":
            return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": self.path,
                    "SQLITE_LOCK_TIMEOUT": str(sqlite_timeout())}
        return {
            # the library's factory, connecting with this URL's whole libpq connection string
            "PERSISTENCE_MODULE": "ledger.libpq:LibpqPostgresFactory",
            "POSTGRES_CONNINFO": self.psycopg_conninfo(),
            # required by the library; they only name the database (the connection uses the conninfo)
            "POSTGRES_HOST": self.host, "POSTGRES_PORT": self.port, "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": "", "POSTGRES_DBNAME": self.dbname,
            "POSTGRES_SCHEMA": self.schema, "POSTGRES_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
            "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": str(IDLE_IN_TRANSACTION_TIMEOUT),
            "POSTGRES_POOL_SIZE": "2", "POSTGRES_MAX_OVERFLOW": "8",
        }

    def psycopg_conninfo(self) -> str:
        """The libpq connection string (without ``schema``); libpq fills in what it leaves out."""
        from psycopg.conninfo import make_conninfo

        params = dict(self.params)
        if "connect_timeout" not in params and not os.environ.get("PGCONNECT_TIMEOUT"):
            params["connect_timeout"] = str(CONNECT_TIMEOUT)  # libpq's, unless the URL or PGCONNECT_TIMEOUT sets one
        return make_conninfo("", **params)


def sqlite_timeout() -> int:
    """Seconds to wait for a SQLite write lock: ``$CHAT_LEDGER_SQLITE_TIMEOUT`` or 30."""
    raw = os.environ.get(SQLITE_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_SQLITE_TIMEOUT
    if not raw.isdigit() or int(raw) < 1:
        raise LedgerError("invalid_setting", f"{SQLITE_TIMEOUT_ENV} must be a whole number of seconds >= 1, "
                                             f"not {raw!r}")
    return int(raw)


def _one_line(e: BaseException) -> str:
    return re.sub(r"\s*\n\s*", " ", str(e).strip()) or type(e).__name__


def redact(url: str) -> str:
    """The URL without its password (in the user part or a ``password=`` parameter)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        url = url.replace(f":{password}@", ":***@", 1)
    return re.sub(r"([?&]password=)[^&]*", r"\1***", url)


def resolve_url(url: str | None) -> str:
    return url or os.environ.get("CHAT_LEDGER_DB") or DEFAULT_URL


def ensure_database(db: DatabaseURL) -> None:
    """Make the place the tables live in (for writers): the SQLite file's folder is checked, the
    PostgreSQL schema created."""
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
        raise LedgerError("database_unavailable",
                          f"cannot reach PostgreSQL at {db.host}:{db.port}/{db.dbname}: {_one_line(e)}") from e


def _not_found(what: str) -> LedgerError:
    return LedgerError("database_not_found", f"{what}; nothing was created (`chat-ledger init` creates a ledger)")


def require_ledger(db: DatabaseURL) -> None:
    """Refuse a ledger that does not exist with ``database_not_found``, creating nothing: the check of
    commands that only read. Looks for the event table (in the SQLite file; in the PostgreSQL schema)."""
    if db.backend == "sqlite":
        _require_sqlite_ledger(db.path)
        return
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
            table = sql.Identifier(db.schema, PG_EVENTS_TABLE).as_string(conn)
            has_schema, has_table = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s), to_regclass(%s) IS NOT NULL",
                (db.schema, table)).fetchone()
    except psycopg.Error as e:
        if _pg_database_missing(db):
            raise _not_found(f"PostgreSQL database {db.dbname!r} does not exist at {db.host}:{db.port}") from e
        raise LedgerError("database_unavailable",
                          f"cannot reach PostgreSQL at {db.host}:{db.port}/{db.dbname}: {_one_line(e)}") from e
    if not has_schema:
        raise _not_found(f"schema {db.schema!r} does not exist in PostgreSQL database {db.dbname!r} at "
                         f"{db.host}:{db.port}")
    if not has_table:
        raise _not_found(f"no ledger in schema {db.schema!r} of PostgreSQL database {db.dbname!r} at "
                         f"{db.host}:{db.port}: no {PG_EVENTS_TABLE} table")


def _pg_database_missing(db: DatabaseURL) -> bool:
    """Whether the server answers but has no database of the URL's name (asked in the ``postgres``
    maintenance database: a failed connection does not say why in a form the client can test)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    try:
        with psycopg.connect(make_conninfo(db.psycopg_conninfo(), dbname="postgres"), autocommit=True) as conn:
            row = conn.execute("SELECT NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = %s)",
                               (db.dbname,)).fetchone()
    except psycopg.Error:
        return False
    return bool(row and row[0])


def _require_sqlite_ledger(path: str) -> None:
    if path == ":memory:" or "mode=memory" in path:
        raise _not_found(f"an in-memory SQLite database ({path}) holds no ledger")
    file = unquote(urlsplit(path).path) if path.startswith("file:") else path
    target = Path(file).expanduser()
    if not target.exists():
        raise _not_found(f"SQLite file {file} does not exist")
    if not target.is_file():
        raise LedgerError("database_unavailable", f"cannot open SQLite database {file}: not a file")
    try:
        conn = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                 (SQLITE_EVENTS_TABLE,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise LedgerError("database_unavailable", f"cannot open SQLite database {file}: {e}") from e
    if found is None:
        raise _not_found(f"no ledger in SQLite file {file}: no {SQLITE_EVENTS_TABLE} table")


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
        super().__init__(env)
        self.cached_repository = self.construct_cached_repository()
        #: streams of cached types found empty by the last read through the cache (``peek_cached``)
        self._absent: set[UUID] = set()
        # SQLite: threads sharing this application queue for its one writer connection. The library
        # gives up on that queue after 5 s (ConnectionUnavailableError) while the connection it waits
        # for may itself be waiting up to SQLITE_LOCK_TIMEOUT for another process's write lock: wait as
        # long for the writer as for the file lock.
        pool = getattr(getattr(self.recorder, "datastore", None), "pool", None)
        lock_timeout = self.env.get("SQLITE_LOCK_TIMEOUT")
        if pool is not None and lock_timeout and hasattr(pool, "pool_timeout"):
            pool.pool_timeout = max(float(pool.pool_timeout), float(lock_timeout))

    def reopen(self) -> ChatLedgerApp:
        """A new application object on the same database, with connections of its own, creating nothing
        (what a forked worker process uses: its parent's connections are not its to use)."""
        return type(self)(env={**self.given_env, "CREATE_TABLE": "no"}, payload_format=self.payload_format)

    def construct_env(self, name: str, env: Any = None) -> Any:
        """The library's environment, with this project's recorder for the persistence module unless one is
        named (``ledger.recorders``: no blind insert retry, in-doubt commits, versions checked at commit)."""
        environment = super().construct_env(name, env)
        topic = RECORDER_TOPICS.get(environment.get("PERSISTENCE_MODULE") or "")
        if topic and not environment.get(InfrastructureFactory.APPLICATION_RECORDER_TOPIC):
            environment[InfrastructureFactory.APPLICATION_RECORDER_TOPIC] = topic
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

    def construct_snapshot_store(self) -> Any:
        """The library's snapshot store, or None when its table cannot be made (a ledger written before
        snapshots, opened read-only by a writer: its commands are then refused one by one, as before)."""
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

            with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (_DDL_LOCK,))
                try:
                    return ChatLedgerApp(env=env, payload_format=fmt)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))
        return ChatLedgerApp(env=env, payload_format=fmt)
    except sqlite3.Error as e:  # pragma: no cover - depends on the file system
        raise LedgerError("database_unavailable", f"cannot open SQLite database {db.path}: {e}") from e
    except Exception as e:
        if db.backend == "sqlite" and type(e).__module__.startswith("eventsourcing"):
            raise LedgerError("database_unavailable", f"cannot open SQLite database {db.path}: {e}") from e
        if db.backend == "postgres" and type(e).__module__.startswith(("psycopg", "eventsourcing")):
            raise LedgerError("database_unavailable",
                              f"cannot open PostgreSQL at {db.host}:{db.port}/{db.dbname}: {_one_line(e)}") from e
        raise
