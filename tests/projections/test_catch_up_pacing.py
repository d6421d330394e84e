"""Log-order catch-up with growing windows (``projections.pacing``) and canonical rows (``Upsert.canonical``), on
SQLite and PostgreSQL: incremental catch-ups at random batch sizes, growth settings and commit points are exact
at every committed position and end equal to a stream-wise rebuild and to the replayed states."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from projections import MemoryStore, ProjectionError, catch_up, notes, pacing, rebuild
from projections.chats import ChatViews
from projections.engine import BIGINT, BOOLEAN, INTEGER, JSON, REAL, TEXT, TIMESTAMP, Column, Table, Upsert, ViewState
from tests.projections.projection_kit import read_build
from tests.projections.test_chat_views import ACTIONS, record, renamed, replayed_rows

PROPERTY = settings(max_examples=8, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def rows_at(app: Any, position: int) -> dict[str, list[dict[str, Any]]]:
    """The chat views as a single batch over every chat event up to ``position`` gives them (the oracle)."""
    topics = set(ChatViews.topics)
    found = [n for n in app.recorder.select_notifications(start=1, limit=1 << 30, stop=position)
             if n.topic in topics]
    return MemoryStore.run(ChatViews(app), [app.mapper.to_domain_event(n) for n in found])


@PROPERTY
@given(n_chats=st.integers(1, 5),
       segments=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 4), ACTIONS), max_size=12),
                                   st.one_of(st.none(), st.integers(1, 9)), st.integers(1, 3),
                                   st.sampled_from([2, 4, 16]), st.sampled_from([0.0, 100.0])),
                         min_size=1, max_size=4))
def test_incremental_catch_up_is_exact_at_each_commit_and_equals_a_rebuild(
        app: Any, backend: Any, monkeypatch: Any, n_chats: int, segments: list[Any]) -> None:
    """Each segment records some commands, then catches up with a fixed batch size or growing windows (from
    a first window of 1-3, by steps up to 2-16x; time limit 0: every batch counts as slow, so the window
    shrinks back to the first)."""
    p = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    version = p.version
    created = False
    for steps, batch, first, step, seconds in segments:
        if not created:
            record(app, n_chats, steps)
            created = True
        else:
            record_more(app, steps)
        monkeypatch.setattr(pacing, "DEFAULT_BATCH", first)
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


def windows_read(monkeypatch: Any) -> list[int]:
    """The size of each window a log-order run reads from now on."""
    seen: list[int] = []
    read = pacing.Pace.read

    def spy(self: Any, *args: Any) -> Any:
        seen.append(self.window)
        return read(self, *args)

    monkeypatch.setattr(pacing.Pace, "read", spy)
    return seen


def test_a_catch_up_far_behind_commits_growing_windows(app: Any, backend: Any, monkeypatch: Any) -> None:
    """Far behind, the windows grow (fewer transactions); near the head they are the batch size again."""
    record(app, 30, [(i, {"type": "send_message", "text": f"m{i}"}) for i in range(60)])
    monkeypatch.setattr(pacing, "BATCH_SECONDS", 100.0)
    monkeypatch.setattr(pacing, "DEFAULT_BATCH", 2)
    p = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    windows = windows_read(monkeypatch)
    commits: list[int] = []
    catch_up(app, p, backend, progress=lambda done, total: commits.append(done))
    # (windows holding no chat event, the organization's first, commit with the next: no growth step)
    grown = [w for w in windows if w > 2]
    assert grown and 3 <= grown[0] <= 2 * pacing.GROWTH_STEP and max(windows) <= pacing.MAX_BATCH
    assert len(commits) - 1 < app.head() // 2  # windows of 2 would take at least head / 2 transactions
    assert read_build(backend, p) == replayed_rows(app)["chat_views"]
    record(app, 3, [])  # three more chats (a few notifications each)
    windows.clear()
    catch_up(app, p, backend)
    assert windows and set(windows) == {2}  # near the head: 2 at a time
    assert read_build(backend, p) == replayed_rows(app)["chat_views"]
    # a batch size given is fixed: windows of that size however far behind
    fixed = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    windows.clear()
    catch_up(app, fixed, backend, batch_size=3)
    assert len(windows) >= app.head() // 3 and set(windows) == {3}
    assert read_build(backend, fixed) == read_build(backend, p)


@given(base=st.integers(1, 1000),
       events=st.lists(st.tuples(st.floats(0, 10), st.integers(0, 10**7), st.integers(0, 200 << 20)), max_size=40))
def test_the_window_stays_between_the_batch_size_and_its_limit(base: int, events: list[Any]) -> None:
    assert pacing.Pace(base).max == base  # a batch size given: fixed
    pace = pacing.Pace()
    pace.base = pace.window = base  # (as if DEFAULT_BATCH were base)
    assert pace.max == pacing.MAX_BATCH
    for seconds, lag, size in events:
        before = pace.window
        pace.bytes = size  # (what ``read`` records of the window it read)
        pace.done(seconds, lag)
        assert base <= pace.window <= pace.max
        if pace.window > before:  # grows only when fast, small and far behind, by 1.5x to GROWTH_STEP x
            assert seconds <= pace.seconds / 1.5 and size <= pace.max_bytes / 1.5 and lag > 2 * before
            assert int(1.5 * before) <= pace.window <= pacing.GROWTH_STEP * before or pace.window == pace.max
            # at this batch's rates, the next one fits the time and the byte budgets
            assert seconds * pace.window / before <= pace.seconds * 1.001
            assert size * pace.window / before <= pace.max_bytes * 1.001
        if seconds > 2 * pace.seconds or size > 2 * pace.max_bytes:
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


@PROPERTY
@given(steps=st.lists(st.tuples(st.integers(0, 2), ACTIONS), max_size=15),
       windows=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(1, 70), st.booleans()),
                        min_size=1, max_size=5))
def test_a_window_of_the_log_reads_as_the_librarys(app: Any, backend: Any, steps: list[Any],
                                                   windows: list[Any]) -> None:
    """``notes.read_window`` gives the notifications ``select_notifications`` gives (ids, streams, versions,
    topics, payloads, order), with or without a topic filter."""
    record(app, 3, steps)
    head = app.head()
    for after, span, limit, filtered in windows:
        after = min(after, head)
        stop = min(after + span, head)
        topics = list(ChatViews.topics) if filtered else None
        ours = notes.read_window(app, after, stop, limit, topics)
        theirs = app.recorder.select_notifications(start=after, limit=limit, stop=stop, topics=topics or (),
                                                   inclusive_of_start=False)
        assert [(n.id, n.originator_id, n.originator_version, n.topic, bytes(n.state)) for n in ours] == \
            [(n.id, n.originator_id, n.originator_version, n.topic, bytes(n.state)) for n in theirs]


def test_windows_do_not_grow_past_the_byte_budget(app: Any, backend: Any, monkeypatch: Any) -> None:
    """Large stored events keep the window (and the memory of a batch) small: over the budget, no growth."""
    record(app, 30, [(i, {"type": "send_message", "text": f"m{i}"}) for i in range(60)])
    monkeypatch.setattr(pacing, "BATCH_SECONDS", 100.0)
    monkeypatch.setattr(pacing, "BATCH_BYTES", 1)  # every window of events is "too large"
    monkeypatch.setattr(pacing, "DEFAULT_BATCH", 2)
    p = renamed(ChatViews, app, uuid.uuid4().hex[:6])
    windows = windows_read(monkeypatch)
    catch_up(app, p, backend)
    assert len(windows) >= app.head() // 2 and set(windows) == {2}
    assert read_build(backend, p) == replayed_rows(app)["chat_views"]


def test_canonical_rows_keep_the_limits_event_data_can_break() -> None:
    """On the write path (no full check), a canonical row's integers and timestamps are still vetted: out of
    range is refused as normalization refuses it (SQLite would store it), another zone is converted to UTC."""
    from datetime import timedelta

    store = MemoryStore([TABLE])
    state = ViewState(store.tables, store, check_canonical=False)
    with pytest.raises(ProjectionError, match=r"column n \(integer\): 2147483648 is out of range"):
        state.apply(Upsert("t", {**GOOD, "n": 2**31}, True))
    east = datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    state.apply(Upsert("t", {**GOOD, "at": east}, True))
    state.flush()
    [row] = store.rows("t")
    assert row == GOOD and row["at"].tzinfo is timezone.utc


_VALUES = st.one_of(st.none(), st.text(max_size=3), st.integers(-2**70, 2**70), st.booleans(), st.floats(allow_nan=False),
                    st.datetimes(timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=2))])),
                    st.datetimes(), st.uuids(), st.lists(st.integers(), max_size=2), st.just({"x": 1}))
NULLABLE = Table("u", [Column("k", TEXT), Column("s", TEXT), Column("n", INTEGER), Column("big", BIGINT),
                       Column("r", REAL), Column("b", BOOLEAN, False), Column("j", JSON), Column("at", TIMESTAMP)],
                 primary_key=["k"])


@settings(max_examples=400, deadline=None)
@example(table=NULLABLE, changes={"at": datetime(2026, 1, 1)}, dropped=set())  # naive
@example(table=NULLABLE, changes={"at": datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2)))}, dropped=set())
@example(table=NULLABLE, changes={"n": True, "j": ""}, dropped=set())
@example(table=NULLABLE, changes={"big": 2**63}, dropped=set())
@example(table=NULLABLE, changes={"b": None}, dropped=set())
@example(table=NULLABLE, changes={}, dropped=set())
@given(table=st.sampled_from([TABLE, NULLABLE]), changes=st.dictionaries(
    st.sampled_from(["k", "s", "n", "big", "r", "b", "j", "at", "extra"]), _VALUES, max_size=2),
    dropped=st.sets(st.sampled_from(["k", "n", "at"]), max_size=1))
def test_the_canonical_test_says_what_normalization_says(table: Table, changes: dict[str, Any],
                                                         dropped: set[str]) -> None:
    """``Table.is_canonical`` (generated per table: what every stream-wise build checks each row with) is true
    exactly when the row has every column and no other and each value is what its column's normalization gives
    back as the very same object (a canonical row with a value or two changed, a column dropped or added)."""
    base = {**{c.name: None for c in table.columns}, **{k: v for k, v in GOOD.items() if k in table.column_names},
            "b": False, "j": None}
    row = {k: v for k, v in {**base, **changes}.items() if k not in dropped}
    by_definition = row.keys() == set(table.column_names)
    for c in table.columns:
        if not by_definition:
            break
        try:
            by_definition = c.normalize(row[c.name]) is row[c.name]
        except ProjectionError:
            by_definition = False
    assert table.is_canonical(row) is by_definition
