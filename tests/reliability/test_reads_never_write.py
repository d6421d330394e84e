"""Issue 13 point 9 — reading never writes.

A reading command given a ledger that does not exist (a mistyped SQLite path, a file without a ledger, a
PostgreSQL schema or database that does not exist, a database whose ``public`` schema holds no ledger)
exits 1 with ``database_not_found`` naming what it looked for, and creates nothing: no file, no schema, no
table. Only the commands of ``CREATING_COMMANDS`` create a ledger; every command of the CLI is either one
of them or a read run here. On an existing ledger a read may still build view tables (derived data).

The matrix runs in-process (click's runner: the same entry point and error handler as the installed
command); the installed command itself is run as a process for one read per backend.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Iterator

import click
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from commands.cli.context import CREATING_COMMANDS, may_create
from commands.cli.main import main
from ledger.store import DatabaseURL
from tests.conftest import PG_URL, drop_schema, require_pg

from .clikit import error_line, run

ORG, CHAT, CONV = (str(uuid.UUID(int=n)) for n in (0xA, 0xB, 0xC))

#: every command that only reads (its path below ``main``), with arguments that get it as far as opening
#: the ledger
READ_COMMANDS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("status",): (CHAT,), ("unresolved",): (), ("queue",): (CHAT,), ("models",): ("--org", ORG),
    ("show",): (CHAT,), ("audit",): (CHAT,), ("explain",): (CHAT, "--turn", CHAT), ("resolve-model",): (CHAT,),
    ("next-action",): (CHAT,), ("events", "verify"): (), ("events", "stats"): (), ("events", "export"): (),
    ("projections", "status"): (), ("projections", "prune"): (), ("conversation", "status"): (),
    ("conversation", "show"): (CONV,), ("projections", "switches"): ("chat_views",),
    ("projections", "rollback"): ("chat_views",), ("tokens", "list"): (), ("tokens", "revoke"): (CHAT,),
    ("tokens", "rotate"): (CHAT,), ("search",): ("words",), ("usage",): (),
    ("serve",): ("--port", "0"),  # (without --create: a ledger that does not exist is refused before listening)
    # (they write the Merkle tree beside an existing log, never a ledger: the ledger is looked for first)
    ("events", "checkpoint"): ("--key", "/nonexistent/k.key"),
    ("events", "prove"): (CHAT, "1", "--checkpoint", "/nonexistent/cp.json"),
    # (people's data: they act on a ledger that exists — an erasure, a hold, a policy is never its first fact)
    ("erase",): (CHAT, "--reason", "r"), ("hold", "set"): (CHAT, "--reason", "r"),
    ("hold", "clear"): (CHAT, "--reason", "r"), ("retention", "set"): (ORG, "--content-days", "30"),
    ("retention", "run"): (), ("events", "encrypt-existing"): ("--to", "sqlite:////nonexistent/new.db"),
}
READS = [(*path, *args) for path, args in READ_COMMANDS.items()] + [("status",)]
#: commands that do not open the ledger named by --db at all
NOT_OPENING = {("bench",), ("states",), ("keys", "create"), ("proof", "verify"), ("witness",)}  # (no database)


def leaf_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # (main loads its commands on first use: ask it for each)
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            out += leaf_paths(command, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def cli(db: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["--db", db, *args], env={"CHAT_LEDGER_DEBUG": None})
    return result.exit_code, result.stdout, result.stderr


def pg(url: str) -> psycopg.Connection:
    return psycopg.connect(DatabaseURL.parse(url).psycopg_conninfo(), autocommit=True)


def schemas_named(url: str, name: str) -> list[str]:
    with pg(url) as conn:
        return [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname = %s", (name,))]


# -- which commands may create ------------------------------------------------------------------------------

def test_every_command_either_creates_or_is_a_read_tested_here() -> None:
    paths = leaf_paths(main)
    for entry in CREATING_COMMANDS:  # each entry names a command or a group of main
        assert any(p[:len(entry)] == entry for p in paths), f"CREATING_COMMANDS names no command: {entry}"
    unclassified = [p for p in paths if not may_create(p) and p not in READ_COMMANDS and p not in NOT_OPENING]
    assert unclassified == [], f"commands that read but are not run by this test: {unclassified}"
    assert not any(may_create(path) for path in READ_COMMANDS)


# -- SQLite -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_a_read_of_a_missing_sqlite_file_creates_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = tmp_path / "mistyped.db"
    code, out, err = cli(f"sqlite:///{path}", *args)
    message = error_line((code, out, err), "database_not_found")
    assert str(path) in message and "does not exist" in message
    assert list(tmp_path.iterdir()) == []  # no database, no -wal / -shm


@pytest.mark.parametrize("args", [("status",), ("events", "verify"), ("show", CHAT), ("events", "export")],
                         ids=" ".join)
def test_a_read_of_a_sqlite_file_without_a_ledger_changes_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    empty, other = tmp_path / "empty.db", tmp_path / "other.db"
    empty.touch()
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    before = {p.name: p.read_bytes() for p in (empty, other)}
    for path in (empty, other):
        message = error_line(cli(f"sqlite:///{path}", *args), "database_not_found")
        assert f"no ledger in SQLite file {path}" in message
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_the_installed_command_refuses_a_mistyped_sqlite_path(tmp_path: Path) -> None:
    proc = run("sqlite:///ledgr.db", "events", "verify", cwd=tmp_path)
    assert "ledgr.db" in error_line(proc, "database_not_found") and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [("init",), ("catalog", "add-member", "--org", ORG, "--user", CHAT),
                                  ("projections", "catch-up")], ids=" ".join)
def test_writing_commands_create_the_sqlite_ledger(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = tmp_path / "new.db"
    code, _, err = cli(f"sqlite:///{path}", *args)
    assert code == 0, err
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'stored_events'").fetchone() == (1,)
    conn.close()
    # ... and reads of it work, building their views beside it (derived data)
    assert cli(f"sqlite:///{path}", "status")[0] == 0
    assert cli(f"sqlite:///{path}", "events", "verify")[0] == 0


# -- PostgreSQL ---------------------------------------------------------------------------------------------

@pytest.fixture
def missing_schema() -> Iterator[str]:
    require_pg()
    name = f"t_missing_{uuid.uuid4().hex[:10]}"
    url = DatabaseURL.parse(PG_URL).with_schema(name)
    yield url
    drop_schema(url)  # in case the test failed by creating it


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_a_read_of_a_missing_postgres_schema_creates_nothing(missing_schema: str, args: tuple[str, ...]) -> None:
    schema = DatabaseURL.parse(missing_schema).schema
    message = error_line(cli(missing_schema, *args), "database_not_found")
    assert f"schema {schema!r} does not exist" in message
    assert schemas_named(missing_schema, schema) == []


@pytest.fixture
def fresh_database() -> Iterator[str]:
    """A new PostgreSQL database (its ``public`` schema empty) and a URL naming it without a schema."""
    require_pg()
    name = f"t_reads_{uuid.uuid4().hex[:10]}"
    base = DatabaseURL.parse(PG_URL)
    with pg(PG_URL) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = base.url.partition("?")[0].rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with pg(PG_URL) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def public_tables(url: str) -> list[str]:
    with pg(url) as conn:
        return [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]


def test_reads_without_a_schema_create_no_table_in_public(fresh_database: str) -> None:
    for args in READS:
        message = error_line(cli(fresh_database, *args), "database_not_found")
        assert "no ledger in schema 'public'" in message, args
    assert public_tables(fresh_database) == []
    proc = run(fresh_database, "status")  # the installed command, as a process
    assert "schema 'public'" in error_line(proc, "database_not_found")
    assert public_tables(fresh_database) == []
    # a writer creates the ledger there; then the same reads answer
    assert cli(fresh_database, "init")[0] == 0
    assert "chatledger_events" in public_tables(fresh_database)
    code, out, err = cli(fresh_database, "status")
    assert (code, out.strip()) == (0, "(none)"), err


def test_a_read_of_a_missing_postgres_database_names_it(missing_schema: str) -> None:
    name = f"no_such_db_{uuid.uuid4().hex[:8]}"
    url = DatabaseURL.parse(missing_schema).url.partition("?")[0].rsplit("/", 1)[0] + f"/{name}"
    proc = run(url, "events", "verify")
    message = error_line(proc, "database_not_found")
    assert f"database {name!r} does not exist" in message
    with pg(PG_URL) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone() == (0,)


def test_writing_commands_create_the_postgres_schema(missing_schema: str) -> None:
    schema = DatabaseURL.parse(missing_schema).schema
    code, _, err = cli(missing_schema, "catalog", "add-member", "--org", ORG, "--user", CHAT)
    assert code == 0, err
    assert schemas_named(missing_schema, schema) == [schema]
    code, out, err = cli(missing_schema, "events", "stats", "--json")
    assert code == 0, err
    assert "chat-ledger:catalog.MemberAdded" in {json.loads(line)["topic"] for line in out.splitlines()}


def test_env_var_database_url_is_a_read_too(tmp_path: Path) -> None:
    """``CHAT_LEDGER_DB`` instead of ``--db``: the same rule."""
    path = tmp_path / "from-env.db"
    proc = run(None, "status", env={**{k: v for k, v in os.environ.items() if not k.startswith("PG")},
                                    "CHAT_LEDGER_DB": f"sqlite:///{path}"})
    assert str(path) in error_line(proc, "database_not_found")
    assert not path.exists()
