"""The store under commands, on SQLite and PostgreSQL: concurrent writers, the retry path, idempotency
keys, and database URLs / availability errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable
from uuid import UUID, uuid4

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError
from psycopg import sql

import commands.uow as uow
from commands.handler import execute_json
from ledger.chat import events as ev
from ledger.chat.values import message_text
from ledger.errors import LedgerError
from ledger.store import DEFAULT_URL, ChatLedgerApp, DatabaseURL, open_app, redact, resolve_url

from .rawdb import RawDB

REPO = Path(__file__).resolve().parents[2]


def cmd(app: ChatLedgerApp, **fields: Any) -> dict[str, Any]:
    return execute_json(app, json.dumps({k: str(v) if isinstance(v, UUID) else v for k, v in fields.items()}))


def new_org(app: ChatLedgerApp, *members: UUID) -> dict[str, UUID]:
    """A fresh organization with a default model and members (the first is returned as the owner)."""
    org = uuid4()
    members = members or (uuid4(),)
    for user in members:
        cmd(app, type="add_organization_member", organization_id=org, user_id=user)
    cmd(app, type="create_model_config", organization_id=org, provider="anthropic", model="claude-sonnet-4-5",
        context_limit=200_000, is_default=True)
    return {"organization_id": org, "owner_id": members[0]}


def create(app: ChatLedgerApp, org: dict[str, UUID] | None = None, **fields: Any) -> UUID:
    """Create a chat (in a fresh organization unless ``org`` is given) and return its id."""
    chat_id = fields.pop("chat_id", None) or uuid4()
    for key, value in (org or new_org(app)).items():
        fields.setdefault(key, value)
    fields.setdefault("text", "first prompt")
    cmd(app, type="create_chat", chat_id=chat_id, **fields)
    return chat_id


def reply(text: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "parts": [{"type": "text", "text": text}]}]


def stream_versions(app: ChatLedgerApp, chat_id: UUID) -> list[int]:
    return [e.originator_version for e in app.stream(chat_id)]


# Opening applications concurrently on PostgreSQL fails (see test_concurrent_open_app_on_postgres); the
# threads below open their own application one at a time, then write concurrently.
_open_lock = threading.Lock()


def open_serially(url: str) -> ChatLedgerApp:
    with _open_lock:
        return open_app(url)


def run_threads(n: int, target: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrapped(i: int) -> None:
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer thread hung"
    return errors


# -- 4. concurrent writers -----------------------------------------------------------------------------------

THREADS, PER_THREAD = 4, 10


def test_concurrent_writers_on_one_chat_each_command_applied_exactly_once(app: ChatLedgerApp, db_url: str) -> None:
    """4 threads x 10 commands (5 send_message, queued; 5 commit_step) on one running chat, each thread with
    its own application: every command lands once, versions stay contiguous, no thread sees an error."""
    chat_id = create(app)  # R0: every send is queued (4 x 5 = 20 = the queue's maximum)
    barrier = threading.Barrier(THREADS)
    results: dict[int, list[dict[str, Any]]] = {}

    def writer(t: int) -> None:
        mine = open_serially(db_url)
        try:
            barrier.wait(timeout=60)
            out = results.setdefault(t, [])
            for i in range(PER_THREAD):
                if i % 2 == 0:
                    out.append(cmd(mine, type="send_message", chat_id=chat_id, text=f"prompt t{t} #{i}"))
                else:
                    out.append(cmd(mine, type="commit_step", chat_id=chat_id, messages=reply(f"step t{t} #{i}")))
        finally:
            mine.close()

    errors = run_threads(THREADS, writer)
    assert errors == []

    total = THREADS * PER_THREAD
    events = app.stream(chat_id)
    assert [e.originator_version for e in events] == list(range(1, total + 2))  # no gaps, no duplicates
    versions = [r["version"] for rs in results.values() for r in rs]
    assert sorted(versions) == list(range(2, total + 2))  # each command got its own version
    for rs in results.values():  # each thread saw its own commands in order
        assert [r["version"] for r in rs] == sorted(r["version"] for r in rs)

    sent = sorted(f"prompt t{t} #{i}" for t in range(THREADS) for i in range(0, PER_THREAD, 2))
    queued = [message_text(e.prompt.parts) for e in events if isinstance(e, ev.PromptQueued)]
    assert sorted(queued) == sent
    steps = [message_text(m.parts) for e in events if isinstance(e, ev.StepCommitted) for m in e.messages]
    assert sorted(steps) == sorted(f"step t{t} #{i}" for t in range(THREADS) for i in range(1, PER_THREAD, 2))

    state = app.load(chat_id).state
    assert state.version == total + 1 and state.execution_state == "R1"
    assert len(state.queue) == len(sent) and sorted(message_text(q.parts) for q in state.queue) == sent
    assert sorted(q.queued_message_id for q in state.queue) == list(range(1, len(sent) + 1))
    assert len(state.messages) == 1 + len(steps)
    assert [m.message_id for m in state.messages] == list(range(1, len(steps) + 2))
    # a fresh application (no shared cache) agrees
    fresh = open_app(db_url)
    try:
        assert fresh.load(chat_id).state == state
    finally:
        fresh.close()


def test_concurrent_repeats_of_one_idempotent_command_record_it_once(app: ChatLedgerApp, db_url: str) -> None:
    chat_id = create(app)
    barrier = threading.Barrier(THREADS)
    results: list[dict[str, Any]] = []

    def writer(_: int) -> None:
        mine = open_serially(db_url)
        try:
            barrier.wait(timeout=60)
            results.append(cmd(mine, type="send_message", chat_id=chat_id, text="only once",
                               idempotency_key="same-key"))
        finally:
            mine.close()

    assert run_threads(THREADS, writer) == []
    assert stream_versions(app, chat_id) == [1, 2]
    assert len(results) == THREADS and all(r == results[0] for r in results)
    assert results[0]["queued_message_id"] == 1 and results[0]["version"] == 2


def test_concurrent_open_app_on_postgres(pg_url: str) -> None:
    open_app(pg_url).close()  # the ledger exists already
    n = 8
    for _ in range(2):
        barrier = threading.Barrier(n)

        def opener(_: int) -> None:
            barrier.wait(timeout=60)
            open_app(pg_url).close()

        errors = run_threads(n, opener)
        assert errors == [], [repr(e) for e in errors]


# -- 4. the retry path, deterministically ------------------------------------------------------------------

def test_a_conflicting_save_is_retried_on_fresh_state(app: ChatLedgerApp, db_url: str, monkeypatch) -> None:
    """Another writer appends to the chat between our load and our save: the database refuses our save
    (a real IntegrityError), the unit of work re-loads, re-decides and the second save succeeds."""
    chat_id = create(app)
    other = open_app(db_url)
    real_save = app.save
    outcomes: list[str] = []

    def save(*objs: Any, **kw: Any) -> Any:
        if not outcomes:
            cmd(other, type="send_message", chat_id=chat_id, text="interloper")  # takes version 2
        try:
            recordings = real_save(*objs, **kw)
        except IntegrityError:
            outcomes.append("conflict")
            raise
        outcomes.append("saved")
        return recordings

    monkeypatch.setattr(app, "save", save)
    try:
        result = cmd(app, type="send_message", chat_id=chat_id, text="mine")
    finally:
        other.close()
    assert outcomes == ["conflict", "saved"]
    # decided again on the fresh state: after the interloper's prompt, as the chat's 3rd event
    assert result["version"] == 3 and result["queued_message_id"] == 2 and result["queue_length"] == 2
    events = app.stream(chat_id)
    assert [e.originator_version for e in events] == [1, 2, 3]
    assert [message_text(e.prompt.parts) for e in events[1:]] == ["interloper", "mine"]


def test_every_attempt_conflicting_gives_conflict_and_records_nothing(app: ChatLedgerApp, monkeypatch) -> None:
    chat_id = create(app)
    head, calls = app.head(), []

    def save(*objs: Any, **kw: Any) -> Any:
        calls.append(objs)
        raise IntegrityError("duplicate key value violates unique constraint")

    monkeypatch.setattr(app, "save", save)
    monkeypatch.setattr(uow.random, "uniform", lambda a, b: 0.0)  # no back-off sleeps
    with pytest.raises(LedgerError) as e:
        cmd(app, type="send_message", chat_id=chat_id, text="never lands")
    assert e.value.code == "conflict"
    assert str(uow.MAX_ATTEMPTS) in e.value.message
    # the first save was decided on the chat this process remembered (not counted), then MAX_ATTEMPTS
    # decided on the chat read from the store
    assert len(calls) == uow.MAX_ATTEMPTS + 1
    monkeypatch.undo()
    assert app.head() == head and stream_versions(app, chat_id) == [1]


def test_a_writer_always_beaten_to_the_stream_gives_conflict(app: ChatLedgerApp, db_url: str, monkeypatch) -> None:
    """Real conflicts every time: nothing of the refused command is recorded, everything else is."""
    chat_id = create(app)
    other = open_app(db_url)
    real_save = app.save
    beaten = []

    def save(*objs: Any, **kw: Any) -> Any:
        cmd(other, type="commit_step", chat_id=chat_id, messages=reply(f"other {len(beaten)}"))
        beaten.append(1)
        return real_save(*objs, **kw)

    monkeypatch.setattr(app, "save", save)
    monkeypatch.setattr(uow.random, "uniform", lambda a, b: 0.0)
    try:
        with pytest.raises(LedgerError) as e:
            cmd(app, type="send_message", chat_id=chat_id, text="never lands")
    finally:
        other.close()
    assert e.value.code == "conflict"
    assert len(beaten) == uow.MAX_ATTEMPTS + 1  # the first on the remembered chat, then MAX_ATTEMPTS
    events = app.stream(chat_id)
    assert [e.originator_version for e in events] == list(range(1, uow.MAX_ATTEMPTS + 3))
    assert not any(isinstance(e, ev.PromptQueued) for e in events)


def test_a_refused_command_records_nothing(app: ChatLedgerApp) -> None:
    chat_id = create(app, initial_status="waiting")
    head = app.head()
    with pytest.raises(LedgerError) as e:
        cmd(app, type="interrupt", chat_id=chat_id, idempotency_key="k1")
    assert e.value.code == "transition_not_allowed"
    assert app.head() == head
    # the refused command did not use up its key
    r = cmd(app, type="send_message", chat_id=chat_id, text="go", idempotency_key="k1")
    assert r["version"] == 2 and app.head() == head + 1


# -- 5. idempotency keys -----------------------------------------------------------------------------------

def test_send_message_repeat_returns_first_result_and_records_nothing(app: ChatLedgerApp) -> None:
    chat_id = create(app)  # running: sends are queued
    first = cmd(app, type="send_message", chat_id=chat_id, text="and Italy?", idempotency_key="msg-2")
    head = app.head()
    assert first["queued_message_id"] == 1 and first["version"] == 2

    again = cmd(app, type="send_message", chat_id=chat_id, text="and Italy?", idempotency_key="msg-2")
    assert again == first
    assert app.head() == head and stream_versions(app, chat_id) == [1, 2]

    # later commands do not change what the repeat returns
    cmd(app, type="commit_step", chat_id=chat_id, messages=reply("Paris."))
    head = app.head()
    assert cmd(app, type="send_message", chat_id=chat_id, text="and Italy?", idempotency_key="msg-2") == first
    assert app.head() == head

    # a different key records anew
    other = cmd(app, type="send_message", chat_id=chat_id, text="and Italy?", idempotency_key="msg-3")
    assert other["version"] == 4 and other["queued_message_id"] == 2 and app.head() == head + 1
    # the key is recorded on the event
    assert [e.idempotency_key for e in app.stream(chat_id)] == [None, "msg-2", None, "msg-3"]


def test_send_message_repeat_of_a_turn_start(app: ChatLedgerApp) -> None:
    chat_id = create(app, initial_status="waiting")
    actor = uuid4()
    first = cmd(app, type="send_message", chat_id=chat_id, text="start", idempotency_key="t", actor=str(actor))
    assert first["execution_state"] == "R0" and first["message_ids"] == [2]
    head = app.head()
    assert cmd(app, type="send_message", chat_id=chat_id, text="start", idempotency_key="t") == first
    assert app.head() == head
    assert app.stream(chat_id)[-1].actor == actor


def test_create_chat_without_chat_id_repeat_returns_the_same_chat(app: ChatLedgerApp) -> None:
    other_owner = uuid4()
    org = new_org(app, uuid4(), other_owner)
    base = dict(type="create_chat", **org, text="hello")
    first = cmd(app, **base, idempotency_key="create-1")
    head = app.head()
    again = cmd(app, **base, idempotency_key="create-1")
    assert again == first and app.head() == head

    other = cmd(app, **base, idempotency_key="create-2")
    assert other["chat_id"] != first["chat_id"] and app.head() == head + 1
    no_key = cmd(app, **base)
    assert no_key["chat_id"] not in (first["chat_id"], other["chat_id"]) and app.head() == head + 2
    # the same key for another owner is another chat
    elsewhere = cmd(app, **{**base, "owner_id": other_owner}, idempotency_key="create-1")
    assert elsewhere["chat_id"] != first["chat_id"] and app.head() == head + 3


def test_create_child_chat_repeat_records_nothing_on_parent_or_child(app: ChatLedgerApp) -> None:
    org = new_org(app)
    parent = create(app, org)
    base = dict(type="create_chat", **org, text="sub", parent_chat_id=parent)
    first = cmd(app, **base, idempotency_key="child")
    head = app.head()
    assert cmd(app, **base, idempotency_key="child") == first
    assert app.head() == head and stream_versions(app, parent) == [1, 2]


def test_set_archived_repeat_records_nothing_and_new_key_records(app: ChatLedgerApp) -> None:
    org = new_org(app)
    root = create(app, org, initial_status="waiting")
    child = create(app, org, parent_chat_id=root, initial_status="waiting")
    first = cmd(app, type="set_archived", chat_id=root, archived=True, idempotency_key="arch")
    assert first["execution_state"] == "XW"
    head = app.head()
    again = cmd(app, type="set_archived", chat_id=root, archived=True, idempotency_key="arch")
    assert app.head() == head
    assert {k: v for k, v in again.items() if k != "family_chat_ids"} == \
        {k: v for k, v in first.items() if k != "family_chat_ids"}
    # without the key the same command is refused (the flag already matches)
    with pytest.raises(LedgerError) as e:
        cmd(app, type="set_archived", chat_id=root, archived=True)
    assert e.value.code == "archived_flag_unchanged"
    unarchived = cmd(app, type="set_archived", chat_id=root, archived=False, idempotency_key="unarch")
    assert unarchived["execution_state"] == "W" and app.head() == head + 2  # root and child
    assert app.load(child).state.archived is False


@pytest.mark.parametrize("command", [
    {"type": "set_archived", "archived": True},
    {"type": "end_chat"},
], ids=["set_archived", "end_chat"])
def test_family_command_repeat_returns_the_first_result(app: ChatLedgerApp, command: dict[str, Any]) -> None:
    org = new_org(app)
    root = create(app, org, initial_status="waiting")
    create(app, org, parent_chat_id=root, initial_status="waiting")
    first = cmd(app, chat_id=root, idempotency_key="fam", **command)
    head = app.head()
    again = cmd(app, chat_id=root, idempotency_key="fam", **command)
    assert app.head() == head
    assert again == first


# -- 6. database URLs ------------------------------------------------------------------------------------

@pytest.fixture
def no_pg_environment(monkeypatch) -> None:
    """No PG* variable: libpq's own defaults fill in what a URL leaves out."""
    for key in list(os.environ):
        if key.startswith("PG"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize("url, expected", [
    ("sqlite:///chat-ledger.db", dict(backend="sqlite", path="chat-ledger.db")),
    ("sqlite:///data/dir/ledger.db", dict(backend="sqlite", path="data/dir/ledger.db")),
    ("sqlite:////var/lib/ledger.db", dict(backend="sqlite", path="/var/lib/ledger.db")),
    ("sqlite:///:memory:", dict(backend="sqlite", path=":memory:")),
    ("sqlite:///with%20space.db", dict(backend="sqlite", path="with space.db")),
    ("postgresql://alice@db.example.com/ledger",
     dict(backend="postgres", params={"user": "alice", "host": "db.example.com", "dbname": "ledger"},
          host="db.example.com", port="5432", user="alice", dbname="ledger", schema="public")),
    ("postgresql://alice:s3cr%40t@10.0.0.5:6543/ledger?schema=tenant_a",
     dict(backend="postgres", params={"user": "alice", "password": "s3cr@t", "host": "10.0.0.5", "port": "6543",
                                      "dbname": "ledger"}, schema="tenant_a")),
    ("postgres://db/ledger", dict(backend="postgres", params={"host": "db", "dbname": "ledger"})),
    ("postgresql://u@h/ledger?schema=", dict(backend="postgres", schema="public")),
    # libpq's forms: a socket directory (as a parameter or percent-encoded host), several hosts, nothing
    ("postgresql:///ledger?host=/var/run/postgresql",
     dict(params={"host": "/var/run/postgresql", "dbname": "ledger"}, host="/var/run/postgresql")),
    ("postgresql://%2Fvar%2Frun%2Fpostgresql/ledger", dict(params={"host": "/var/run/postgresql", "dbname": "ledger"})),
    ("postgresql://h1:5432,h2:5433/db?target_session_attrs=read-write",
     dict(params={"host": "h1,h2", "port": "5432,5433", "dbname": "db", "target_session_attrs": "read-write"})),
    ("postgresql://", dict(backend="postgres", params={}, host="the default socket", port="5432", schema="public")),
    ("postgresql://h/db?sslmode=require&application_name=a%20b&connect_timeout=3&schema=s",
     dict(params={"host": "h", "dbname": "db", "sslmode": "require", "application_name": "a b",
                  "connect_timeout": "3"}, schema="s")),
])
def test_database_url_parse(url: str, expected: dict[str, Any], no_pg_environment: None) -> None:
    db = DatabaseURL.parse(url)
    assert db.url == url
    for key, value in expected.items():
        assert getattr(db, key) == value, key


def test_what_a_url_leaves_out_comes_from_the_pg_environment(monkeypatch, no_pg_environment: None) -> None:
    monkeypatch.setenv("PGHOST", "pg.example.com")
    monkeypatch.setenv("PGPORT", "6000")
    monkeypatch.setenv("PGUSER", "bob")
    monkeypatch.setenv("PGDATABASE", "books")
    db = DatabaseURL.parse("postgresql://")
    assert (db.host, db.port, db.user, db.dbname) == ("pg.example.com", "6000", "bob", "books")
    assert db.params == {} and "host" not in db.psycopg_conninfo()  # libpq reads the variables itself
    db = DatabaseURL.parse("postgresql://alice@db.internal:5433/ledger")  # the URL's values win
    assert (db.host, db.port, db.user, db.dbname) == ("db.internal", "5433", "alice", "ledger")
    monkeypatch.delenv("PGDATABASE")
    assert DatabaseURL.parse("postgresql://").dbname == "bob"  # libpq: the database defaults to the user


@pytest.mark.parametrize("url", [
    "mysql://root@localhost/ledger", "http://example.com/x", "ledger.db", "", "sqlite://", "sqlite:///",
    "sqlite:relative.db", "sqlite:///%00", "sqlite:///dir/%00.db", "postgresql:ledger",
    "postgresql://h/db?schema=name%0A", "postgresql://h/db?schema=a&schema=b", "postgresql://h/db?schema=Upper",
    "postgresql://h/db?sslmode", "postgresql://h/db?host=%zz",
])
def test_database_url_invalid(url: str) -> None:
    with pytest.raises(LedgerError) as e:
        DatabaseURL.parse(url)
    assert e.value.code == "invalid_database_url"


@pytest.mark.parametrize("url, named", [
    ("postgresql://h/db?sslmod=require", ["'sslmod'"]),
    ("postgresql://h/db?schema=s&timeout=3&sslmode=disable&appname=x", ["'appname'", "'timeout'"]),
])
def test_unknown_parameters_are_refused_naming_each(url: str, named: list[str]) -> None:
    with pytest.raises(LedgerError) as e:
        DatabaseURL.parse(url)
    assert e.value.code == "invalid_database_url"
    assert all(name in e.value.message for name in named), e.value.message
    assert "'sslmode'" not in e.value.message and "'schema'" not in e.value.message


def test_schema_names_are_matched_in_full() -> None:
    with pytest.raises(LedgerError) as e:
        DatabaseURL.parse("postgresql://h/db?schema=tenant%0A")
    assert e.value.code == "invalid_database_url" and "'tenant\\n'" in e.value.message
    assert DatabaseURL.parse("postgresql://h/db?schema=tenant").schema == "tenant"


@pytest.mark.parametrize("url", ["postgresql://u@h:abc/ledger", "postgresql://u@h:99999/ledger",
                                 "postgresql://u@h:0/ledger", "postgresql://h1:1,h2:x/db"])
def test_database_url_bad_port(url: str) -> None:
    with pytest.raises(LedgerError) as e:
        DatabaseURL.parse(url)
    assert e.value.code == "invalid_database_url"


def test_passwords_are_redacted_from_errors() -> None:
    with pytest.raises(LedgerError) as e:
        DatabaseURL.parse("postgresql://alice:hunter2@h/ledger?sslmod=x")
    assert "hunter2" not in e.value.message and "***" in e.value.message
    with pytest.raises(LedgerError) as e:
        DatabaseURL.parse("postgresql://h/ledger?password=hunter2&bogus=1")
    assert "hunter2" not in e.value.message and "***" in e.value.message
    with pytest.raises(LedgerError) as e:
        DatabaseURL.parse("mongodb://alice:hunter2@h/ledger")
    assert "hunter2" not in e.value.message
    assert redact("postgresql://alice:hunter2@h/db") == "postgresql://alice:***@h/db"
    assert redact("postgresql://h/db?password=hunter2&sslmode=require") == \
        "postgresql://h/db?password=***&sslmode=require"


def test_with_schema_keeps_every_other_parameter() -> None:
    db = DatabaseURL.parse("postgresql://u@h/db?sslmode=disable&schema=old&host=/tmp")
    moved = DatabaseURL.parse(db.with_schema("new_one"))
    assert moved.schema == "new_one" and moved.params == db.params


def test_env_translation() -> None:
    from psycopg.conninfo import conninfo_to_dict

    from ledger.recorders import CONNECT_TIMEOUT, TCP_DEFAULTS

    sqlite_env = DatabaseURL.parse("sqlite:////tmp/x.db").env()
    assert sqlite_env["PERSISTENCE_MODULE"] == "ledger.recorders.sqlite:SQLiteLedgerFactory" and sqlite_env["SQLITE_DBNAME"] == "/tmp/x.db"
    pg_env = DatabaseURL.parse("postgresql://alice:pw@h:6000/db?schema=s1&sslmode=verify-full").env()
    assert pg_env["PERSISTENCE_MODULE"] == "ledger.libpq:LibpqPostgresFactory"
    assert conninfo_to_dict(pg_env["POSTGRES_CONNINFO"]) == {
        "user": "alice", "password": "pw", "host": "h", "port": "6000", "dbname": "db", "sslmode": "verify-full",
        "connect_timeout": str(CONNECT_TIMEOUT), **TCP_DEFAULTS}
    own = DatabaseURL.parse("postgresql://h/db?tcp_user_timeout=30000&keepalives=0").psycopg_conninfo()
    assert conninfo_to_dict(own)["tcp_user_timeout"] == "30000" and conninfo_to_dict(own)["keepalives"] == "0"
    assert (pg_env["POSTGRES_HOST"], pg_env["POSTGRES_PORT"], pg_env["POSTGRES_DBNAME"], pg_env["POSTGRES_SCHEMA"]) \
        == ("h", "6000", "db", "s1")
    assert "POSTGRES_ENABLE_DB_FUNCTIONS" not in pg_env  # keep the library's default insert path (docs/architecture.md)


def test_sqlite_timeout_setting(monkeypatch) -> None:
    monkeypatch.delenv("CHAT_LEDGER_SQLITE_TIMEOUT", raising=False)
    assert DatabaseURL.parse("sqlite:///x.db").env()["SQLITE_LOCK_TIMEOUT"] == "30"
    monkeypatch.setenv("CHAT_LEDGER_SQLITE_TIMEOUT", "2")
    assert DatabaseURL.parse("sqlite:///x.db").env()["SQLITE_LOCK_TIMEOUT"] == "2"
    for bad in ("0", "1.5", "soon"):
        monkeypatch.setenv("CHAT_LEDGER_SQLITE_TIMEOUT", bad)
        with pytest.raises(LedgerError) as e:
            DatabaseURL.parse("sqlite:///x.db").env()
        assert e.value.code == "invalid_setting" and "CHAT_LEDGER_SQLITE_TIMEOUT" in e.value.message


def test_resolve_url_precedence(monkeypatch) -> None:
    monkeypatch.delenv("CHAT_LEDGER_DB", raising=False)
    assert resolve_url(None) == DEFAULT_URL == "sqlite:///chat-ledger.db"
    monkeypatch.setenv("CHAT_LEDGER_DB", "sqlite:///from-env.db")
    assert resolve_url(None) == "sqlite:///from-env.db"
    assert resolve_url("sqlite:///explicit.db") == "sqlite:///explicit.db"


def test_sqlite_relative_path_is_relative_to_the_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = open_app("sqlite:///relative.db")
    try:
        create(app)
    finally:
        app.close()
    assert (tmp_path / "relative.db").is_file()


def _pg_schemas(url: str, name: str) -> list[str]:
    with psycopg.connect(DatabaseURL.parse(url).psycopg_conninfo(), autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname = %s", (name,))]


def test_open_app_on_postgres_creates_the_schema(pg_url: str) -> None:
    schema = DatabaseURL.parse(pg_url).schema
    assert _pg_schemas(pg_url, schema) == []
    app = open_app(pg_url)
    try:
        assert _pg_schemas(pg_url, schema) == [schema]
        org = new_org(app)
        before = RawDB(pg_url).count()
        chat_id = create(app, org)
        assert RawDB(pg_url).count() == before + 1 and app.load(chat_id) is not None
        head = app.head()
    finally:
        app.close()
    again = open_app(pg_url)  # a second open of an existing ledger
    try:
        assert again.head() == head and again.load(chat_id) is not None
    finally:
        again.close()


@pytest.mark.parametrize("prefix", ["T_Mixed", "with-hyphen"])
def test_schema_names_needing_quotes(pg_url: str, prefix: str) -> None:
    schema = f"{prefix}_{uuid4().hex[:8]}"
    url = DatabaseURL.parse(pg_url).with_schema(schema)
    try:
        try:
            app = open_app(url)
        except LedgerError as e:
            assert e.code == "invalid_database_url", e  # refusing the name is fine, as a URL problem
            return
        try:
            chat_id = create(app)
            assert app.load(chat_id) is not None
        finally:
            app.close()
    finally:
        with psycopg.connect(DatabaseURL.parse(pg_url).psycopg_conninfo(), autocommit=True) as conn:
            for name in {schema, schema.lower()}:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_read_only_sqlite_file_is_database_unavailable() -> None:
    folder = tempfile.mkdtemp(prefix="ledger-ro-")
    try:
        os.chmod(folder, 0o755)
        url = f"sqlite:///{folder}/ledger.db"
        app = open_app(url)
        create(app)
        app.close()
        os.chmod(f"{folder}/ledger.db", 0o444)
        out = _open_as_unprivileged(url)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert out.get("code") == "database_unavailable", out
    assert "read-only" in out["message"] and f"{folder}/ledger.db" in out["message"]


@pytest.mark.parametrize("case", ["read-only-folder", "path-is-a-directory"])
def test_unopenable_sqlite_path_is_database_unavailable(case: str) -> None:
    folder = tempfile.mkdtemp(prefix="ledger-ro-")
    try:
        if case == "read-only-folder":
            os.chmod(folder, 0o555)
            out = _open_as_unprivileged(f"sqlite:///{folder}/new.db")
        else:
            os.mkdir(f"{folder}/adir")
            try:
                open_app(f"sqlite:///{folder}/adir").close()
                out = {"ok": True}
            except LedgerError as e:
                out = {"code": e.code, "message": e.message}
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder, ignore_errors=True)
    assert out.get("code") == "database_unavailable", out


def test_missing_sqlite_folder_is_database_unavailable(tmp_path) -> None:
    missing = tmp_path / "no" / "such" / "folder"
    with pytest.raises(LedgerError) as e:
        open_app(f"sqlite:///{missing}/ledger.db")
    assert e.value.code == "database_unavailable"
    assert str(missing) in e.value.message and "does not exist" in e.value.message
    assert not missing.exists()


def test_a_file_that_is_not_a_database_is_database_unavailable(tmp_path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are not the bytes you are looking for " * 40)
    with pytest.raises(LedgerError) as e:
        open_app(f"sqlite:///{path}")
    assert e.value.code == "database_unavailable" and str(path) in e.value.message


def test_unreachable_postgres_is_database_unavailable_naming_host_and_port() -> None:
    with pytest.raises(LedgerError) as e:
        open_app("postgresql://postgres:hunter2@127.0.0.1:1/ledger")
    assert e.value.code == "database_unavailable"
    assert "127.0.0.1:1" in e.value.message and "hunter2" not in e.value.message


def test_missing_postgres_database_is_database_unavailable(pg_url: str) -> None:
    db = DatabaseURL.parse(pg_url)
    url = f"postgresql://{db.user}@{db.host}:{db.port}/no_such_db_{uuid4().hex[:8]}"
    with pytest.raises(LedgerError) as e:
        open_app(url)
    assert e.value.code == "database_unavailable"
    assert f"{db.host}:{db.port}" in e.value.message and "no_such_db_" in e.value.message


# -- helpers ---------------------------------------------------------------------------------------------

#: The child: on its own, any user respects file permissions; root ignores them through the capability
#: CAP_DAC_OVERRIDE, which the child drops (from its effective and permitted sets: for good) — still root, so
#: it reads the checkout wherever it lives (a folder only root may enter), but it cannot write a read-only
#: file or create one in a read-only folder. It first proves that on a read-only probe file; where the
#: capability cannot be dropped (no capset), the test is skipped saying so.
_CHILD = """
import ctypes, json, os, sys
sys.path.insert(0, {repo!r})
from commands.handler import execute_json
from ledger.errors import LedgerError
from ledger.store import open_app

def drop_dac_override():
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    if libc.capget(ctypes.byref(header), data) != 0:
        return f"capget failed (errno {{ctypes.get_errno()}})"
    data[0].effective &= ~(1 << 1)  # CAP_DAC_OVERRIDE
    data[0].permitted &= ~(1 << 1)
    if libc.capset(ctypes.byref(header), data) != 0:
        return f"capset failed (errno {{ctypes.get_errno()}})"
    return None

problem = drop_dac_override() if os.geteuid() == 0 else None
try:
    open(sys.argv[2], "a").close()
    print(json.dumps({{"skip": f"this process can write a read-only file ({{problem or 'permissions not enforced'}}), "
                               "so it cannot test what a user without that right sees"}}))
    sys.exit(0)
except PermissionError:
    pass
try:
    app = open_app(sys.argv[1])
    execute_json(app, json.dumps({{"type": "add_organization_member", "organization_id": "{org}",
                                   "user_id": "{org}"}}))
    print(json.dumps({{"ok": True}}))
except LedgerError as e:
    print(json.dumps({{"code": e.code, "message": e.message}}))
except Exception as e:
    print(json.dumps({{"exception": type(e).__module__ + "." + type(e).__name__, "message": str(e)}}))
"""


def _open_as_unprivileged(url: str) -> dict[str, Any]:
    """open_app + one write in a child process that cannot override file permissions (root without
    CAP_DAC_OVERRIDE, or the user running the tests)."""
    with tempfile.TemporaryDirectory(prefix="ledger-probe-") as probe_dir:
        probe = os.path.join(probe_dir, "read-only")
        open(probe, "w").close()
        os.chmod(probe, 0o444)
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD.format(repo=str(REPO), org=uuid4()), url, probe],
            capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    return out
