"""Shared fixtures: a ledger on SQLite, on a real PostgreSQL (own schema per test), or in memory.

PostgreSQL: ``CHAT_LEDGER_TEST_PG`` (a URL, any libpq parameters allowed) if set, else
postgresql://postgres@127.0.0.1:5432/postgres.
When no server answers, PostgreSQL tests are skipped with a message, except under CI (``CI`` set),
where they fail.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import psycopg
import pytest
from psycopg import sql

from ledger.store import ChatLedgerApp, DatabaseURL, open_app

PG_URL = os.environ.get("CHAT_LEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
os.environ.setdefault("EVENTSOURCING_DISABLE_REDEFINITION_CHECK", "1")

_pg_ok: bool | None = None


def pg_available() -> bool:
    global _pg_ok
    if _pg_ok is None:
        try:
            with psycopg.connect(DatabaseURL.parse(PG_URL).psycopg_conninfo(), connect_timeout=3):
                _pg_ok = True
        except psycopg.Error:
            _pg_ok = False
    return _pg_ok


def require_pg() -> None:
    if not pg_available():
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required under CI but {PG_URL} does not answer")
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}; start it or set CHAT_LEDGER_TEST_PG to enable these tests")


def _with_schema(url: str, schema: str) -> str:
    """``url`` naming ``schema``; its other parameters (sslmode, a socket directory, ...) are kept."""
    return DatabaseURL.parse(url).with_schema(schema)


def drop_schema(url: str) -> None:
    db = DatabaseURL.parse(url)
    with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(db.schema)))


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL with a fresh schema, dropped after the test."""
    require_pg()
    url = _with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}")
    yield url
    drop_schema(url)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path) -> Iterator[str]:
    """Each test using this runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    require_pg()
    url = _with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}")
    yield url
    drop_schema(url)


@pytest.fixture
def app(db_url) -> Iterator[ChatLedgerApp]:
    ledger = open_app(db_url)
    yield ledger
    ledger.close()


@pytest.fixture
def memory_app() -> Iterator[ChatLedgerApp]:
    """The in-memory store: the same application and codec, for fast domain-level tests."""
    ledger = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    yield ledger
    ledger.close()
