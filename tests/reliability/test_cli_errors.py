"""Issue 13 point 11 — errors, never tracebacks.

Each failure is produced for real and the installed ``chat-ledger`` runs as a process: its stderr is
exactly one line ``error: <code>: <message>``, no traceback, exit status 1 (usage errors: click's exit 2);
with ``CHAT_LEDGER_DEBUG=1`` the traceback is printed too.

* a SQLite database locked past the timeout: another process holds ``BEGIN EXCLUSIVE`` while ``status``
  must write its views (``CHAT_LEDGER_SQLITE_TIMEOUT=1``);
* a terminated connection and a deadlock during a PostgreSQL rebuild: the test holds a lock on the view
  table so the rebuild blocks inside its transaction, then terminates the rebuild's backend — or requests
  the advisory lock the blocked rebuild holds, closing a cycle the server's deadlock detector breaks by
  aborting the rebuild (the test's session has a long ``deadlock_timeout``, so the rebuild's check runs
  first);
* a projection error in catch-up: a stored payload its class cannot decode, and view rows the database
  refuses (a trigger);
* an unknown topic in a stored event, read by ``status``, ``show`` and ``audit``;
* ``sqlite:///%00``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Iterator
from uuid import UUID

import psycopg
import pytest

from commands.failures import as_ledger_error
from commands.handler import command_from_dict, execute
from ledger.errors import LedgerError
from projections.chats import ChatViews
from ledger.store import DatabaseURL, open_app
from tests.chat.helpers import ORG, OWNER, setup_org
from tests.store.rawdb import RawDB

from .clikit import clean_env, error_line, run, start
from .kit import wait_for

DEBUG = clean_env(CHAT_LEDGER_DEBUG="1")


def make_ledger(url: str, chats: int = 1) -> list[str]:
    """An organization and ``chats`` chats (two events each), the views not caught up; the chat ids."""
    app = open_app(url)
    try:
        setup_org(app)
        ids = []
        for i in range(chats):
            chat_id = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG,
                                                      "owner_id": OWNER, "text": f"chat {i}"}))["chat_id"]
            execute(app, command_from_dict({"type": "send_message", "chat_id": chat_id, "text": "more"}))
            ids.append(chat_id)
        return ids
    finally:
        app.close()


def assert_traceback_with_debug(db: str, *args: str, code: str, env: dict[str, str] = DEBUG) -> None:
    proc = run(db, *args, env=env)
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"error: {code}: "), proc.stderr


# -- a URL the file system cannot take --------------------------------------------------------------------

def test_a_nul_in_the_sqlite_path(tmp_path: Path) -> None:
    message = error_line(run("sqlite:///%00", "status", cwd=tmp_path), "invalid_database_url")
    assert "NUL" in message
    assert_traceback_with_debug("sqlite:///%00", "status", code="invalid_database_url")


def test_usage_errors_stay_click_s_exit_2(tmp_path: Path) -> None:
    proc = run(f"sqlite:///{tmp_path / 'x.db'}", "status", "--no-such-option")
    assert proc.returncode == 2 and "No such option" in proc.stderr and "Traceback" not in proc.stderr


# -- SQLite locked past the timeout ---------------------------------------------------------------------------

def test_a_locked_sqlite_database_in_status(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    make_ledger(url)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process's write transaction, held past the timeout
        env = clean_env(CHAT_LEDGER_SQLITE_TIMEOUT="1")
        message = error_line(run(url, "status", env=env), "database_unavailable")
        assert "locked" in message and str(path) in message and "CHAT_LEDGER_SQLITE_TIMEOUT" in message
        assert_traceback_with_debug(url, "status", code="database_unavailable",
                                    env={**env, "CHAT_LEDGER_DEBUG": "1"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    proc = run(url, "status")
    assert proc.returncode == 0 and "chat 0" in proc.stdout, proc.stderr


# -- PostgreSQL: a rebuild blocked inside its transaction, then terminated or deadlocked ----------------------

def _pg(url: str) -> psycopg.Connection:
    return psycopg.connect(DatabaseURL.parse(url).psycopg_conninfo(), autocommit=True)


def _blocked_by(conn: psycopg.Connection) -> list[int]:
    with _pg_admin() as admin:
        return [r[0] for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                            (conn.info.backend_pid,))]


_ADMIN_URL: list[str] = []


def _pg_admin() -> psycopg.Connection:
    return _pg(_ADMIN_URL[0])


@pytest.fixture
def blocked_rebuild(pg_url: str) -> Iterator[tuple[psycopg.Connection, int, Any]]:
    """A ``projections rebuild chat_views`` process blocked, inside its transaction, on the SHARE lock this
    test's session holds on the chat_status view table; yields (session, the rebuild's backend pid, process)."""
    _ADMIN_URL[:] = [pg_url]
    make_ledger(pg_url, chats=3)
    assert run(pg_url, "projections", "catch-up").returncode == 0
    schema = DatabaseURL.parse(pg_url).schema
    session = _pg(pg_url)
    session.execute("SET deadlock_timeout = '60s'")  # the rebuild's backend runs the deadlock check first
    session.execute("BEGIN")
    session.execute(f'LOCK TABLE "{schema}".chat_views_v{ChatViews.version}_chat_status IN SHARE MODE')
    proc = start(pg_url, "projections", "rebuild", "chat_views", "--log-order")  # in place: into the live table
    try:
        wait_for(lambda: bool(_blocked_by(session)), 60, "the rebuild to block on the test's lock")
        (pid,) = _blocked_by(session)
        yield session, pid, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
        session.close()


def test_a_connection_terminated_during_a_rebuild(blocked_rebuild: Any, pg_url: str) -> None:
    session, pid, proc = blocked_rebuild
    with _pg(pg_url) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    out, err = proc.communicate(timeout=60)
    message = error_line((proc.returncode, out, err), "database_unavailable")
    assert "terminat" in message and DatabaseURL.parse(pg_url).schema in message


def test_a_deadlock_during_a_rebuild(blocked_rebuild: Any) -> None:
    session, pid, proc = blocked_rebuild
    with _pg_admin() as admin:  # the advisory locks the blocked rebuild holds
        held = admin.execute("SELECT classid::bigint, objid::bigint, objsubid FROM pg_locks WHERE pid = %s "
                             "AND locktype = 'advisory' AND granted", (pid,)).fetchall()
    assert held, "the rebuild holds no advisory lock to close a cycle with"
    for classid, objid, objsubid in held:
        key = (classid << 32) | objid
        try:  # waits on the rebuild, which waits on us: the server aborts the rebuild
            session.execute("SELECT pg_advisory_xact_lock(%s)", (key - 2**64 if key >= 2**63 else key,))
        except psycopg.errors.DeadlockDetected:  # pragma: no cover - the other side of the cycle was chosen
            pytest.fail("the server aborted the test's session, not the rebuild")
    out, err = proc.communicate(timeout=60)
    message = error_line((proc.returncode, out, err), "conflict")
    assert "deadlock detected" in message and "rolled back" in message


# -- projections that fail ---------------------------------------------------------------------------------

def test_an_undecodable_payload_in_catch_up_and_rebuild(db_url: str) -> None:
    (chat_id,) = make_ledger(db_url)
    RawDB(db_url).set_state(UUID(chat_id), 2, b'{"not": "a prompt"}')
    for args in (("projections", "catch-up"), ("projections", "rebuild"), ("status",)):
        message = error_line(run(db_url, *args), "projection_error")
        assert "chat_views" in message and chat_id in message and "version 2" in message, message
    assert_traceback_with_debug(db_url, "projections", "rebuild", code="projection_error")


def _refuse_view_rows(url: str) -> None:
    db = DatabaseURL.parse(url)
    if db.backend == "sqlite":
        with sqlite3.connect(db.path) as conn:
            for op in ("INSERT", "UPDATE"):
                conn.execute(f"CREATE TRIGGER refuse_{op} BEFORE {op} ON chat_views_v{ChatViews.version}_chat_status "
                             "BEGIN SELECT RAISE(ABORT, 'view rows refused'); END")
        conn.close()
        return
    with _pg(url) as conn:
        table = f'"{db.schema}".chat_views_v{ChatViews.version}_chat_status'
        conn.execute(f'CREATE FUNCTION "{db.schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS '
                     "$$ BEGIN RAISE EXCEPTION 'view rows refused'; END $$")
        conn.execute(f'CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON {table} '
                     f'FOR EACH ROW EXECUTE FUNCTION "{db.schema}".refuse()')


def test_view_rows_the_database_refuses_in_catch_up(db_url: str) -> None:
    (chat_id,) = make_ledger(db_url)
    assert run(db_url, "projections", "catch-up").returncode == 0
    _refuse_view_rows(db_url)
    app = open_app(db_url)
    try:
        execute(app, command_from_dict({"type": "send_message", "chat_id": chat_id, "text": "again"}))
    finally:
        app.close()
    # the view stops at the event whose rows the database refuses, and names it with the server's reason
    message = error_line(run(db_url, "projections", "catch-up"), "projection_error")
    assert "view rows refused" in message and chat_id in message and "version 3" in message
    assert_traceback_with_debug(db_url, "projections", "catch-up", code="projection_error")


# -- an unknown topic -----------------------------------------------------------------------------------

def test_an_unknown_topic(db_url: str) -> None:
    (chat_id,) = make_ledger(db_url)
    app = open_app(db_url)
    try:
        execute(app, command_from_dict({"type": "send_message", "chat_id": chat_id, "text": "third"}))
    finally:
        app.close()
    RawDB(db_url).set_topic(UUID(chat_id), 2, "chat-ledger:chat.NoSuchEvent")  # between two known events
    message = error_line(run(db_url, "status"), "projection_error")
    assert chat_id in message
    for args in (("show", chat_id), ("audit", chat_id)):
        message = error_line(run(db_url, *args), "undecodable_event")
        assert "unknown event topic 'chat-ledger:chat.NoSuchEvent'" in message and chat_id in message
    assert_traceback_with_debug(db_url, "show", chat_id, code="undecodable_event")


# -- the map itself ---------------------------------------------------------------------------------------

def test_anything_else_is_an_internal_error_naming_the_debug_setting() -> None:
    error = as_ledger_error(KeyError("chat_id"))
    assert error.code == "internal_error"
    assert "KeyError" in error.message and "CHAT_LEDGER_DEBUG=1" in error.message and "\n" not in error.message
    refused = as_ledger_error(LedgerError("queue_full", "chat message queue is full (max 20)"))
    assert (refused.code, refused.message) == ("queue_full", "chat message queue is full (max 20)")
    assert "\n" not in as_ledger_error(LedgerError("database_unavailable", "a\nb\n")).message
