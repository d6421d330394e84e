"""Following the log: LISTEN/NOTIFY as a wake-up hint plus polling (Postgres), polling (SQLite)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import psycopg
import pytest

from tests.projections.projection_kit import ItemSet, Items, Writer, pg_admin_conninfo, renamed
from projections import Follower, open_backend
from ledger.store import open_app


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` until true; return the seconds it took (fail after ``timeout``)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - start


class Running:
    """A follower on a thread, stopped and joined at the end (bounded)."""

    def __init__(self, follower: Follower) -> None:
        self.follower = follower
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.follower.run(self.stop)
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            self.error = e

    def __enter__(self) -> Follower:
        self.thread.start()
        return self.follower

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "follower did not stop"
        if self.error is not None:
            raise self.error


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[Any, Any]]:
    app = open_app(pg_url)
    backend = open_backend(pg_url)
    yield app, backend
    backend.close()
    app.close()


def caught_up(app: Any, backend: Any, p: Any) -> Callable[[], bool]:
    # at the head and live: a first build switches live right after its last batch commits (not in it)
    return lambda: backend.position(p.name, p.version) == app.head() and backend.live_version(p.name) is not None


def terminate(pid: int) -> None:
    with psycopg.connect(pg_admin_conninfo(), autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]


def test_notification_wakes_the_follower(pg: tuple[Any, Any]) -> None:
    app, backend = pg
    w, p = Writer(app), renamed(Items)
    # Polling every 60 s: only the NOTIFY can explain a quick catch-up.
    with Running(Follower(app, [p], backend, poll_interval=60)) as f:
        wait_for(lambda: f.listen_pid is not None and f.catch_ups >= 1, 10, "the LISTEN connection")
        w.save([w.event(ItemSet, 0, key="a", value=1, tag="x")])
        wait_for(caught_up(app, backend, p), 5, "the notified catch-up")
        assert backend.query(p, "items")[0]["key"] == "a"


def test_terminated_listen_connection_does_not_stall_the_follower(pg: tuple[Any, Any]) -> None:
    app, backend = pg
    w, p = Writer(app), renamed(Items)
    # Reconnecting only after 60 s: while the LISTEN connection is dead, only polling can catch up.
    follower = Follower(app, [p], backend, poll_interval=0.2, reconnect_delay=(60, 60))
    with Running(follower) as f:
        wait_for(lambda: f.listen_pid is not None, 10, "the LISTEN connection")
        terminate(f.listen_pid)
        # Generous bounds (a loaded CI machine), all well under the 60 s reconnect delay.
        wait_for(lambda: f.listen_pid is None, 20, "the follower to notice the dead connection")
        w.save([w.event(ItemSet, 0, key="a", value=1, tag="x"), w.event(ItemSet, 1, key="b", value=2, tag="y")])
        wait_for(caught_up(app, backend, p), 20, "the polled catch-up")
        assert f.listen_pid is None  # still not listening: polling did it
        assert {r["key"] for r in backend.query(p, "items")} == {"a", "b"}


def test_listen_connection_is_reopened(pg: tuple[Any, Any]) -> None:
    app, backend = pg
    w, p = Writer(app), renamed(Items)
    with Running(Follower(app, [p], backend, poll_interval=60, reconnect_delay=(0.05, 0.5))) as f:
        wait_for(lambda: f.listen_pid is not None, 10, "the LISTEN connection")
        first = f.listen_pid
        terminate(first)
        wait_for(lambda: f.listen_pid not in (None, first), 10, "a new LISTEN connection")
        assert f.listen_connects >= 2
        w.save([w.event(ItemSet, 0, key="a", value=1, tag="x")])
        wait_for(caught_up(app, backend, p), 5, "the notified catch-up after reconnecting")


def test_sqlite_follows_by_polling(sqlite_url: str) -> None:
    app, backend = open_app(sqlite_url), open_backend(sqlite_url)
    try:
        w, p = Writer(app), renamed(Items)
        with Running(Follower(app, [p], backend, poll_interval=0.05)) as f:
            wait_for(lambda: f.catch_ups >= 1, 5, "the first catch-up")
            assert f.listen_pid is None
            w.save(w.items(n_groups=2, per_group=2))
            wait_for(caught_up(app, backend, p), 5, "the polled catch-up")
            assert len(backend.query(p, "items")) == 4
    finally:
        backend.close()
        app.close()
