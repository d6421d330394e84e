"""Every endpoint of a real server process, through a real HTTP client, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.catalog.kit import ALICE, ORG
from tests.service.server import sse_events


def test_every_endpoint_answers(world):
    with world.client("admin") as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz").json()
        assert ready["status"] == "ok" and ready["head"] > 0
        assert {p["projection"] for p in ready["projections"]} >= {"chat_views", "org_models"}

        page = c.get("/v1/chats", params={"org": ORG}).json()
        assert {r["chat_id"] for r in page["items"]} == {world.chat_a, world.chat_b}
        waiting = c.get("/v1/chats", params={"status": "waiting"}).json()["items"]
        assert [r["chat_id"] for r in waiting] == [world.chat_a]

        row = c.get(f"/v1/chats/{world.chat_a}").json()
        assert row["chat_id"] == world.chat_a and row["owner_id"] == ALICE
        assert [u["tool_call_id"] for u in c.get(f"/v1/chats/{world.chat_a}/unresolved").json()] == []
        assert isinstance(c.get(f"/v1/chats/{world.chat_a}/queue").json(), list)
        models = c.get(f"/v1/organizations/{ORG}/models", params={"user": ALICE}).json()
        assert models["organization_id"] == ORG and "effective" in models

        timeline = c.get(f"/v1/chats/{world.chat_a}/timeline").json()
        assert [e["version"] for e in timeline] == list(range(1, len(timeline) + 1))
        assert len(c.get(f"/v1/chats/{world.chat_a}/timeline", params={"at": 3}).json()) == 3
        as_of = timeline[1]["time"]
        assert c.get(f"/v1/chats/{world.chat_a}/timeline", params={"as_of": as_of}).json()[-1]["version"] >= 2
        assert c.get(f"/v1/chats/{world.chat_a}/timeline", params={"at": 999}).json()["error"]["code"] \
            == "version_not_found"

        explained = c.get(f"/v1/chats/{world.chat_a}/explain", params={"tool_call": "c1"}).json()
        assert explained["explanation"]
        for asked in ({}, {"tool_call": "c1", "turn": "t"}):  # none, or two: the service layer's one rule
            r = c.get(f"/v1/chats/{world.chat_a}/explain", params=asked)
            assert r.status_code == 400 and r.json()["error"] == {
                "code": "invalid_request", "message": "give exactly one of tool_call, queued_message, turn"}, r.text
        nxt = c.get(f"/v1/chats/{world.chat_a}/next-action").json()
        assert nxt["chat_id"] == world.chat_a and "action" in nxt
        assert c.get(f"/v1/chats/{world.chat_a}/next-action", params={"at": 2}).json()["version"] == 2

        events = c.get("/v1/events", params={"limit": 5}).json()
        ids = [e["notification_id"] for e in events["events"]]
        assert ids == sorted(ids)
        rest = c.get("/v1/events", params={"after": events["next_after"], "limit": 1000}).json()
        everything = events["events"] + rest["events"]
        assert len({e["notification_id"] for e in everything}) == len(everything)
        mine = c.get("/v1/events", params={"chat": world.chat_a, "limit": 1000}).json()["events"]
        assert {e["stream_id"] for e in mine} >= {world.chat_a}
        assert all(e["stream_id"] == world.chat_a or e["data"].get("chat_id") == world.chat_a
                   or e["type"].startswith("ToolCall") for e in mine)

        with c.stream("GET", "/v1/events/stream", params={"chat": world.chat_b}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            first = next(sse_events(r))
            assert json.loads(first["data"])["stream_id"] == world.chat_b and first["id"].isdigit()

        metrics = c.get("/metrics").text
        assert "chat_ledger_projection_lag" in metrics and "# TYPE chat_ledger_commands_total counter" in metrics
        doc = c.get("/openapi.json").json()
        body = doc["paths"]["/v1/commands"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert "CreateChat" in json.dumps(body) and "CreateChat" in doc["components"]["schemas"]


def test_commands_single_and_json_lines(world):
    with world.client("alice") as c:
        one = c.post("/v1/commands", json={"type": "set_title", "chat_id": world.chat_a, "title": "Renamed"})
        assert one.status_code == 200 and one.json()["ok"] and one.json()["type"] == "set_title"
        assert c.get(f"/v1/chats/{world.chat_a}").json()["title"] == "Renamed"
        events = c.get("/v1/events", params={"chat": world.chat_a, "limit": 1000}).json()["events"]
        assert events[-1]["type"] == "TitleSet" and events[-1]["data"]["actor"] == ALICE  # the token's user

        body = "\n".join([
            json.dumps({"type": "set_title", "chat_id": world.chat_a, "title": "Again"}),
            "not json",
            json.dumps({"type": "set_title", "chat_id": world.chat_a, "title": "x", "actor": ORG}),
            "",
            json.dumps({"type": "set_title", "chat_id": world.chat_b, "title": "not mine"}),
        ])
        r = c.post("/v1/commands", content=body, headers={"content-type": "application/x-ndjson"})
        lines = [json.loads(x) for x in r.text.splitlines()]
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        assert [(x["line"], x["ok"], x.get("error", {}).get("code")) for x in lines] == [
            (1, True, None), (2, False, "invalid_command"), (3, False, "actor_mismatch"), (5, False, "not_chat_owner")]

        refused = c.post("/v1/commands", json={"type": "set_title", "chat_id": world.chat_a, "title": ""})
        assert refused.status_code in (400, 409) and not refused.json()["ok"]
        assert c.post("/v1/commands", content=b"{", headers={"content-type": "application/json"}).status_code == 400
        assert c.post("/v1/commands", content=b"x", headers={"content-type": "image/png"}).status_code == 400
        metrics = c.get("/metrics").text
        assert 'chat_ledger_commands_total{outcome="ok",type="set_title"} 2' in metrics
        assert 'chat_ledger_refusals_total{code="actor_mismatch"} 1' in metrics


def test_chats_in_pages(world):
    """Keyset pages: while chats are created between the pages (before and after the cursor), every chat that
    was there at the start is listed exactly once, in chat id order, and no chat twice."""
    app_url = world.server.url
    from ledger.store import open_app
    from tests.catalog.kit import chat

    app = open_app(app_url)
    try:
        made = {chat(app)["chat_id"] for _ in range(7)} | {world.chat_a}
        with world.client("alice") as c:
            seen, cursor, pages = [], None, 0
            while True:
                page = c.get("/v1/chats", params={"limit": 3, **({"cursor": cursor} if cursor else {})}).json()
                seen += [r["chat_id"] for r in page["items"]]
                cursor, pages = page["next_cursor"], pages + 1
                if cursor is None:
                    break
                chat(app)  # a new chat, on either side of the cursor
            assert set(seen) >= made and len(seen) == len(set(seen)) and seen == sorted(seen)
            assert world.chat_b not in seen  # a member lists only their own chats
            assert pages >= 3
            assert c.get("/v1/chats", params={"limit": 0}).json()["error"]["code"] == "invalid_request"
            for bad in ("nope", "W10", "WyJ4Il0", "e30"):  # not base64 JSON, [], ["x"], {}
                r = c.get("/v1/chats", params={"cursor": bad})
                assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (bad, r.text)
    finally:
        app.close()


@settings(max_examples=200, deadline=None)
@given(st.uuids(), st.text(max_size=60))
def test_a_cursor_says_its_chat_id_and_nothing_else_is_a_cursor(chat_id, junk):
    from commands.http.routes import decode_cursor, encode_cursor
    from ledger.errors import LedgerError

    assert decode_cursor(encode_cursor({"chat_id": str(chat_id)})) == {"chat_id": str(chat_id)}
    try:
        decoded = decode_cursor(junk)
    except LedgerError as e:
        assert e.code == "invalid_request"
    else:  # only the encoding of some chat id decodes
        assert encode_cursor(decoded) == junk.rstrip("=")
