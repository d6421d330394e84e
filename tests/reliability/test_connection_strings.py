"""Issue 13 point 10 — PostgreSQL connection strings as libpq reads them, against the real server.

Every libpq parameter of the URL reaches every connection the ledger makes (the event store's pool and the
views' backend): ``sslmode`` behaves as it does for psql, a socket directory in ``host`` (as a parameter or
percent-encoded) connects over the Unix socket, ``application_name`` is seen by the server on each
connection. What the URL leaves out comes from the ``PG*`` environment variables (a process started with
them) and libpq's defaults (no host: the default socket). A parameter libpq does not know, and a schema name
with a trailing newline, are refused with ``invalid_database_url`` and create nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from typing import Any, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from ledger.store import DatabaseURL, open_app
from projections import catch_up, open_backend
from projections.chats import ChatViews
from tests.conftest import PG_URL, drop_schema, require_pg

from .clikit import clean_env, error_line, run, start
from .kit import wait_for

SERVER = DatabaseURL.parse(PG_URL)


def admin() -> psycopg.Connection:
    return psycopg.connect(SERVER.psycopg_conninfo(), autocommit=True)


def scalar(query: str, *params: Any) -> Any:
    with admin() as conn:
        return conn.execute(query, params).fetchone()[0]


def schema_exists(name: str) -> bool:
    return bool(scalar("SELECT count(*) FROM pg_namespace WHERE nspname = %s", name))


def sessions(app_name: str) -> list[tuple[int | None, str]]:
    """(client_port, last query) of the server's sessions with this application_name (-1: a Unix socket)."""
    with admin() as conn:
        return conn.execute("SELECT client_port, query FROM pg_stat_activity WHERE application_name = %s",
                            (app_name,)).fetchall()


@pytest.fixture
def schema() -> Iterator[str]:
    require_pg()
    name = f"t_conn_{uuid.uuid4().hex[:10]}"
    yield name
    drop_schema(SERVER.with_schema(name))


def url_with(schema: str, **params: str) -> str:
    """The test server's URL naming ``schema``, with extra query parameters (values already encoded)."""
    base = SERVER.with_schema(schema)
    return base + "".join(f"&{k}={v}" for k, v in params.items())


def socket_dir() -> str:
    return scalar("SHOW unix_socket_directories").split(",")[0].strip()


# -- sslmode: as psql ---------------------------------------------------------------------------------------

def test_sslmode_require_behaves_as_psql(schema: str) -> None:
    url = url_with(schema, sslmode="require")
    server_ssl = scalar("SHOW ssl") == "on"
    if shutil.which("psql"):  # what psql does with the same parameters
        conninfo = make_conninfo(SERVER.psycopg_conninfo(), sslmode="require")
        psql = subprocess.run(["psql", conninfo, "-Atc", "SELECT 1"], capture_output=True, text=True,
                              env=clean_env(), timeout=60)
        assert (psql.returncode == 0) == server_ssl, psql.stderr
    proc = run(url, "init")
    if not server_ssl:
        message = error_line(proc, "database_unavailable")
        assert "SSL" in message, message
        assert not schema_exists(schema)  # nothing created over a connection the URL forbids
        return
    assert proc.returncode == 0, proc.stderr  # pragma: no cover - a server with TLS
    app = open_app(url)  # pragma: no cover
    try:
        app.head()
        with admin() as conn:
            assert conn.execute("SELECT bool_and(ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
                                "WHERE a.query LIKE %s", (f"%{schema}%",)).fetchone()[0]
    finally:
        app.close()


def test_pgsslmode_in_the_environment_is_honoured(schema: str) -> None:
    url = SERVER.with_schema(schema)
    proc = run(url, "init", env=clean_env(PGSSLMODE="require"))
    if scalar("SHOW ssl") == "on":  # pragma: no cover - a server with TLS
        assert proc.returncode == 0, proc.stderr
        return
    assert "SSL" in error_line(proc, "database_unavailable")
    assert not schema_exists(schema)
    assert run(url, "init", env=clean_env(PGSSLMODE="disable")).returncode == 0 and schema_exists(schema)


# -- every parameter reaches every connection ---------------------------------------------------------------

def test_url_parameters_reach_the_store_and_the_views(schema: str) -> None:
    marker = f"ledger-{uuid.uuid4().hex[:8]}"
    url = url_with(schema, application_name=marker, sslmode="disable")
    app = open_app(url)
    try:
        app.head()
        assert any("chatledger_events" in q for _, q in sessions(marker))  # the store's pool
        assert not any("projection" in q for _, q in sessions(marker))
        backend = open_backend(url)
        try:
            catch_up(app, ChatViews(app), backend)
            with backend.reading("chat_views") as reader:  # holds one of the views' connections
                reader.query("chat_status")
                assert any(f"chat_views_v{ChatViews.version}_chat_status" in q for _, q in sessions(marker))  # the views' pool
        finally:
            backend.close()
    finally:
        app.close()


