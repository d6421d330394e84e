"""The two rules a save keeps (issue 13 points 1 and 7), as properties.

* A save whose reply was lost is settled from the rows at the versions it wrote: whatever else the store
  holds, it is ``recorded`` exactly when it committed, ``absent`` when it did not and nobody took its
  versions, and ``conflict`` when another writer took them.
* A decision's dependencies are checked at commit, on the real store (SQLite and PostgreSQL): the save of
  a unit of work that read some streams and writes another fails with ``DependencyChanged`` — recording
  nothing — exactly when another application wrote (or created) one of the streams it read between the
  read and the commit, and names exactly those streams.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.uow import UnitOfWork, in_doubt_outcome
from ledger.base import Emitter
from ledger.chat import decide as d
from ledger.recorders import DependencyChanged
from ledger.store import open_app
from tests.store.test_store import cmd, create, new_org

STREAMS = [uuid.UUID(int=i + 1) for i in range(4)]
rows = st.tuples(st.sampled_from(STREAMS), st.integers(1, 4), st.sampled_from(["a", "b"]), st.binary(max_size=3))


@given(existing=st.lists(rows, max_size=8), save=st.lists(rows, min_size=1, max_size=3),
       fate=st.sampled_from(["committed", "rolled back", "taken"]), other=st.binary(min_size=4, max_size=4))
def test_a_lost_save_is_settled_by_what_is_at_its_versions(existing: list[Any], save: list[Any], fate: str,
                                                           other: bytes) -> None:
    wrote = [StoredEvent(originator_id=s, originator_version=v, topic=t, state=b) for s, v, t, b in
             {(s, v): (s, v, t, b) for s, v, t, b in save}.values()]
    keys = {(e.originator_id, e.originator_version) for e in wrote}
    store = {(s, v): (t, b) for s, v, t, b in existing if (s, v) not in keys}  # a save's versions were free
    if fate == "committed":
        store.update({(e.originator_id, e.originator_version): (e.topic, e.state) for e in wrote})
    elif fate == "taken":  # another writer's events (their payloads differ: 4 bytes, ours at most 3)
        store.update({k: ("a", other) for k in keys})
    found = {k: row for k, row in store.items() if k in keys}  # what the read-back returns
    expected = {"committed": "recorded", "rolled back": "absent", "taken": "conflict"}[fate]
    assert in_doubt_outcome(wrote, found) == expected


@pytest.fixture
def apps(db_url: str) -> Any:
    mine, other = open_app(db_url), open_app(db_url)
    yield mine, other
    mine.close()
    other.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reads=st.sets(st.integers(0, 3), min_size=1), absent=st.booleans(),
       writes=st.sets(st.integers(0, 4)))
def test_a_save_fails_exactly_when_a_stream_it_read_moved(apps: Any, reads: set[int], absent: bool,
                                                          writes: set[int]) -> None:
    mine, other = apps
    org = new_org(mine)
    chats = [create(mine, org) for _ in range(4)]
    written = create(mine, org)
    missing = uuid.uuid4()  # index 4: a stream the decision found absent (when ``absent``)
    streams = [*chats, missing]
    read = {streams[i] for i in reads} | ({missing} if absent else set())

    uow = UnitOfWork(mine)
    for sid in read:
        uow.get(sid)
    target = uow.get(written)
    uow.record(target, d.set_title(target.state, Emitter(written, target.version, uow.now, None, None),
                                   title="decided"))
    for i in writes:  # another process, between the decision and its commit
        if streams[i] == missing:
            create(other, org, chat_id=missing)
        else:
            cmd(other, type="set_title", chat_id=streams[i], title="moved")
    moved = read & {streams[i] for i in writes}
    if moved:
        with pytest.raises(DependencyChanged) as failed:
            uow.commit()
        assert set(failed.value.stale) == moved
        assert mine.load(written).version == 1  # nothing recorded
    else:
        uow.commit()
        assert mine.load(written).state.title == "decided"
