"""One builder per projection build (issue 13, point 2), with real CLI processes on SQLite and PostgreSQL.

The fault: an in-place ``projections rebuild`` reset the build to position 0 while a ``catch-up`` or a
``follow`` of the same projection in another process was in the middle of its run; that process's next batch
(read at its stale position) passed the position check, moved the build past everything the rebuild had not
applied yet, and the rebuild then skipped to there: 12,000 chats ended as 7,335 status rows, "live, lag 0",
both commands exiting 0 (on PostgreSQL: "has no tables here", deadlocks, tracebacks).

Here the other process is made slow (batches of 1 notification) so that the rebuild, started once the other
has committed part of its work, runs while the other is mid-run (checked: the other is still running while
the rebuild holds its lease). Afterwards the views must equal a fresh rebuild from the log, hold one status
row per chat, and ``events verify`` must pass. Also: a second rebuild of the same projection stops with a
clear error; a blue/green rebuild killed with SIGKILL leaves a build that ``projections status`` lists and
that ``projections prune`` (or the next rebuild) removes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from commands.tools.workload import generate
from projections import REBUILD, catch_up, open_backend
from projections.chats import ChatViews
from tests.audit.kit import cli as run_cli
from tests.reliability.kit import assert_views_equal_rebuild, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(url: str, *args: str) -> subprocess.Popen[bytes]:
    """The chat-ledger CLI in its own process (the processes that race; the checks afterwards run the CLI
    in this one)."""
    return subprocess.Popen([sys.executable, "-m", "commands.cli.main", "--db", url, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[bytes], timeout: float = 180) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


def chat_streams(app: Any) -> set[str]:
    return {str(e.originator_id) for _, e in app.iter_events(0) if type(e).__module__ == "ledger.chat.events"}


def maintained(backend: Any) -> int:
    return backend.live_version("chat_views") or ChatViews.version


def holds(backend: Any, build: int, purpose: str) -> bool:
    return any(h.projection == "chat_views" and h.build == build and h.purpose == purpose
               for h in backend.lease_holders("chat_views"))


def assert_sound(url: str, app: Any) -> None:
    """The views equal a fresh rebuild from the log, one status row per chat; ``events verify`` passes."""
    views = assert_views_equal_rebuild(app, url)
    assert {r["chat_id"] for r in views["chat_status"]} == chat_streams(app)
    assert run_cli(url, "events", "verify").output.splitlines()[-1] == "OK"


@pytest.mark.parametrize("other, seed, live, start_at", [
    ("catch-up", 1, False, "first batch"), ("follow", 2, True, "a tenth"), ("catch-up", 3, True, "first batch"),
], ids=["catch-up-first-build", "follow-live-with-lag", "catch-up-live-with-lag"])
def test_rebuild_in_place_beside_a_catch_up_loses_nothing(db_url: str, app: Any, other: str, seed: int,
                                                          live: bool, start_at: str) -> None:
    if live:  # the views live and caught up, then more events: the other process has a lag to catch up
        generate(app, 800, seed=seed, chat_events=4, save_every=40)
        with open_backend(db_url) as b:
            catch_up(app, ChatViews(app), b)
    generate(app, 3000, seed=seed + 100, chat_events=4, save_every=40)
    head = app.head()
    with open_backend(db_url) as backend:
        version = maintained(backend)
        begin = (backend.position("chat_views", version) or 0) if live else 0
        threshold = begin + 1 if start_at == "first batch" else begin + (head - begin) // 10
        args = ["projections", "catch-up", "chat_views"] if other == "catch-up" else ["projections", "follow",
                                                                                      "--poll", "0.05"]
        # one notification per batch: it is far from done when the rebuild starts (once the rebuild has the
        # build, it waits, and then finds the build at the head)
        slow = cli(db_url, *args, "--batch-size", "1")

        def position(build: int | None = None) -> int:
            try:
                return backend.position("chat_views", version if build is None else build) or 0
            except Exception:  # noqa: BLE001 - the other process may be creating the first build
                return 0

        wait_for(lambda: position() >= threshold or slow.poll() is not None, 120, "the other process to start")
        assert slow.poll() is None and position() < head, "the other process finished before the rebuild started"
        rebuild = cli(db_url, "projections", "rebuild", "chat_views", "--batch-size", "50", "--json")
        # The fault needs both at work at once: the other is still running while the rebuild holds the build.
        wait_for(lambda: holds(backend, version, "rebuild") or rebuild.poll() is not None, 120, "the rebuild")
        assert slow.poll() is None, "the other process finished before the rebuild took the build"
        code, out, err = finish(rebuild)
        assert code == 0, err
        result = json.loads(out)
        # stream-wise (the default for chat_views): a live build is replaced by a new one, switched in
        assert result["position"] == head and result["switched"] == (not live or result["streamwise"])
        if other == "follow":
            # the follower goes on with the live build (after a stream-wise switch: the new one)
            wait_for(lambda: position(maintained(backend)) == head, 120, "the follower to catch up after the rebuild")
            slow.send_signal(signal.SIGINT)
        code, out, err = finish(slow)
        assert code == 0, err
        assert backend.position("chat_views", maintained(backend)) == head
    assert_sound(db_url, app)


def test_a_second_rebuild_of_a_projection_stops_with_a_clear_error(db_url: str, app: Any) -> None:
    generate(app, 1500, seed=5, chat_events=4, save_every=40)
    with open_backend(db_url) as backend:
        first = cli(db_url, "projections", "rebuild", "chat_views", "--batch-size", "5")
        wait_for(lambda: holds(backend, REBUILD, "rebuild") or first.poll() is not None, 120, "the first rebuild")
        assert first.poll() is None, "the first rebuild ended before the second one could start"
        second = run_cli(db_url, "projections", "rebuild", "chat_views", code=1)
        assert first.poll() is None, "the first rebuild ended before the second one was refused"
        assert second.output.startswith("error: projection_busy: projection chat_views is being rebuilt by "
                                        f"rebuild (pid {first.pid} on "), second.output
        assert second.output.count("\n") == 1
        code, out, err = finish(first)
        assert code == 0, err
    assert_sound(db_url, app)


@pytest.mark.parametrize("cleanup", ["prune", "rebuild"])
def test_a_killed_blue_green_rebuild_leaves_a_build_that_status_lists_and_prune_removes(
        db_url: str, app: Any, cleanup: str) -> None:
    V = ChatViews.version  # the first build; a blue/green rebuild writes the next
    generate(app, 800, seed=9, chat_events=4, save_every=40)
    with open_backend(db_url) as backend:
        catch_up(app, ChatViews(app), backend)
        assert backend.live_version("chat_views") == V
        # log order: its position moves batch by batch (a stream-wise build's moves once, at the end)
        killed = cli(db_url, "projections", "rebuild", "chat_views", "--blue-green", "--log-order", "--batch-size", "5")
        wait_for(lambda: (backend.position("chat_views", V + 1) or 0) > 0 or killed.poll() is not None, 120,
                 "the blue/green build to be under way")
        killed.send_signal(signal.SIGKILL)
        assert killed.wait(timeout=30) == -signal.SIGKILL
        # PostgreSQL drops the killed process's session (and its locks) once it sees the socket closed.
        wait_for(lambda: not backend.lease_holders("chat_views"), 30, "the killed rebuild's leases to go")
        left = backend.position("chat_views", V + 1)
        assert 0 < left < app.head()

        views = chat_views_status(db_url)
        assert views["live_version"] == V and views["state"] == "live"
        assert [(b["version"], b["position"], b["state"]) for b in views["other_builds"]] == [(V + 1, left, "leftover")]
        out = run_cli(db_url, "projections", "status").output
        assert f"chat_views: v{V + 1} at {left}: left by a rebuild that did not switch" in out

        if cleanup == "prune":
            out = run_cli(db_url, "projections", "prune", "chat_views").output
            assert out.strip() == f"chat_views: dropped v{V + 1}"
            assert sorted(backend.builds("chat_views")) == [V]
            assert backend.live_version("chat_views") == V
        else:  # the next rebuild drops it first, then builds and switches to a build of its own
            result = json.loads(run_cli(db_url, "projections", "rebuild", "chat_views", "--blue-green", "--json").stdout)
            assert result["switched"] and result["diff"]["equal"] and result["events"] > 0
            assert backend.live_version("chat_views") == result["to_version"] == V + 1
            assert sorted(backend.builds("chat_views")) == [V, V + 1]  # the previous live build is kept
        views = chat_views_status(db_url)
        assert [b["state"] for b in views["other_builds"]] == ([] if cleanup == "prune" else ["previous"])
        assert_tables = _tables(db_url)
        assert not any(t.startswith(f"chat_views_v{V + 2}") for t in assert_tables)
        if cleanup == "prune":
            assert not any(t.startswith(f"chat_views_v{V + 1}") for t in assert_tables)
    assert_sound(db_url, app)


def chat_views_status(url: str) -> dict[str, Any]:
    (views,) = [s for s in map(json.loads, run_cli(url, "projections", "status", "--json").output.splitlines())
                if s["projection"] == "chat_views"]
    return views


def _tables(url: str) -> list[str]:
    """The tables in the database (SQLite file, or the URL's PostgreSQL schema)."""
    from tests.store.rawdb import RawDB

    raw = RawDB(url)
    if raw.db.backend == "sqlite":
        with raw._sqlite() as conn:
            return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    with raw._pg() as conn:
        return [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s",
                                           (raw.db.schema,)).fetchall()]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_follow_stops_on_a_signal_even_when_its_shell_ignored_sigint(db_url: str, app: Any, sig: int) -> None:
    """A background job of a non-interactive shell (`chat-ledger projections follow &` in a script, or a CI
    runner) starts with SIGINT ignored; Python leaves SIG_IGN in place, so such a follower used to run on
    after Ctrl-C or `kill -INT`. Both SIGINT and SIGTERM must end it cleanly (exit 0, views caught up)."""
    generate(app, events=200, seed=7)
    # as a script's background job would start it: SIGINT ignored, inherited through exec
    follower = subprocess.Popen(["sh", "-c", 'trap "" INT; exec "$@"', "sh", sys.executable, "-m",
                                 "commands.cli.main", "--db", db_url, "projections", "follow", "--poll", "0.05"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open_backend(db_url) as backend:
        wait_for(lambda: backend.position("chat_views", maintained(backend)) == app.head()
                 or follower.poll() is not None, 60, "the follower to catch up")
    assert follower.poll() is None, finish(follower)
    follower.send_signal(sig)
    code, out, err = finish(follower, timeout=60)
    assert code == 0, (out, err)
