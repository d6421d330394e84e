"""Build leases (``projections.leases``) on SQLite and PostgreSQL: one holder at a time, named when busy;
reentrant in a thread; a waiter goes before newcomers; a query waits briefly, then ``projection_busy``; on
SQLite a holder elsewhere is trusted until its expiry, on PostgreSQL a holder whose session ends loses it."""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from commands import views
from ledger.errors import LedgerError
from projections import REBUILD, BuildBusy, maintained_version, open_backend
from projections.leases import HOST
from tests.projections.projection_kit import Items, Writer, pg_admin_conninfo, renamed
from tests.reliability.kit import wait_for


def test_one_holder_at_a_time_named_when_busy(db_url: str, app: Any, backend: Any) -> None:
    other = open_backend(db_url)
    try:
        with backend.lease("items", 1, "rebuild"):
            with backend.lease("items", 1, "rebuild"):  # reentrant in the thread that holds it
                assert backend.holds("items", 1)
            assert backend.holds("items", 1)
            with pytest.raises(BuildBusy, match=rf"projection items v1 is being written by rebuild \(pid \d+ on {HOST}"):
                with other.lease("items", 1, "catch-up"):
                    pass
            with other.lease("items", 2, "catch-up"):  # another build: free
                pass
            with pytest.raises(BuildBusy, match="waited 0.2s"):
                with other.lease("items", 1, "catch-up", wait=0.2):
                    pass
            (holder,) = other.lease_holders("items")
            assert (holder.build, holder.purpose, holder.host) == (1, "rebuild", HOST)
        assert not backend.holds("items", 1) and other.lease_holders("items") == []
        with other.lease("items", 1, "catch-up"):  # released: free for anyone
            pass
        with backend.lease("items", REBUILD, "rebuild"), pytest.raises(BuildBusy, match="items is being rebuilt by"):
            with other.lease("items", REBUILD, "rebuild"):
                pass
    finally:
        other.close()


def _waiting(db_url: str, backend: Any) -> bool:
    """Is a lease request of ``items`` v1 queued (SQLite: the waiter recorded; PostgreSQL: a lock request)?"""
    if backend.kind == "sqlite":
        with sqlite3.connect(backend.path) as conn:
            row = conn.execute("SELECT waiter FROM projection_leases WHERE projection = 'items' AND build = 1").fetchone()
        return row is not None and row[0] is not None
    with psycopg.connect(pg_admin_conninfo(), autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                            "AND objid = 1 AND objsubid = 2").fetchone()[0] > 0


def test_a_waiter_goes_before_newcomers(db_url: str, app: Any, backend: Any) -> None:
    waiter, newcomer = open_backend(db_url), open_backend(db_url)
    got = threading.Event()
    release = threading.Event()

    def wait_for_lease() -> None:
        with waiter.lease("items", 1, "rebuild", wait=30):
            got.set()
            release.wait(30)

    try:
        thread = threading.Thread(target=wait_for_lease)
        with backend.lease("items", 1, "follow"):
            thread.start()
            wait_for(lambda: _waiting(db_url, backend), 10, "the waiter to queue")
        # released with a waiter in line: a newcomer does not get in first
        with pytest.raises(BuildBusy):
            with newcomer.lease("items", 1, "follow"):
                pass
        wait_for(got.is_set, 10, "the waiter to get the lease")
        with pytest.raises(BuildBusy, match="being written by rebuild"):
            with newcomer.lease("items", 1, "follow"):
                pass
        release.set()
        thread.join(10)
        with newcomer.lease("items", 1, "follow"):
            pass
    finally:
        release.set()
        waiter.close()
        newcomer.close()


def test_a_query_waits_briefly_then_is_projection_busy(db_url: str, app: Any, backend: Any) -> None:
    w, p = Writer(app), renamed(Items)
    w.save(w.items())
    version = maintained_version(p, backend)
    rebuilder = open_backend(db_url)
    try:
        with rebuilder.lease(p.name, version, "rebuild"):
            with pytest.raises(LedgerError) as busy:
                views.catch_up_one(app, p, backend, wait=0.3)
        assert busy.value.code == "projection_busy"
        assert busy.value.message.startswith(f"projection {p.name} v{version} is being written by rebuild (pid ")
        assert backend.position(p.name, version) == 0  # nothing written
        assert views.catch_up_one(app, p, backend) > 0  # released: the query catches up
    finally:
        rebuilder.close()


def test_sqlite_trusts_a_holder_on_another_machine_until_its_expiry(sqlite_url: str, app: Any) -> None:
    backend = open_backend(sqlite_url)
    try:
        now = datetime.now(timezone.utc)
        for expires, busy in ((now + timedelta(seconds=60), True), (now - timedelta(seconds=1), False)):
            with sqlite3.connect(backend.path) as conn:
                conn.execute("INSERT OR REPLACE INTO projection_leases (projection, build, owner, purpose, pid, host, "
                             "machine, process, acquired_at, expires_at) VALUES ('items', 1, 'x', 'rebuild', 1, "
                             "'elsewhere', 'elsewhere/boot', '', ?, ?)",
                             (now.isoformat(timespec="microseconds"), expires.isoformat(timespec="microseconds")))
            if busy:
                with pytest.raises(BuildBusy, match="on elsewhere"):
                    with backend.lease("items", 1, "catch-up"):
                        pass
            else:
                with backend.lease("items", 1, "catch-up"):
                    pass
    finally:
        backend.close()


def test_postgres_lease_ends_with_its_session(pg_url: str) -> None:
    from ledger.store import open_app

    app = open_app(pg_url)
    holder, other = open_backend(pg_url), open_backend(pg_url)
    try:
        w, p = Writer(app), renamed(Items)
        w.save(w.items())
        version = maintained_version(p, holder)
        with holder.lease(p.name, version, "rebuild"):
            pid = holder._pin.conn.info.backend_pid
            with psycopg.connect(pg_admin_conninfo(), autocommit=True) as conn:
                assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
            wait_for(lambda: not other.lease_holders(p.name), 10, "the server to drop the session")
            with other.lease(p.name, version, "catch-up"):  # the lease went with the session
                pass
            with pytest.raises(psycopg.OperationalError):  # and the old holder can no longer write
                holder.position(p.name, version)
    finally:
        holder.close()
        other.close()
        app.close()
