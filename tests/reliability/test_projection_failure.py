"""A projection that cannot apply an event stops there, for itself only (issue 13, point 3), on SQLite and
PostgreSQL, with the CLI in real processes.

The event: a chat's ``GenerationAttemptRecorded`` with attempt 2**40, recorded through the store as a writer
without today's rules could have (the chat_status view keeps the attempt in a 32-bit column). Before, the chat
views failed on every catch-up without saying which event, ``projections follow`` stopped following every
projection, and ``events verify`` said OK. Now:

* ``projections follow`` reports chat_views (stream, version, reason) and goes on following the others
  (a conversation recorded afterwards reaches its view), and exits 1 when stopped;
* the chat views hold every event before the poison one (the failing batch was narrowed down to it) and
  ``projections status`` says "failed" with the stream, version and reason;
* a query of the chat views is ``projection_error`` naming them; ``events verify`` reports the event.
"""

from __future__ import annotations

import json
import signal
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from commands.handler import command_from_dict, execute
from ledger.base import Emitter
from ledger.chat import events as ev
from projections import open_backend
from projections.chats import ChatViews
from tests.audit.kit import cli
from tests.chat.helpers import ORG, OWNER, setup_org
from tests.reliability.kit import wait_for
from tests.reliability.test_projection_leases import cli as process, finish

POISON = 2**40


def run(app: Any, **command: Any) -> dict[str, Any]:
    return execute(app, command_from_dict(command))


def record_poison(app: Any, chat_id: str) -> tuple[int, int]:
    """Record the attempt the view cannot store; returns (stream version, notification id)."""
    chat = app.load(UUID(chat_id))
    em = Emitter(chat.id, chat.version, datetime.now(timezone.utc))
    em.emit(ev.GenerationAttemptRecorded, generation_attempt=POISON)
    chat.record(em.events)
    app.save(chat)
    return chat.version, app.head()


def test_a_projection_that_cannot_apply_an_event_stops_alone(db_url: str, app: Any) -> None:
    setup_org(app)
    chats = [run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text=f"chat {i}")["chat_id"]
             for i in range(3)]
    run(app, type="commit_step", chat_id=chats[0],
        messages=[{"role": "assistant", "parts": [{"type": "text", "text": "before"}]}])
    version, poison_at = record_poison(app, chats[1])
    # after the poison event, in the same batch of the chat views: its rows are never written
    run(app, type="commit_step", chat_id=chats[2],
        messages=[{"role": "assistant", "parts": [{"type": "text", "text": "after"}]}])
    conversation = run(app, type="conversation_start")["conversation_id"]
    named = (f"projection chat_views v{ChatViews.version} cannot apply stream {chats[1]} version {version} (notification "
             f"{poison_at}, chat-ledger:chat.GenerationAttemptRecorded): ProjectionError: column generation_attempt "
             f"(integer): {POISON} is out of range")

    follower = process(db_url, "projections", "follow", "--poll", "0.05")
    with open_backend(db_url) as backend:
        wait_for(lambda: ("chat_views", ChatViews.version) in backend.failures() or follower.poll() is not None, 60,
                 "the chat views to stop at the poison event")
        wait_for(lambda: backend.position("conversations", 2) == app.head() or follower.poll() is not None, 60,
                 "the conversations view")
        assert follower.poll() is None, finish(follower)
        # the follower goes on with the other projections
        run(app, type="conversation_arrive", conversation_id=conversation, arrival={"type": "user", "text": "hi"})
        wait_for(lambda: backend.position("conversations", 2) == app.head(), 60, "the follower to go on")
        assert follower.poll() is None
        follower.send_signal(signal.SIGINT)
        code, out, err = finish(follower)
        assert code == 1
        assert f"error: projection_error: no longer following chat_views: {named}" in err
        assert "Traceback" not in err

        # every event before the poison one is in the view; nothing from it on
        position = backend.position("chat_views", ChatViews.version)
        chat_events = [nid for nid, e in app.iter_events(0) if type(e).__module__ == "ledger.chat.events"]
        assert position == max(nid for nid in chat_events if nid < poison_at)
        # (the first build of the chat views never reached the head: it is not live)
        assert backend.live_version("chat_views") is None
        rows = {r["chat_id"]: r for r in backend.query("chat_views", "chat_status", version=ChatViews.version)}
        assert rows[chats[0]]["message_count"] == 2 and rows[chats[2]]["message_count"] == 1
        assert rows[chats[1]]["generation_attempt"] == 0

    statuses = {s["projection"]: s for s in map(json.loads, cli(db_url, "projections", "status", "--json")
                                                 .output.splitlines())}
    assert statuses["chat_views"]["state"] == "failed" and statuses["chat_views"]["error"] == named
    assert statuses["conversations"]["state"] == "live" and statuses["conversations"]["lag"] == 0
    assert f"chat_views: FAILED: {named}" in cli(db_url, "projections", "status").output

    refused = cli(db_url, "status", code=1).output
    assert refused == f"error: projection_error: {named}\n"
    caught = cli(db_url, "projections", "catch-up", code=1).output
    assert "conversations: 0 events applied" in caught and "org_models: 0 events applied" in caught

    report = json.loads(cli(db_url, "events", "verify", "--json", code=1).stdout)
    (anomaly,) = report["anomalies"]
    assert (anomaly["stream_id"], anomaly["version"], anomaly["notification_id"], anomaly["check"],
            anomaly["projection"]) == (chats[1], version, poison_at, "projection", "chat_views")
    assert f"{POISON} is out of range" in anomaly["reason"]
    assert {p["projection"]: p["result"] for p in report["projections"]} == {
        "chat_views": "failed", "conversations": "equal", "org_models": "equal",
        "search": "not checked (no fold known)", "usage": "not checked (no fold known)"}
