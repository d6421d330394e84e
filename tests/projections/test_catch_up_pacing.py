"""Log-order catch-up with growing windows (``projections.pacing``) and canonical rows (``Upsert.canonical``), on
SQLite and PostgreSQL: incremental catch-ups at random batch sizes, growth settings and commit points are exact
at every committed position and end equal to a stream-wise rebuild and to the replayed states."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import MemoryStore, ProjectionError, catch_up, pacing, rebuild
from projections.chats import ChatViews
from projections.engine import BOOLEAN, INTEGER, JSON, REAL, TEXT, TIMESTAMP, Column, Table, Upsert, ViewState
from tests.projections.projection_kit import read_build
from tests.projections.test_chat_views import ACTIONS, record, renamed, replayed_rows

PROPERTY = settings(max_examples=8, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def rows_at(app: Any, position: int) -> dict[str, list[dict[str, Any]]]:
    """The chat views as a single batch over every chat event up to ``position`` gives them (the oracle)."""
    topics = set(ChatViews.topics)
    notes = [n for n in app.recorder.select_notifications(start=1, limit=1 << 30, stop=position)
             if n.topic in topics]
    return MemoryStore.run(ChatViews(app), [app.mapper.to_domain_event(n) for n in notes])


@PROPERTY
@given(n_chats=st.integers(1, 5),
       segments=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 4), ACTIONS), max_size=12),
                                   st.integers(1, 9), st.sampled_from([1, 2, 4]), st.sampled_from([0.0, 100.0])),
                         min_size=1, max_size=4))
def test_incremental_catch_up_is_exact_at_each_commit_and_equals_a_rebuild(
        app: Any, backend: Any, monkeypatch: Any, n_chats: int, segments: list[Any]) -> None:
    """Each segment records some commands, then catches up with its own batch size and growth (step 1: fixed
    windows; time limit 0: every batch counts as slow, so the window shrinks back to the batch size)."""
    p = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    version = p.version
    created = False
    for steps, batch, step, seconds in segments:
        if not created:
            record(app, n_chats, steps)
            created = True
        else:
            record_more(app, steps)
        monkeypatch.setattr(pacing, "GROWTH_STEP", step)
        monkeypatch.setattr(pacing, "BATCH_SECONDS", seconds)
        positions: list[int] = []

        def exact(done: int, total: int) -> None:
            position = backend.position(p.name, version)
            positions.append(position)
            assert read_build(backend, p, version) == rows_at(app, position)

        before = backend.position(p.name, version)
        catch_up(app, p, backend, batch_size=batch, progress=exact)
        assert backend.position(p.name, version) == app.head()
        # (no progress at all when nothing was recorded since the last catch-up: it returns at once)
        assert positions[-1:] == ([] if before == app.head() else [app.head()])
    assert read_build(backend, p) == replayed_rows(app)["chat_views"]
    by_stream = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    assert rebuild(app, by_stream, backend, streamwise=True).streamwise
    assert read_build(backend, by_stream) == read_build(backend, p)


def record_more(app: Any, steps: list[Any]) -> None:
    """More commands for the chats ``record`` created (step i goes to the i-th chat, modulo their number)."""
    from commands.handler import command_from_dict, execute
    from ledger.errors import LedgerError
    from commands.queries import chat_ids
    from tests.projections.test_chat_views import make_invalid

    ids = [str(c) for c in chat_ids(app)]
    for i, action in steps:
        if action["type"] == "reconcile_invalid_state":
            make_invalid(app, ids[i % len(ids)])
        try:
            execute(app, command_from_dict({"chat_id": ids[i % len(ids)], **action}))
        except LedgerError:
            pass


def test_a_catch_up_far_behind_commits_growing_windows(app: Any, backend: Any, monkeypatch: Any) -> None:
    """Far behind, the windows grow (fewer transactions); near the head they are the batch size again."""
    record(app, 30, [(i, {"type": "send_message", "text": f"m{i}"}) for i in range(60)])
    monkeypatch.setattr(pacing, "BATCH_SECONDS", 100.0)
    p = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    commits: list[int] = []
    catch_up(app, p, backend, batch_size=2, progress=lambda done, total: commits.append(done))
    steps = [b - a for a, b in zip(commits, commits[1:])]
    assert max(steps) > 2 * 4  # 2, 8, 32, ... notifications per transaction
    assert len(steps) < app.head() // 2  # windows of 2 would take at least head / 2 transactions
    assert read_build(backend, p) == replayed_rows(app)["chat_views"]
    record(app, 3, [])  # three more chats (a few notifications each)
    commits.clear()
    catch_up(app, p, backend, batch_size=2, progress=lambda done, total: commits.append(done))
    assert all(b - a <= 2 for a, b in zip(commits, commits[1:])) and len(commits) > 2  # near the head: 2 at a time
    assert read_build(backend, p) == replayed_rows(app)["chat_views"]


@given(base=st.integers(1, 1000), events=st.lists(st.tuples(st.floats(0, 10), st.integers(0, 10**7)), max_size=40))
def test_the_window_stays_between_the_batch_size_and_its_limit(base: int, events: list[Any]) -> None:
    pace = pacing.Pace(base)
    assert pace.max == max(base, min(base * pacing.GROWTH, pacing.MAX_BATCH))
    for seconds, lag in events:
        before = pace.window
        pace.done(seconds, lag)
        assert base <= pace.window <= pace.max
        if pace.window > before:  # grows only when fast and far behind
            assert seconds < pace.seconds and lag > 2 * before
        if seconds > 2 * pace.seconds:
            assert pace.window == max(base, before // 2)


TABLE = Table("t", [Column("k", TEXT), Column("n", INTEGER), Column("r", REAL), Column("b", BOOLEAN),
                    Column("j", JSON), Column("at", TIMESTAMP)], primary_key=["k"])
GOOD = {"k": "a", "n": 1, "r": 1.5, "b": True, "j": {"x": [1, 2.5]}, "at": datetime(2026, 1, 1, tzinfo=timezone.utc)}


@pytest.mark.parametrize("change", [
    {"r": 1}, {"n": True}, {"b": 1}, {"j": {"x": (1, 2.5)}}, {"k": uuid.uuid4()},
    {"at": datetime(2026, 1, 1)}, {"extra": 1},
])
def test_a_row_given_as_canonical_that_is_not_is_refused(change: dict[str, Any]) -> None:
    store = MemoryStore([TABLE])
    state = ViewState(store.tables, store, check_canonical=True)
    state.apply(Upsert("t", dict(GOOD), True))  # the canonical form itself is taken as given
    with pytest.raises(ProjectionError, match="canonical|no column|naive|cannot store"):
        state.apply(Upsert("t", {**GOOD, **change}, True))
    missing = {k: v for k, v in GOOD.items() if k != "b"}
    with pytest.raises(ProjectionError, match="every column"):
        state.apply(Upsert("t", missing, True))
    state.flush()
    assert store.rows("t") == [GOOD]
