"""Stream-wise builds (``projections.streamwise``) on SQLite and PostgreSQL: equal to log-order builds on random
interleaved histories, for each projection that declares ``streamwise`` (and ``org_models``' log-order declaration
is needed); exactly-once catch-up from the fixed head; several worker processes, and a worker killed mid-build."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from commands.handler import command_from_dict, execute
from ledger.errors import LedgerError
from projections import ProjectionError, catch_up, rebuild, streamwise
from projections.chats import ChatViews
from projections.conversations import ConversationsView
from projections.org_models import OrgModelsView
from tests.conversation.commands_kit import run_command
from tests.projections.projection_kit import read_build
from tests.projections.test_chat_views import ACTIONS, record, renamed, replayed_rows

SESSION = "0123456789abcdef01234567"
PROPERTY = settings(max_examples=8, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def built_both_ways(app: Any, backend: Any, cls: type, workers: int = 1) -> tuple[Any, Any]:
    """The rows of a log-order build and of a stream-wise build of the same log."""
    suffix = uuid.uuid4().hex[:6]
    by_log, by_stream = renamed(cls, app, f"l{suffix}"), renamed(cls, app, f"s{suffix}")
    assert rebuild(app, by_log, backend, streamwise=False).streamwise is False
    result = rebuild(app, by_stream, backend, streamwise=True, workers=workers)
    assert result.streamwise and result.position == app.head()
    return read_build(backend, by_log), read_build(backend, by_stream)


def test_the_declarations() -> None:
    assert ChatViews.streamwise and ConversationsView.streamwise
    assert not OrgModelsView.streamwise


@PROPERTY
@given(n_chats=st.integers(1, 4), steps=st.lists(st.tuples(st.integers(0, 3), ACTIONS), min_size=1, max_size=30))
def test_chat_views_streamwise_equals_log_order(app: Any, backend: Any, n_chats: int, steps: list[Any]) -> None:
    record(app, n_chats, steps)  # the chats' commands interleave in the log (step i goes to chat i % n)
    by_log, by_stream = built_both_ways(app, backend, ChatViews)
    assert by_stream == by_log
    assert by_stream == replayed_rows(app)["chat_views"]


CONVERSATION_STEPS = st.sampled_from([
    {"type": "conversation_arrive", "user": "list the files"},
    {"type": "conversation_begin"},
    {"type": "conversation_prepare_stage", "job": 1, "text": "Looking", "calls": [{"name": "ls", "args": {}}]},
    {"type": "conversation_complete", "job": 1, "text": "done"},
    {"type": "conversation_fail", "job": 1, "message": "x"},
    {"type": "conversation_restart"},
    {"type": "conversation_recover", "force": True},
])


@PROPERTY
@given(n=st.integers(1, 3), steps=st.lists(st.tuples(st.integers(0, 2), CONVERSATION_STEPS), max_size=25))
def test_conversations_streamwise_equals_log_order(app: Any, backend: Any, n: int, steps: list[Any]) -> None:
    ids = [run_command(app, {"type": "conversation_start", "session": SESSION})["conversation_id"]
           for _ in range(n)]
    for i, step in steps:
        try:
            run_command(app, {**step, "conversation_id": ids[i % n]})
        except (LedgerError, ValueError):
            pass  # refused: nothing recorded
    by_log, by_stream = built_both_ways(app, backend, ConversationsView)
    assert by_stream == by_log
    assert len(by_stream["conversations"]) >= n


def test_org_models_needs_log_order(app: Any, backend: Any) -> None:
    """org_models joins streams: an organization's rows depend on the deployment settings as of then, so folding
    each stream alone gives other rows than the log-order build (its declaration is needed)."""
    record(app, 1, [])  # an organization with a catalog
    execute(app, command_from_dict({"type": "set_deployment_settings", "personal_model_overrides_enabled": True}))
    by_log, by_stream = built_both_ways(app, backend, OrgModelsView)
    assert by_stream != by_log
    assert by_stream["deployment"] == by_log["deployment"]


def test_exactly_once_catch_up_after_a_streamwise_build(app: Any, backend: Any) -> None:
    """Commands recorded while the streams are folded (after the fixed head) and after the build are applied
    once each, in log order, from the head."""
    record(app, 3, [(i, {"type": "send_message", "text": f"m{i}"}) for i in range(6)])
    p = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    head = app.head()
    during: list[int] = []

    def record_during(done: int) -> None:
        if not during:
            during.append(done)
            record(app, 2, [(0, {"type": "send_message", "text": "during"}), (1, {"type": "finish_turn"})])

    original = streamwise._after_stream
    streamwise._after_stream = record_during
    try:
        result = rebuild(app, p, backend, streamwise=True)
    finally:
        streamwise._after_stream = original
    assert during and app.head() > head and result.position == app.head()
    assert read_build(backend, p) == replayed_rows(app)["chat_views"]
    record(app, 1, [(0, {"type": "send_message", "text": "after"})])
    catch_up(app, p, backend)
    rows = read_build(backend, p)
    assert rows == replayed_rows(app)["chat_views"]
    for row in rows["chat_status"]:  # every event counted once: the row's version is its stream's
        assert row["version"] == app.load(uuid.UUID(row["chat_id"])).version


def test_workers_build_the_same_rows(app: Any, backend: Any) -> None:
    record(app, 12, [(i, {"type": "send_message", "text": f"m{i}"}) for i in range(24)])
    suffix = uuid.uuid4().hex[:6]
    by_log, by_workers = renamed(ChatViews, app, f"l{suffix}"), renamed(ChatViews, app, f"w{suffix}")
    rebuild(app, by_log, backend, streamwise=False)
    result = rebuild(app, by_workers, backend, workers=3)
    assert (result.streamwise, result.workers, len(result.worker_peak_rss_mb)) == (True, 3, 3)
    assert read_build(backend, by_workers) == read_build(backend, by_log)


def test_a_killed_worker_fails_the_rebuild_and_leaves_the_live_version(app: Any, backend: Any,
                                                                       tmp_path: Path) -> None:
    """SIGKILL one worker while both are mid-build: the rebuild fails, the live version still serves, nothing
    switched; the next rebuild succeeds."""
    record(app, 30, [(i, {"type": "send_message", "text": f"m{i}"}) for i in range(30)])
    p = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    catch_up(app, p, backend)
    live, before = backend.live_version(p.name), read_build(backend, p)
    go = tmp_path / "go"

    def hold(done: int) -> None:  # runs in each forked worker after its first stream
        ready = tmp_path / f"{os.getpid()}.ready"
        if not ready.exists():
            ready.touch()
            while not go.exists():
                time.sleep(0.01)

    def killer() -> None:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.ready"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        pids = sorted(int(f.name.split(".")[0]) for f in tmp_path.glob("*.ready"))
        os.kill(pids[0], signal.SIGKILL)
        go.touch()

    original = streamwise._after_stream
    streamwise._after_stream = hold
    thread = threading.Thread(target=killer)
    thread.start()
    try:
        with pytest.raises(ProjectionError, match="ended before finishing"):
            rebuild(app, p, backend, workers=2)
    finally:
        streamwise._after_stream = original
        go.touch()
        thread.join()
    assert len(list(tmp_path.glob("*.ready"))) == 2  # both workers were mid-build
    assert backend.live_version(p.name) == live
    assert read_build(backend, p) == before
    assert [s.mode for s in backend.switches(p.name)] == ["initial"]
    assert sorted(backend.builds(p.name)) == [live]  # the failed build was dropped
    result = rebuild(app, p, backend, workers=2)
    assert result.switched and backend.live_version(p.name) == result.to_version != live
    assert read_build(backend, p) == before


@PROPERTY
@given(steps=st.lists(st.tuples(st.integers(0, 5), ACTIONS), min_size=6, max_size=30),
       batch=st.integers(1, 8))
def test_log_order_catch_up_past_the_state_cache(app: Any, backend: Any, steps: list[Any], batch: int) -> None:
    """More chats active at once than the fold's memory holds: the states it lacks are read back together
    (many streams in one query) at the batch's versions, and the views equal the replayed states."""
    record(app, 6, steps)
    p = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    p.fold.max_streams = 2
    catch_up(app, p, backend, batch_size=batch)
    # the fallback runs only when a chat comes back after the cache dropped it (not on every history)
    event(f"states read back: {p.fold.loads > 0}")
    assert read_build(backend, p) == replayed_rows(app)["chat_views"]


