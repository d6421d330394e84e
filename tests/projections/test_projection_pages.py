"""How the runner pages through the log: windows of notification ids, sparse projections committing only
where they have events (and at the head), and the cyclic collector paused per page and restored."""

from __future__ import annotations

import gc
import threading
from typing import Any

from projections import MemoryStore, catch_up
from projections import runner
from tests.projections.projection_kit import ItemSet, Items, Noted, Writer, all_events, read_build, renamed


def _counting(backend: Any) -> list[tuple[int, int | None]]:
    """Record each committed batch as (events in it, upto)."""
    calls: list[tuple[int, int | None]] = []
    original = backend.apply_batch

    def apply_batch(projection: Any, version: int, items: Any, upto: int | None = None, **kw: Any) -> int:
        calls.append((len(items), upto))
        return original(projection, version, items, upto=upto, **kw)

    backend.apply_batch = apply_batch
    return calls


def test_pages_are_windows_of_ids_and_empty_windows_commit_nothing(app: Any, backend: Any) -> None:
    w = Writer(app)
    w.save([w.event(ItemSet, 0, key="a", value=1, tag="t")])
    w.save([w.event(Noted, 1, text=str(i)) for i in range(40)])  # 40 notifications not for Items
    w.save([w.event(ItemSet, 0, key="b", value=2, tag="t"), w.event(ItemSet, 2, key="c", value=3, tag="t")])
    w.save([w.event(Noted, 1, text=f"tail {i}") for i in range(12)])
    head = app.head()
    p = renamed(Items)
    calls = _counting(backend)
    assert catch_up(app, p, backend, batch_size=5) == 3
    # Every page is the next window of 5 ids; only windows holding Items events are committed, plus
    # the last one (the position reaches the head: no lag from trailing notifications).
    assert all(upto is not None and (upto % 5 == 0 or upto == head) for _, upto in calls)
    assert [n for n, _ in calls[:-1]] and all(n > 0 for n, _ in calls[:-1])
    assert calls[-1] == (0, head)
    assert len(calls) < head // 5
    assert backend.position(p.name, p.version) == head
    assert read_build(backend, p) == MemoryStore.run(Items(), all_events(app))


def test_collector_pause_nests_across_threads_and_restores_the_previous_state() -> None:
    assert gc.isenabled()
    inner_started, release = threading.Event(), threading.Event()

    def other() -> None:
        with runner._collector_paused():
            inner_started.set()
            release.wait(5)

    with runner._collector_paused():
        assert not gc.isenabled()
        t = threading.Thread(target=other)
        t.start()
        inner_started.wait(5)
    assert not gc.isenabled(), "another thread's pause is still open"
    release.set()
    t.join(5)
    assert gc.isenabled()

    gc.disable()  # someone turned the collector off: a pause must not turn it on
    try:
        with runner._collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()

    try:
        with runner._collector_paused():
            raise KeyError("boom")
    except KeyError:
        pass
    assert gc.isenabled()