@pytest.mark.parametrize("form", ["parameter", "percent-encoded"])
def test_a_socket_directory_as_host(schema: str, form: str) -> None:
    folder, marker = socket_dir(), f"ledger-{uuid.uuid4().hex[:8]}"
    encoded = folder.replace("/", "%2F")
    user, dbname = SERVER.user, SERVER.dbname
    if form == "parameter":
        url = f"postgresql:///{dbname}?host={folder}&user={user}&schema={schema}&application_name={marker}"
    else:
        url = f"postgresql://{user}@{encoded}/{dbname}?schema={schema}&application_name={marker}"
    assert run(url, "init").returncode == 0
    proc = start(url, "projections", "follow", "--for", "30", "--poll", "0.2")
    try:
        wait_for(lambda: len(sessions(marker)) >= 2, 30, "the follower's connections")
        assert all(port == -1 for port, _ in sessions(marker))  # -1: a Unix-domain socket
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert schema_exists(schema)


# -- what the URL leaves out: PG* variables, then libpq's defaults -------------------------------------------

def test_pg_environment_variables_fill_in_the_url(schema: str) -> None:
    marker = f"ledger-{uuid.uuid4().hex[:8]}"
    env = clean_env(PGHOST=SERVER.host, PGPORT=SERVER.port, PGUSER=SERVER.user, PGDATABASE=SERVER.dbname,
                    PGAPPNAME=marker)
    url = f"postgresql://?schema={schema}"
    proc = run(url, "init", env=env)
    assert proc.returncode == 0, proc.stderr
    assert schema_exists(schema)
    follower = start(url, "projections", "follow", "--for", "30", "--poll", "0.2", env=env)
    seen: set[str] = set()

    def both_seen() -> bool:
        # a session's ``query`` is its last statement, often a COMMIT: collect what the samples show
        seen.update(q for _, q in sessions(marker))
        return any("projection" in q for q in seen) and any("chatledger_events" in q for q in seen)

    try:  # the store's and the views' connections both took PGAPPNAME
        wait_for(both_seen, 30, "connections of the store and of the views carrying PGAPPNAME")
    finally:
        follower.terminate()
        follower.communicate(timeout=30)
    # the URL's own values win over the variables; the variables name what failed
    assert run(SERVER.with_schema(schema), "events", "stats", env={**env, "PGPORT": "1"}).returncode == 0
    message = error_line(run(url, "events", "stats", env={**env, "PGPORT": "1"}), "database_unavailable")
    assert f"{SERVER.host}:1" in message


def test_pghost_as_a_socket_directory(schema: str) -> None:
    env = clean_env(PGHOST=socket_dir())
    url = f"postgresql:///{SERVER.dbname}?user={SERVER.user}&schema={schema}"
    proc = run(url, "init", env=env)
    assert proc.returncode == 0, proc.stderr
    assert schema_exists(schema)


def test_no_host_at_all_is_libpqs_default_socket(schema: str) -> None:
    """Neither the URL nor PGHOST names a host: the ledger connects exactly when libpq does."""
    conninfo = make_conninfo("", user=SERVER.user, dbname=SERVER.dbname, connect_timeout=5)
    libpq = subprocess.run([sys.executable, "-c", f"import psycopg; psycopg.connect({conninfo!r}).close()"],
                           capture_output=True, text=True, env=clean_env(), timeout=60)
    proc = run(f"postgresql:///{SERVER.dbname}?user={SERVER.user}&schema={schema}", "init")
    if libpq.returncode != 0:  # pragma: no cover - a server without libpq's default socket
        error_line(proc, "database_unavailable")
        return
    assert proc.returncode == 0, proc.stderr
    assert schema_exists(schema)


# -- refused: unknown parameters, names that do not match in full --------------------------------------------

@pytest.mark.parametrize("extra, named", [
    ({"sslmod": "require"}, ["'sslmod'"]),
    ({"connect_timout": "3", "applicationname": "x"}, ["'applicationname'", "'connect_timout'"]),
])
def test_unknown_parameters_are_refused_and_create_nothing(schema: str, extra: dict[str, str],
                                                           named: list[str]) -> None:
    for args in (("init",), ("status",)):
        message = error_line(run(url_with(schema, **extra), *args), "invalid_database_url")
        assert all(n in message for n in named), message
    assert not schema_exists(schema)


def test_a_schema_name_with_a_trailing_newline_is_refused(schema: str) -> None:
    url = f"{SERVER.url.partition('?')[0]}?schema={schema}%0A"
    message = error_line(run(url, "init"), "invalid_database_url")
    assert repr(f"{schema}\n") in message
    assert not schema_exists(schema) and not schema_exists(f"{schema}\n")
