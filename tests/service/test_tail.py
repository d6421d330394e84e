"""The log watcher's tail (``commands.http.watch``): the notifications every stream of a process filters in
memory. It must hold every notification after its floor, in log order, however pages arrive and however
often it is trimmed; a position below the floor is told to read the database instead. And a stream that
starts far behind (pages from the database) goes on into the tail without losing or repeating an event."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commands.http import watch
from commands.http.watch import LogWatcher, Tailed
from ledger.store import open_app
from tests.service.server import sse_events


def _tailed(i: int) -> Tailed:
    return Tailed(i, uuid.UUID(int=i), None, None, "E", "{}")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('tail')}/tail.db"
    a = open_app(url)
    yield a, url
    a.close()


@settings(max_examples=300, deadline=None)
@given(gaps=st.lists(st.tuples(st.lists(st.integers(1, 3), max_size=12), st.booleans()), max_size=25),
       tail=st.integers(1, 8), probes=st.lists(st.integers(0, 400), max_size=20))
def test_the_tail_holds_every_notification_after_its_floor(app, monkeypatch_module, gaps, tail, probes):
    """Pages of increasing ids (with gaps: ids a sequence skipped) as the thread reads them, or (``skip``)
    jumps to a new head without reading, as it does while no stream is open."""
    a, url = app
    monkeypatch_module.setattr(watch, "TAIL", tail)
    w = LogWatcher(a, url)
    w._event = None
    ids, last = [], w.head
    for page, skip in gaps:
        batch = []
        for gap in page:
            last += gap
            batch.append(last)
        if skip:
            w._extend(last, [], reset=bool(batch))
            continue
        ids += batch
        w._extend(last if batch else w.head, [_tailed(i) for i in batch])
        assert len(w.tail) <= 2 * tail or w.floor == w.head  # trimmed now and then
    assert w.head == last
    for p in [*probes, w.floor, w.head, *ids]:
        got = w.since(p)
        if p < w.floor:
            assert got is None
        else:  # every one after p, in order (ids skipped over are below the floor)
            assert [t.id for t in got] == [i for i in ids if i > p]


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_a_stream_from_the_start_goes_on_into_the_tail(world):
    """A stream from before the server started (the database's pages) reaches the tail and goes on with the
    events recorded while it is open: every event of the chat once, in log order."""
    with world.client("admin", timeout=30.0) as c:
        received: list[int] = []
        with c.stream("GET", "/v1/events/stream", params={"chat": world.chat_b, "after": 0}) as r:
            events = sse_events(r)
            before = c.get("/v1/events", params={"chat": world.chat_b, "limit": 1000}).json()["events"]
            for _ in before:
                received.append(json.loads(next(events)["data"])["notification_id"])
            for i in range(5):
                assert c.post("/v1/commands", json={"type": "set_title", "chat_id": world.chat_b,
                                                    "title": f"t{i}"}).json()["ok"]
                received.append(json.loads(next(events)["data"])["notification_id"])
        logged = [e["notification_id"] for e in c.get("/v1/events", params={
            "chat": world.chat_b, "limit": 1000}).json()["events"]]
        assert received == logged and len(logged) == len(before) + 5
