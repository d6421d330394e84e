"""The ledger's PostgreSQL reads of stored events (``PostgresLedgerRecorder.select_notifications`` and
``select_events``, in the binary format, their columns named) give what the library's own reads give (``SELECT *``
in the text format): the same rows, in the same order, of the same types, for every bound and filter."""

from __future__ import annotations

import uuid

import pytest
from eventsourcing.postgres import PostgresApplicationRecorder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.tools.workload import generate
from ledger.recorders.postgres import _unretried
from ledger.store import open_app
from tests.conftest import PG_URL, _with_schema, drop_schema, require_pg


@pytest.fixture(scope="module")
def ledger():
    require_pg()
    url = _with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}")
    app = open_app(url)
    generate(app, 400, interleave=5)
    try:
        yield app
    finally:
        app.close()
        drop_schema(url)


def _fields(rows):
    return [(getattr(r, "id", None), r.originator_id, type(r.originator_id), r.originator_version, r.topic,
             bytes(r.state), type(r.state)) for r in rows]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.none() | st.integers(-1, 420), limit=st.integers(0, 450), stop=st.none() | st.integers(0, 420),
       inclusive=st.booleans(), topics=st.sets(st.sampled_from(["chat-ledger:chat.ChatCreated",
                                                                 "chat-ledger:chat.StepCommitted", "nope"])))
def test_notifications_read_in_binary_are_the_librarys(ledger, start, limit, stop, inclusive, topics) -> None:
    recorder = ledger.recorder
    kwargs = dict(stop=stop, topics=sorted(topics), inclusive_of_start=inclusive)
    ours = recorder.select_notifications(start, limit, **kwargs)
    theirs = _unretried(PostgresApplicationRecorder.select_notifications)(recorder, start, limit, **kwargs)
    assert _fields(ours) == _fields(theirs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(0, 1000), gt=st.none() | st.integers(0, 12), lte=st.none() | st.integers(0, 12),
       desc=st.booleans(), limit=st.none() | st.integers(0, 6), as_text=st.booleans())
def test_a_streams_events_read_in_binary_are_the_librarys(ledger, pick, gt, lte, desc, limit, as_text) -> None:
    recorder = ledger.recorder
    streams = sorted({n.originator_id for n in recorder.select_notifications(1, 1000)})
    stream = streams[pick % len(streams)]
    oid = str(stream) if as_text else stream
    kwargs = dict(gt=gt, lte=lte, desc=desc, limit=limit)
    ours = recorder.select_events(oid, **kwargs)
    theirs = _unretried(PostgresApplicationRecorder.select_events)(recorder, oid, **kwargs)
    assert _fields(ours) == _fields(theirs) and (ours or gt is not None or lte is not None or limit == 0)
