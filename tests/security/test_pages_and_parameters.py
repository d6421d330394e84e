"""Issue 23, point 6, probed from outside through a real ``serve``: every response carries the security
headers (a Content-Security-Policy that runs no inline script, nosniff, no referrer, no framing); no page has
an inline script (their one script is a file the ledger serves); the API docs load nothing from other hosts;
a malformed cursor or parameter is a 400 with a code; bidi overrides and invisible characters in recorded text
are shown, spelled out, on the pages instead of reordering them."""

from __future__ import annotations

import re

from tests.catalog.kit import ORG
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
