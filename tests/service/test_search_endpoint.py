"""Search through a real ``serve``: ``GET /v1/search`` is scoped like every read (a member finds only their
own chats, an admin or auditor their organization's, nobody another organization's), pages by cursor, answers
bad input with 400 and a code, and ``/ui/search`` shows escaped snippets with the matches marked, each linking
to the message on its chat's page."""

from __future__ import annotations

import html
import re

from tests.service.test_ui import signed_in

WORD = "zanzibar"


def send(world, who: str, chat_id: str, text: str) -> None:
    with world.client(who) as c:
        r = c.post("/v1/commands", json={"type": "send_message", "chat_id": chat_id, "text": text})
        assert r.status_code == 200, r.text


def hits(world, who: str, **params) -> list[dict]:
    with world.client(who) as c:
        r = c.get("/v1/search", params=params)
        assert r.status_code == 200, r.text
        return r.json()["hits"]


def test_search_is_scoped_like_every_read(world):
    send(world, "alice", world.chat_a, f"{WORD} from alice <b>bold</b>")
    send(world, "bob", world.chat_b, f"{WORD} from bob")
    send(world, "carol", world.chat_c, f"{WORD} from carol")
    chats = lambda found: {h["chat_id"] for h in found}  # noqa: E731
    assert chats(hits(world, "alice", q=WORD)) == {world.chat_a}
    assert chats(hits(world, "bob", q=WORD)) == {world.chat_b}
    assert chats(hits(world, "admin", q=WORD)) == {world.chat_a, world.chat_b}
    assert chats(hits(world, "auditor", q=WORD)) == {world.chat_a, world.chat_b}
    assert chats(hits(world, "carol", q=WORD)) == {world.chat_c}
    # a filter cannot widen the scope: another owner or organization named is simply nothing
    from tests.catalog.kit import BOB, ORG2

    assert hits(world, "alice", q=WORD, owner=BOB) == []
    with world.client("alice") as c:
        assert c.get("/v1/search", params={"q": WORD, "org": ORG2}).json()["error"]["code"] == "not_in_organization"
    # pages: one hit per page, then no cursor
    with world.client("admin") as c:
        first = c.get("/v1/search", params={"q": WORD, "limit": 1}).json()
        second = c.get("/v1/search", params={"q": WORD, "limit": 1, "cursor": first["next_cursor"]}).json()
        assert second["next_cursor"] is None
        assert {first["hits"][0]["chat_id"], second["hits"][0]["chat_id"]} == {world.chat_a, world.chat_b}


def test_bad_search_input_is_a_400_with_a_code(world):
    with world.client("alice") as c:
        for params, code in (({"q": "-only"}, "invalid_command"), ({"q": WORD, "cursor": "garbage!"}, "invalid_request"),
                             ({"q": WORD, "since": "yesterday"}, "invalid_command"), ({}, None),
                             ({"q": WORD, "limit": 0}, None), ({"q": WORD, "status": "nope"}, None)):
            r = c.get("/v1/search", params=params)
            assert r.status_code == 400, (params, r.status_code, r.text)
            if code:
                assert r.json()["error"]["code"] == code


def test_the_search_page_marks_matches_and_escapes_text(world):
    send(world, "alice", world.chat_a, f"look: {WORD} <script>alert(1)</script>")
    with signed_in(world, "alice") as c:
        r = c.get("/ui/search", params={"q": WORD})
        assert r.status_code == 200
        assert "<script>alert(1)</script>" not in r.text and html.escape("<script>alert(1)</script>") in r.text
        assert f"<mark>{WORD}</mark>" in r.text
        links = re.findall(r'<li class="hit[^"]*"><a href="([^"]+)"', r.text)
        assert links and all(link.startswith(f"/ui/chats/{world.chat_a}#") for link in links)
        anchor = links[0].split("#", 1)[1]
        assert f'id="{anchor}"' in c.get(links[0].split("#")[0]).text  # the anchor is on the chat's page
        empty = c.get("/ui/search")
        assert empty.status_code == 200 and 'id="hits"' not in empty.text
