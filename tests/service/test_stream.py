"""The live event stream: resume after a dropped connection loses and repeats nothing, while commands
are being recorded (SQLite: polling; PostgreSQL: LISTEN/NOTIFY)."""

from __future__ import annotations

import json
import threading
import time

from tests.service.server import sse_events, take_events

WRITES = 40


def test_resume_after_a_dropped_connection(world):
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with world.client("admin") as c:
                for i in range(WRITES):
                    r = c.post("/v1/commands", json={"type": "set_title", "chat_id": world.chat_b, "title": f"t{i}"})
                    assert r.json()["ok"], r.text
        except BaseException as e:  # reported by the test
            errors.append(e)
        finally:
            done.set()

    received: list[dict] = []
    last_id: str | None = None
    drops = 0
    thread = threading.Thread(target=writer)
    with world.client("admin", timeout=30.0) as c:
        head = c.get("/v1/events", params={"limit": 1}).json()["head"]
        thread.start()
        # read a few events per connection, then drop it; resume from the last id seen
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            params = {} if last_id else {"after": head}
            with c.stream("GET", "/v1/events/stream", params={"chat": world.chat_b, **params}, headers=headers) as r:
                assert r.status_code == 200
                for n, message in enumerate(sse_events(r)):
                    data = json.loads(message["data"])
                    assert int(message["id"]) == data["notification_id"] and message["event"] == data["type"]
                    received.append(data)
                    last_id = message["id"]
                    if n == 6 or len(received) == WRITES:
                        break
            drops += 1
            if len(received) >= WRITES:
                break
    thread.join()
    assert not errors, errors
    with world.client("admin") as c:
        logged = c.get("/v1/events", params={"chat": world.chat_b, "after": head, "limit": 1000}).json()["events"]
    assert drops >= WRITES // 7
    # every event once, in log order, as the log shows it (the stream's own writes are not read back)
    assert received == logged and len(logged) == WRITES


def test_a_stream_filtered_by_organization_follows_new_chats(world):
    from tests.catalog.kit import ALICE, ORG

    with world.client("alice") as c:
        head = c.get("/v1/events", params={"limit": 1}).json()["head"]
        with c.stream("GET", "/v1/events/stream", params={"org": ORG, "after": head}) as r:
            created = c.post("/v1/commands", json={"type": "create_chat", "organization_id": ORG,
                                                   "owner_id": ALICE, "text": "hi"})
            assert created.json()["ok"], created.text
            first = json.loads(next(sse_events(r))["data"])
            assert first["type"] == "ChatCreated" and first["stream_id"] == created.json()["result"]["chat_id"]


def test_a_chat_filter_carries_its_tool_calls_executions(world):
    """``chat=``: the chat's own events and those of its tool calls' execution streams, live (the tail) and
    in pages (the log), the same events."""
    call = {"type": "tool-call", "tool_call_id": "x1", "tool_name": "execute", "args": {"cmd": "ls"}}
    with world.client("admin") as c:
        head = c.get("/v1/events", params={"limit": 1}).json()["head"]
        with c.stream("GET", "/v1/events/stream", params={"chat": world.chat_b, "after": head}) as live:
            for command in (
                    {"type": "commit_step", "chat_id": world.chat_b,
                     "messages": [{"role": "assistant", "parts": [call]}]},
                    {"type": "claim_tool_call", "chat_id": world.chat_b, "assistant_message_id": 2,
                     "tool_call_id": "x1", "tool_name": "execute"},
                    {"type": "record_tool_call_response", "chat_id": world.chat_b, "assistant_message_id": 2,
                     "tool_call_id": "x1", "status": 200, "body": "{}"},
                    {"type": "set_title", "chat_id": world.chat_a, "title": "not this chat"}):
                r = c.post("/v1/commands", json=command)
                assert r.json()["ok"], r.text
            logged = c.get("/v1/events", params={"chat": world.chat_b, "after": head, "limit": 100}).json()["events"]
            received = take_events(live, len(logged), time.monotonic() + 60)
    executions = {e["stream_id"] for e in logged} - {world.chat_b}
    assert len(executions) == 1 and sum(e["stream_id"] in executions for e in logged) >= 2
    assert world.chat_a not in {e["stream_id"] for e in logged}
    assert received == logged
