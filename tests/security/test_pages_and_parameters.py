"""Issue 23, point 6, probed from outside through a real ``serve``: every response carries the security
headers (a Content-Security-Policy that runs no inline script, nosniff, no referrer, no framing); no page has
an inline script (their one script is a file the ledger serves); the API docs load nothing from other hosts;
a malformed cursor or parameter is a 400 with a code; bidi overrides and invisible characters in recorded text
are shown, spelled out, on the pages instead of reordering them."""

from __future__ import annotations

import re

from tests.catalog.kit import ALICE, ORG
from tests.security.test_authorship_and_streams import post
from tests.service.test_ui import signed_in

HEADERS = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "x-frame-options": "DENY"}


def assert_hardened(r) -> None:
    for k, v in HEADERS.items():
        assert r.headers.get(k) == v, (r.url, k, r.headers.get(k))
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in csp


def test_every_response_is_hardened_and_no_page_runs_inline_script(world):
    with signed_in(world, "alice") as c:
        pages = [c.get("/ui/login"), c.get(f"/ui/orgs/{ORG}/chats"),
                 c.get(f"/ui/chats/{world.chat_a}"), c.get("/ui/search", params={"q": "build"}),
                 c.get(f"/ui/chats/{world.chat_a}/explain", params={"turn": "latest"}),
                 c.get(f"/ui/chats/{world.chat_c}")]
        assert_hardened(c.get("/ui/nowhere"))  # (the router's own 404)
        for r in pages:
            assert_hardened(r)
            assert r.headers["content-type"].startswith("text/html"), r.url
            for tag in re.findall(r"<script\b[^>]*>", r.text):
                assert "src=" in tag, (r.url, tag)  # no inline script anywhere
            assert "<script>" not in r.text
        js = c.get("/ui/static/live.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert_hardened(js)
    with world.client("alice") as c:
        for r in (c.get("/v1/chats"), c.get("/v1/chats/not-a-uuid"), c.get("/healthz"), c.get("/openapi.json")):
            assert_hardened(r)
    with world.client(None) as c:
        assert_hardened(c.get("/v1/chats"))  # a 401 too
        docs = c.get("/schema")
        assert docs.status_code in (200, 404) and "<script" not in docs.text
        for path in ("/schema/swagger", "/schema/redoc", "/schema/elements", "/schema/rapidoc", "/schema/scalar"):
            assert c.get(path).status_code == 404, path  # no page that loads scripts from other hosts


def test_malformed_cursors_and_parameters_are_400_with_a_code(world):
    with world.client("admin") as c:
        for path, params in (("/v1/chats", {"cursor": "!!!"}), ("/v1/chats", {"cursor": "W10"}),
                             ("/v1/chats", {"limit": "lots"}), ("/v1/chats", {"status": "sideways"}),
                             ("/v1/events", {"after": "-1"}), ("/v1/events", {"after": "x"}),
                             ("/v1/search", {"q": "x", "cursor": "e30"}), ("/v1/chats", {"org": "not-a-uuid"}),
                             (f"/v1/chats/{world.chat_a}/timeline", {"at": "x"})):
            r = c.get(path, params=params)
            assert r.status_code == 400, (path, params, r.status_code, r.text)
            assert r.json()["error"]["code"] in ("invalid_request", "invalid_command"), r.text
        r = c.get("/v1/events/stream", headers={"Last-Event-ID": "not-a-number"})
        assert r.status_code == 400


def test_bidi_overrides_and_invisible_characters_are_shown_not_obeyed(world):
    sneaky = "transfer to account 1234\u202e5678\u200b"
    status, answer = post(world, "alice", {"type": "send_message", "chat_id": world.chat_a, "text": sneaky})
    assert status == 200, answer
    with signed_in(world, "alice") as c:
        page = c.get(f"/ui/chats/{world.chat_a}").text
    assert "\u202e" not in page and "\u200b" not in page
    assert "transfer to account 1234⟨U+202E⟩5678⟨U+200B⟩" in page


def _nested(depth: int) -> dict:
    value: dict = {"leaf": "x" * 20}
    for n in range(depth):
        value = {"k": [value, n]}
    return value


def test_an_explain_page_is_bounded_and_links_the_full_report(world):
    """A 6 kB deeply nested tool call made a 3 MB explain page (indented JSON grows with the square of the
    depth): the page folds what is deep, long or many, says so, and links the whole JSON, which the API gives."""
    import json

    args = _nested(400)  # 5.4 kB of JSON; 1.6 MB indented
    assert len(json.dumps(args)) < 7000
    status, made = post(world, "alice", {"type": "create_chat", "organization_id": ORG, "owner_id": ALICE, "text": "go",
                                         "hook_allowed_tools": ["read"]})
    assert status == 200, made
    chat = made["result"]["chat_id"]
    status, answer = post(world, "admin", {"type": "commit_step", "chat_id": chat, "messages": [
        {"role": "assistant", "parts": [{"type": "tool-call", "tool_call_id": "deep", "tool_name": "read",
                                         "args": args}]}]})
    assert status == 200, answer
    with signed_in(world, "alice") as c:
        page = c.get(f"/ui/chats/{chat}/explain", params={"tool_call": "deep"})
        assert page.status_code == 200
        assert len(page.content) < 150_000, len(page.content)
        assert 'id="folded"' in page.text and f"/v1/chats/{chat}/explain?tool_call=deep" in page.text
    with world.client("alice") as api:
        full = api.get(f"/v1/chats/{chat}/explain", params={"tool_call": "deep"})
        assert full.status_code == 200 and json.dumps(args) in json.dumps(full.json())


def test_a_prefix_id_is_invalid_request_and_pages_answer_errors_as_pages(world):
    prefix = world.chat_a[:8]
    with world.client("alice") as c:
        for path in (f"/v1/chats/{prefix}", f"/v1/chats/{prefix}/timeline", f"/v1/organizations/{ORG[:6]}/models"):
            r = c.get(path)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (path, r.text)
            assert prefix in r.json()["error"]["message"] or ORG[:6] in r.json()["error"]["message"]
        assert c.get("/v1/nowhere").json()["error"]["code"] == "route_not_found"
    with signed_in(world, "alice") as c:
        for path, status, code in ((f"/ui/chats/{prefix}", 400, "invalid_request"),
                                   ("/ui/nowhere", 404, "route_not_found"),
                                   (f"/ui/chats/{world.chat_a}/nowhere", 404, "route_not_found")):
            r = c.get(path)
            assert r.status_code == status and r.headers["content-type"].startswith("text/html"), (path, r.text)
            assert code in r.text
            assert_hardened(r)