def test_a_workers_range_is_read_from_the_last_key_each_page(app: Any, backend: Any, monkeypatch: Any) -> None:
    """Each page of a worker's range (``read_log`` with a lower bound) starts at the key after the last one read:
    every event of the range read once, in stream order, and on SQLite every later page's query searches the
    index from that key (with the range's lower bound in it, SQLite chose to search from the bound and read
    again, page after page, the whole range read so far: a 1,000,000-event build's upper half took 6 s to
    read instead of 0.8)."""
    record(app, 10, [(i % 10, {"type": "send_message", "text": f"m{i}"}) for i in range(30)])
    lo, hi = streamwise.id_ranges(2)[1]
    executed: list[tuple[str, tuple[Any, ...]]] = []
    datastore = app.recorder.datastore
    transaction = type(datastore).transaction

    def spying(self: Any, commit: bool = False) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def tx() -> Any:
            with transaction(self, commit=commit) as cur:
                execute = cur.execute

                def spy(sql: str, params: Any = ()) -> Any:
                    executed.append((sql, tuple(params)))
                    return execute(sql, params)
                monkeypatch.setattr(cur, "execute", spy, raising=False)
                yield cur
        return tx()

    monkeypatch.setattr(type(datastore), "transaction", spying)
    read = [(s.originator_id, s.originator_version)
            for _, s in streamwise.read_log(app, app.head(), None, lo, hi, page=4)]
    monkeypatch.undo()
    expected = sorted((s, v) for s in {e.originator_id for e in app.recorder.select_notifications(1, 10_000)}
                      if s >= lo for v in range(1, 1 + len(app.recorder.select_events(s))))
    assert read == expected and len(read) > 8  # (several pages)
    if backend.kind == "sqlite":
        later = [(sql, p) for sql, p in executed if "(originator_id, originator_version) >" in sql]
        assert later
        import sqlite3

        raw = sqlite3.connect(datastore.pool.db_name)
        for sql, params in later:
            plan = " ".join(r[-1] for r in raw.execute("EXPLAIN QUERY PLAN " + sql, params))
            assert "(originator_id,originator_version)>(?,?)" in plan, plan
        raw.close()


def test_workers_keep_the_builds_lease_however_long_they_take(app: Any, backend: Any, monkeypatch: Any) -> None:
    """The workers write their rows under the rebuilding process's lease, which writes nothing meanwhile: each
    worker's transaction moves the lease's expiry on (SQLite's leases expire; PostgreSQL's are the session's), so
    a build longer than the lease's time to live — every build here, with a time to live of a millisecond — is
    not refused halfway as if its rebuild had died."""
    record(app, 12, [(i, {"type": "send_message", "text": f"m{i}"}) for i in range(24)])
    suffix = uuid.uuid4().hex[:6]
    by_log, by_workers = renamed(ChatViews, app, f"l{suffix}"), renamed(ChatViews, app, f"w{suffix}")
    rebuild(app, by_log, backend, streamwise=False)
    monkeypatch.setattr(streamwise, "FLUSH_ROWS", 2)  # (many transactions per worker)
    monkeypatch.setattr(backend, "LEASE_TTL", 0.001)
    result = rebuild(app, by_workers, backend, workers=2)
    assert (result.streamwise, result.workers) == (True, 2)
    assert read_build(backend, by_workers) == read_build(backend, by_log)
