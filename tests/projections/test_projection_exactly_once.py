"""Exactly once: view rows and the tracking position move together or not at all (SQLite and Postgres)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.projections.projection_kit import (
    GroupCleared, GroupRetagged, GroupShifted, ItemRemoved, Items, ItemSet, Noted, Writer, all_events, read_build,
    renamed,
)
from projections import BuildBusy, MemoryStore, PositionConflict, ProjectionError, catch_up, maintained_version


class Crash(Exception):
    pass


def crashing(projection: Any, at: int) -> Any:
    """The same projection, raising ``Crash`` on its ``at``-th apply call (a crash mid-batch)."""
    calls = {"n": 0}
    original = projection.apply

    def apply(event: Any, rows: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == at:
            raise Crash(f"simulated crash at call {at}")
        return original(event, rows)

    projection.apply = apply  # instance attribute: the class (and its fingerprint) are unchanged
    return projection


def drive(app: Any, backend: Any, p: Any, version: int, schedule: list[tuple[str, int]]) -> None:
    """Apply the log to build ``version`` of ``p`` by ``schedule``: ("batch", n) applies the next n
    notifications; ("crash", n) applies them with a crash at the last event ``p`` handles (the same
    instance, so whatever it keeps in memory was advanced by the failed batch) and checks that the
    position and rows did not move; ("redeliver", n) re-sends the last n and checks the refusal."""
    position = 0
    for action, size in schedule:
        items = decoded(app, position, size, p)
        handled = sum(type(e).TOPIC in p.topics for _, e in items)
        if action == "redeliver" and position > 0:
            before = read_build(backend, p, version)
            with pytest.raises(PositionConflict):
                backend.apply_batch(p, version, decoded(app, max(position - size, 0), size, p))
            assert read_build(backend, p, version) == before
        elif action == "crash" and handled:
            before = read_build(backend, p, version)
            with pytest.raises(ProjectionError, match="simulated crash"):
                backend.apply_batch(crashing(p, at=handled), version, items)
            del p.apply  # heal: back to the class's apply, same in-memory state
            assert backend.position(p.name, version) == position
            assert read_build(backend, p, version) == before
        elif items:
            position = backend.apply_batch(p, version, items)


def decoded(app: Any, start: int, limit: int, projection: Any = None) -> list[tuple[int, Any]]:
    """The notifications as the runner gives them to ``projection`` (``Projection.decoder``)."""
    decode = app.mapper.to_domain_event if projection is None else projection.decoder(app)
    return [(n.id, decode(n)) for n in app.notifications(start, limit)]


def test_redelivered_batch_is_refused_and_view_unchanged(app: Any, backend: Any) -> None:
    w = Writer(app)
    w.save(w.items(n_groups=2, per_group=5))  # 11 events
    p = renamed(Items)
    version = maintained_version(p, backend)
    assert backend.apply_batch(p, version, decoded(app, 0, 6)) == 6
    before = read_build(backend, p, version)
    for start in (0, 3, 5):  # a batch starting at or below the position: refused, nothing written
        with pytest.raises(PositionConflict, match="already applied"):
            backend.apply_batch(p, version, decoded(app, start, 4))
    with pytest.raises(PositionConflict):
        backend.apply_batch(p, version, [], upto=6)
    assert backend.position(p.name, version) == 6
    assert read_build(backend, p, version) == before
    assert backend.apply_batch(p, version, decoded(app, 6, 100)) == app.head()


def test_crash_mid_batch_keeps_previous_position_and_rows(app: Any, backend: Any) -> None:
    w = Writer(app)
    w.save(w.items(n_groups=2, per_group=4))
    w.save([w.event(GroupShifted, 0, delta=5), w.event(GroupCleared, 1), w.event(ItemSet, 1, key="z", value=1, tag="x")])
    p = renamed(Items)
    version = maintained_version(p, backend)
    backend.apply_batch(p, version, decoded(app, 0, 4))
    before = read_build(backend, p, version)
    # The crash comes after GroupShifted/GroupCleared, whose filtered reads flushed rows inside the transaction.
    crashing(p, at=app.head() - 4 - 1)
    with pytest.raises(ProjectionError, match="simulated crash") as info:
        backend.apply_batch(p, version, decoded(app, 4, 100))
    assert isinstance(info.value.__cause__, Crash)
    assert backend.position(p.name, version) == 4
    assert read_build(backend, p, version) == before
    # Resuming (with a healthy projection) gives what one uninterrupted run gives.
    healthy = type(p)()
    backend.apply_batch(healthy, version, decoded(app, 4, 100))
    expected = MemoryStore.run(Items(), all_events(app))
    assert read_build(backend, p, version) == expected


def test_catch_up_then_more_events(app: Any, backend: Any) -> None:
    w = Writer(app)
    w.save(w.items())
    p = renamed(Items)
    seen: list[tuple[int, int]] = []
    applied = catch_up(app, p, backend, batch_size=4, progress=lambda done, total: seen.append((done, total)))
    head = app.head()
    assert applied == head - 1  # the Noted event is filtered out by topic
    assert seen[0] == (0, head) and seen[-1] == (head, head)
    assert backend.live_version(p.name) == p.version  # the first build goes live once caught up
    w.save([w.event(ItemRemoved, 0, key="k1"), w.event(Noted, 2, text="x"), w.event(Noted, 2, text="y")])
    assert catch_up(app, p, backend) == 1
    # Trailing notifications not for this projection still move its position to the head (no lag).
    assert backend.position(p.name, p.version) == app.head()
    assert read_build(backend, p) == MemoryStore.run(Items(), all_events(app))
    assert catch_up(app, p, backend) == 0


_event_strategy = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 2), st.sampled_from("abcd"), st.integers(-50, 50)),
    st.tuples(st.just("remove"), st.integers(0, 2), st.sampled_from("abcd")),
    st.tuples(st.just("clear"), st.integers(0, 2)),
    st.tuples(st.just("shift"), st.integers(0, 2), st.integers(-3, 3)),
    st.tuples(st.just("retag"), st.integers(0, 2), st.sampled_from(["p", "q"])),
    st.tuples(st.just("note"), st.integers(0, 2)),
)


def _to_event(w: Writer, spec: tuple[Any, ...]) -> Any:
    kind, g = spec[0], spec[1]
    if kind == "set":
        return w.event(ItemSet, g, key=spec[2], value=spec[3], tag="t")
    if kind == "remove":
        return w.event(ItemRemoved, g, key=spec[2])
    if kind == "clear":
        return w.event(GroupCleared, g)
    if kind == "shift":
        return w.event(GroupShifted, g, delta=spec[2])
    if kind == "retag":
        return w.event(GroupRetagged, g, tag=spec[2])
    return w.event(Noted, g, text="n")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(
    saves=st.lists(st.lists(_event_strategy, min_size=1, max_size=6), min_size=1, max_size=6),
    schedule=st.lists(st.tuples(st.sampled_from(["batch", "crash", "redeliver"]), st.integers(1, 9)),
                      min_size=1, max_size=12),
)
def test_interrupted_incremental_run_equals_full_rebuild(app: Any, backend: Any, saves: list[Any],
                                                         schedule: list[tuple[str, int]]) -> None:
    """Random batch sizes, crashes mid-batch and re-delivered positions, then resume: the view equals
    one uninterrupted catch-up from zero and the pure in-memory run over the same events."""
    w = Writer(app)
    for save in saves:  # several transactions, so notification ids interleave with earlier examples'
        w.save([_to_event(w, s) for s in save])
    p = renamed(Items)
    version = maintained_version(p, backend)
    drive(app, backend, p, version, schedule)
    catch_up(app, p, backend, batch_size=7)  # resume to the head
    full = renamed(Items)
    catch_up(app, full, backend, batch_size=1000)
    incremental = read_build(backend, p, version)
    assert incremental == read_build(backend, full)
    assert incremental == MemoryStore.run(Items(), all_events(app))


def test_two_writers_of_one_build_stay_exactly_once(db_url: str, app: Any, backend: Any) -> None:
    """Two backends (as two processes would) alternate on one build: each refuses what the other
    applied, and neither trusts rows it cached before the other wrote (the totals depend on them); during a
    catch-up the other is refused while the catch-up holds the lease and may write between its batches."""
    from projections import open_backend

    w = Writer(app)
    w.save(w.items(n_groups=2, per_group=6))
    w.save([w.event(GroupShifted, 0, delta=3), w.event(ItemSet, 0, key="k1", value=100, tag="z")])
    p = renamed(Items)
    version = maintained_version(p, backend)
    other = open_backend(db_url)
    try:
        position, turn = 0, 0
        while position < app.head():
            b = (backend, other)[turn % 2]
            items = decoded(app, position, 3)
            position = b.apply_batch(p, version, items)
            with pytest.raises(PositionConflict):  # the same batch again, through the other backend
                (other, backend)[turn % 2].apply_batch(p, version, items)
            turn += 1
        # catch_up beside another writer: the other applies a batch between each two of ours (catch-up
        # holds the build's lease one batch at a time), and while one of ours holds the lease the other
        # is refused (BuildBusy, nothing written). Each of our batches reads the position under the lease,
        # so none of them is refused for being stale, and nothing is applied twice or skipped.
        w.save([w.event(ItemSet, g, key=f"n{i}", value=i, tag="n") for i in range(6) for g in (0, 1)])
        start = backend.position(p.name, version)
        interleaved, busy, refused = [], [], []

        def interfere(done: int, total: int) -> None:
            pos = other.position(p.name, version)
            if 0 < done < total and pos < app.head():
                interleaved.append(other.apply_batch(p, version, decoded(app, pos, 2)))

        apply_batch = backend.apply_batch

        def counting(projection: Any, v: int, items: Any, **kwargs: Any) -> int:
            if items:  # our lease is held here: the other writer cannot write
                with pytest.raises(BuildBusy, match="being written by catch-up"):
                    other.apply_batch(projection, v, items, upto=kwargs.get("upto"))
                busy.append(items[0][0])
            try:
                return apply_batch(projection, v, items, **kwargs)
            except PositionConflict:
                refused.append(items)
                raise

        backend.apply_batch = counting
        try:
            catch_up(app, p, backend, batch_size=2, progress=interfere)
        finally:
            del backend.apply_batch
        assert interleaved and busy, "the writers never met"
        assert refused == []
        assert backend.position(p.name, version) == app.head() > start
        assert read_build(backend, p) == MemoryStore.run(Items(), all_events(app))
    finally:
        other.close()
