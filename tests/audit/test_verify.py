"""``events verify`` and ``events stats`` on SQLite and PostgreSQL: a clean ledger verifies (views equal
the fold, or their lag is reported); one corrupted payload and one corrupted topic are reported exactly,
with stream and version, and nothing else; a version gap is reported."""

from __future__ import annotations

import json
import uuid
from collections import Counter

from eventsourcing.persistence import StoredEvent

from ledger.base import TOPICS
from ledger.store import open_app
from projections.chats import ChatViews
from tests.audit.kit import cli, scenario
from tests.catalog.kit import ALICE, ORG, run
from tests.store.rawdb import RawDB


def _two_chats(db_url):
    app = open_app(db_url)
    try:
        a = scenario(app)
        b = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="second")["chat_id"]
        run(app, type="send_message", chat_id=b, text="queued one")
        run(app, type="finish_turn", chat_id=b)
        head = app.head()
    finally:
        app.close()
    return a, b, head


def test_a_clean_ledger_verifies_and_views_equal_the_fold(db_url):
    a, b, head = _two_chats(db_url)
    cli(db_url, "projections", "catch-up")
    report = json.loads(cli(db_url, "events", "verify", "--json").stdout)
    assert report["ok"] is True and report["anomalies"] == []
    assert report["events"] == head
    views = {p["projection"]: p for p in report["projections"]}
    assert views["chat_views"]["result"] == "equal" and views["chat_views"]["lag"] == 0
    assert views["chat_views"]["rows_compared"] >= 2
    assert views["conversations"]["result"] == "equal"
    assert views["org_models"]["result"] == "equal" and views["org_models"]["rows_compared"] >= 2
    out = cli(db_url, "events", "verify").output
    assert out.splitlines()[-1] == "OK" and f"verified {head} events" in out


def test_lagging_views_are_compared_at_their_position_and_their_lag_reported(db_url):
    a, b, head = _two_chats(db_url)
    cli(db_url, "projections", "catch-up")
    app = open_app(db_url)
    try:
        run(app, type="send_message", chat_id=b, text="after the views")  # b is waiting: a new turn
    finally:
        app.close()
    report = json.loads(cli(db_url, "events", "verify", "--json").stdout)
    assert report["ok"] is True
    views = {p["projection"]: p for p in report["projections"]}
    assert views["chat_views"]["lag"] == 1 and views["chat_views"]["position"] == head
    assert views["chat_views"]["result"] == "equal"


def test_a_corrupted_payload_and_topic_are_reported_exactly(db_url):
    a, b, head = _two_chats(db_url)
    cli(db_url, "projections", "catch-up")
    raw = RawDB(db_url)
    raw.rewrite(uuid.UUID(a), 3, lambda p: p.update(messages="not a list"))
    raw.set_topic(uuid.UUID(b), 2, "chat-ledger:chat.NoSuchEvent")
    result = cli(db_url, "events", "verify", "--json", code=1)
    report = json.loads(result.stdout)
    assert report["ok"] is False
    got = sorted((x["stream_id"], x["version"], x["check"]) for x in report["anomalies"])
    # each edit also breaks its stream's hash chain, at the same version
    assert got == sorted([(a, 3, "decode"), (b, 2, "decode"), (a, 3, "chain"), (b, 2, "chain")])
    reasons = {x["stream_id"]: x["reason"] for x in report["anomalies"] if x["check"] == "decode"}
    assert "chat-ledger:chat.StepCommitted" in reasons[a] and f"in stream {a} at version 3" in reasons[a]
    assert "unknown event topic 'chat-ledger:chat.NoSuchEvent'" in reasons[b]
    assert {p["projection"]: p["result"] for p in report["projections"]}["chat_views"] == "equal"
    text = cli(db_url, "events", "verify", code=1).output
    assert f"stream {a} version 3" in text and f"stream {b} version 2" in text
    assert text.splitlines()[-1] == "FAILED: 4 anomalies"


def test_a_version_gap_is_reported(db_url):
    a, b, head = _two_chats(db_url)
    app = open_app(db_url)
    try:
        stream = app.stream(uuid.UUID(b))
        last = stream[-1]
        stored = app.mapper.to_stored_event(last)
        # the same payload again, two versions later: the stream skips a version
        app.recorder.insert_events([StoredEvent(originator_id=stored.originator_id,
                                                originator_version=last.originator_version + 2,
                                                topic=stored.topic, state=stored.state)])
    finally:
        app.close()
    report = json.loads(cli(db_url, "events", "verify", "--json", "--no-projections", code=1).stdout)
    assert [(x["stream_id"], x["version"], x["check"]) for x in report["anomalies"]] == [
        (b, last.originator_version + 2, "chain"), (b, last.originator_version + 2, "version")]
    assert report["projections"] == []


def test_stats_counts_per_topic_and_class_version(db_url):
    a, b, head = _two_chats(db_url)
    app = open_app(db_url)
    try:
        expected = Counter(type(e).TOPIC for _, e in app.iter_events())
    finally:
        app.close()
    rows = [json.loads(line) for line in cli(db_url, "events", "stats", "--json").output.splitlines()]
    assert {r["topic"]: r["count"] for r in rows} == dict(expected)
    # every event was written by the current code: stored at the class's version
    assert all(r["class_version"] == r["code_class_version"] == TOPICS[r["topic"]].class_version and r["known"]
               for r in rows)
    assert sum(r["count"] for r in rows) == head
    assert cli(db_url, "events", "stats").output.splitlines()[-1] == f"total {head}"


#: the chat_status table of the chat views' build (named by the projection's version)
TABLE = f"chat_views_v{ChatViews.version}_chat_status"


def test_a_view_row_that_disagrees_with_the_fold_is_reported(db_url):
    a, b, head = _two_chats(db_url)
    cli(db_url, "projections", "catch-up")
    raw = RawDB(db_url)
    if raw.db.backend == "sqlite":
        with raw._sqlite() as conn:
            conn.execute(f"UPDATE {TABLE} SET title = 'tampered' WHERE chat_id = ?", (a,))
    else:
        with raw._pg() as conn:
            conn.execute(f'UPDATE "{raw.db.schema}".{TABLE} SET title = %s WHERE chat_id = %s',
                         ("tampered", a))
    result = cli(db_url, "events", "verify", "--json", code=1)
    report = json.loads(result.stdout)
    (anomaly,) = report["anomalies"]
    assert anomaly["check"] == "projection" and anomaly["stream_id"] == a
    assert anomaly["table"] == "chat_status" and "title" in anomaly["reason"] and "tampered" in anomaly["reason"]
