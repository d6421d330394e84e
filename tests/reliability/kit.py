"""Shared helpers of the reliability suite: markers in events, views vs a rebuild, PostgreSQL backends."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any, Callable

import psycopg
import pytest

from ledger.store import DatabaseURL
from projections import catch_up, open_backend, rebuild
from projections.chats import ChatViews

MARK = re.compile(r"\bm[0-9]+x[0-9]+\b")


def markers(app: Any) -> Counter[str]:
    """How many times each command marker (``m<writer>x<n>``) occurs in the recorded events."""
    found: Counter[str] = Counter()
    for _, e in app.iter_events(0):
        found.update(set(MARK.findall(repr(e))))
    return found


def all_events(app: Any) -> list[Any]:
    return [e for _, e in app.iter_events(0)]


def assert_streams_contiguous(app: Any) -> dict[Any, int]:
    """Every stream's versions are 1..n with no gap or repeat; returns the versions per stream."""
    versions: dict[Any, list[int]] = {}
    for e in all_events(app):
        versions.setdefault(e.originator_id, []).append(e.originator_version)
    for sid, vs in versions.items():
        assert sorted(vs) == list(range(1, len(vs) + 1)), f"stream {sid}: versions {vs}"
    return {sid: len(vs) for sid, vs in versions.items()}


def read_views(backend: Any, version: int | None = None) -> dict[str, list[dict[str, Any]]]:
    with backend.reading("chat_views", version) as r:
        return {name: r.query(name) for name in r.tables}


def assert_views_equal_rebuild(app: Any, url: str) -> dict[str, list[dict[str, Any]]]:
    """Catch the live chat views up, read them, rebuild them from the log in place, read again: equal."""
    with open_backend(url) as backend:
        catch_up(app, ChatViews(app), backend)
        live = read_views(backend)
        result = rebuild(app, ChatViews(app), backend)
        assert result.position == app.head()
        rebuilt = read_views(backend)
    assert live == rebuilt
    return rebuilt


def admin_conninfo(url: str) -> str:
    return DatabaseURL.parse(url).psycopg_conninfo()


def schema_backends(url: str) -> list[int]:
    """Backend pids of the connections that have run a query on this test's schema (and only those: the
    server is shared with other test runs)."""
    db = DatabaseURL.parse(url)
    with psycopg.connect(admin_conninfo(url), autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = %s "
                            "AND position(%s in query) > 0", (db.dbname, db.schema)).fetchall()
    return [r[0] for r in rows]


def terminate(url: str, pids: list[int]) -> int:
    with psycopg.connect(admin_conninfo(url), autocommit=True) as conn:
        return sum(bool(conn.execute("SELECT pg_terminate_backend(%s)", (p,)).fetchone()[0]) for p in pids)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
