"""Where a ledger lives: database URLs (SQLite files, PostgreSQL through libpq), making the place its tables
go, and refusing a ledger that does not exist. Split from ``ledger.store`` (which re-exports every name here):
the URL is translated into the library's environment there, from ``DatabaseURL.env``.

PostgreSQL URLs are read by libpq itself (``psycopg.conninfo``): every libpq connection parameter in the
URL's query (``sslmode``, ``host=/socket/dir``, ``application_name``, ...) is passed through, what the URL
leaves out comes from the ``PG*`` environment variables and libpq's defaults (no host: the default local
socket), and a parameter libpq does not know is refused. ``schema`` is the ledger's own parameter.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping
from urllib.parse import quote, unquote, urlsplit

from ledger.errors import LedgerError
from ledger.recorders import CONNECT_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT, TCP_DEFAULTS

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
            return {"PERSISTENCE_MODULE": "ledger.recorders.sqlite:SQLiteLedgerFactory", "SQLITE_DBNAME": self.path,
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
        for key, value in TCP_DEFAULTS.items():
            params.setdefault(key, value)
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
            conn.execute("SET synchronous_commit = local")  # no command: never waits for a standby (open_app)
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


def local_commits(conninfo: str) -> str:
    """``conninfo`` whose sessions commit without waiting for a synchronous standby (``synchronous_commit =
    local`` added to the URL's own ``options``): for making tables, never for recording events."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    options = conninfo_to_dict(conninfo).get("options") or ""
    return make_conninfo(conninfo, options=f"{options} -c synchronous_commit=local".strip())
