"""Issue 23, point 1 and 2, the way the holes were found: a real ``serve``, a real open event stream, the
revocation or the removal made by another process (the CLI). A token that no longer authenticates — revoked,
expired, its user removed from the organization — is refused on every request, and a stream it opened ends
with an ``error`` event naming why, delivering nothing recorded after."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import httpx

from ledger.store import open_app
from tests.catalog.kit import ALICE, ORG
from tests.service.server import sse_events

DEADLINE = 20.0  # seconds a stream may take to end before the test fails (the bound is about 0.5 s: RECHECK)


def cli(url: str, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "commands.cli.main", "--db", url, *args], input=stdin,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def token_id_of(url: str, user: str, role: str) -> str:
    rows = [json.loads(line) for line in cli(url, "tokens", "list", "--json").splitlines()]
    (row,) = [r for r in rows if r["user"] == user and r["role"] == role and not r["revoked"]]
    return row["token_id"]


class OpenStream:
    """An event stream read in a thread: its messages as they come, and whether it ended."""

    def __init__(self, world: Any, who: str | None, params: dict[str, str], secret: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {secret or world.secrets[who]}"}
        self.client = httpx.Client(base_url=world.server.base, headers=headers, timeout=httpx.Timeout(60, read=60))
        self.messages: list[dict[str, str]] = []
        self.ended = threading.Event()
        self.opened = threading.Event()
        self.status: int | None = None

        def read() -> None:
            try:
                with self.client.stream("GET", "/v1/events/stream", params=params) as r:
                    self.status = r.status_code
                    self.opened.set()
                    for m in sse_events(r):
                        self.messages.append(m)
            except httpx.HTTPError:
                pass
            finally:
                self.opened.set()
                self.ended.set()

        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()
        assert self.opened.wait(30) and self.status == 200

    def close(self) -> None:
        self.client.close()


def wait_for(condition: Any, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


def set_title(world: Any, who: str, chat: str, title: str) -> httpx.Response:
    with world.client(who) as c:
        return c.post("/v1/commands", json={"type": "set_title", "chat_id": chat, "title": title})


def test_a_revoked_tokens_open_stream_ends_and_delivers_nothing_more(world, db_url):
    stream = OpenStream(world, "alice", {"chat": world.chat_a})
    try:
        assert set_title(world, "admin", world.chat_a, "before").status_code == 200
        wait_for(lambda: any(m.get("event") == "TitleSet" for m in stream.messages), "the stream delivers")
        cli(db_url, "tokens", "revoke", token_id_of(db_url, ALICE, "member"))
        wait_for(stream.ended.is_set, "the revoked token's stream ends")
        assert stream.messages[-1]["event"] == "error"
        assert json.loads(stream.messages[-1]["data"])["error"]["code"] == "token_revoked"
        assert set_title(world, "admin", world.chat_a, "after").status_code == 200
        assert not any("after" in m.get("data", "") for m in stream.messages)
        with world.client("alice") as c:
            for path in ("/v1/chats", f"/v1/chats/{world.chat_a}", "/v1/events"):
                r = c.get(path)
                assert r.status_code == 401 and r.json()["error"]["code"] == "token_revoked", (path, r.text)
    finally:
        stream.close()


def test_a_removed_member_loses_every_door_and_a_readded_one_needs_a_new_token(world, db_url):
    stream = OpenStream(world, "alice", {"org": ORG})
    try:
        remove = json.dumps({"type": "remove_organization_member", "organization_id": ORG, "user_id": ALICE})
        cli(db_url, "apply", "-", stdin=remove + "\n")
        wait_for(stream.ended.is_set, "the removed member's stream ends")
        assert json.loads(stream.messages[-1]["data"])["error"]["code"] == "not_organization_member"
        with world.client("alice") as c:
            for method, path, body in (("GET", "/v1/chats", None), ("GET", f"/v1/chats/{world.chat_a}", None),
                                       ("GET", "/v1/events/stream", None),
                                       ("POST", "/v1/commands", {"type": "set_title", "chat_id": world.chat_a,
                                                                 "title": "x"})):
                r = c.request(method, path, json=body)
                assert r.status_code == 403 and r.json()["error"]["code"] == "not_organization_member", (path, r.text)
        with world.client(None) as c:  # the web pages: the cookie of the same token is refused too
            c.cookies.set("chat_ledger_token", world.secrets["alice"])
            page = c.get("/ui/", follow_redirects=False)
            assert page.status_code in (303, 401, 403) and "chat_ledger_token" not in page.headers.get("location", "x")
        # re-added: the old token stays ended; a new one works
        add = json.dumps({"type": "add_organization_member", "organization_id": ORG, "user_id": ALICE})
        cli(db_url, "apply", "-", stdin=add + "\n")
        with world.client("alice") as c:
            assert c.get("/v1/chats").json()["error"]["code"] == "not_organization_member"
        fresh = json.loads(cli(db_url, "tokens", "create", "--user", ALICE, "--org", ORG, "--role", "member", "--json"))
        with world.server.client(fresh["secret"]) as c:
            assert c.get("/v1/chats").status_code == 200
        # an admin's token of the organization is untouched by a member's removal
        with world.client("admin") as c:
            assert c.get("/v1/chats").status_code == 200
    finally:
        stream.close()


def test_a_token_ends_at_its_expiry_and_its_stream_with_it(world, db_url):
    from commands.tokens import issue_token
    from uuid import UUID

    app = open_app(db_url)
    try:
        row = issue_token(app, user=UUID(ALICE), org=UUID(ORG), role="member", expires_in=timedelta(seconds=5))
    finally:
        app.close()
    assert row["expires_at"]
    with world.server.client(row["secret"]) as c:
        assert c.get("/v1/chats").status_code == 200  # (5 s: the world is up; the first request is quick)
    stream = OpenStream(world, None, {"chat": world.chat_a}, secret=row["secret"])
    try:
        wait_for(stream.ended.is_set, "the expired token's stream ends")
        assert json.loads(stream.messages[-1]["data"])["error"]["code"] == "token_expired"
        with world.server.client(row["secret"]) as c:
            r = c.get("/v1/chats")
            assert r.status_code == 401 and r.json()["error"]["code"] == "token_expired"
        listed = [json.loads(line) for line in cli(db_url, "tokens", "list", "--json").splitlines()]
        assert [r["ended"] for r in listed if r["token_id"] == row["token_id"]] == ["token_expired"]
    finally:
        stream.close()


def test_a_rotated_token_works_for_its_overlap_then_only_the_new_one(world, db_url):
    old_id = token_id_of(db_url, ALICE, "member")
    new = json.loads(cli(db_url, "tokens", "rotate", old_id, "--overlap", "4s", "--json"))
    assert new["replaces"] == old_id and new["user"] == ALICE and new["role"] == "member" and new["org"] == ORG
    with world.server.client(new["secret"]) as c:
        assert c.get("/v1/chats").status_code == 200
    wait_for(lambda: _code(world, world.secrets["alice"]) == "token_expired", "the old token ends after its overlap")
    with world.server.client(new["secret"]) as c:
        assert c.get("/v1/chats").status_code == 200
    listed = {r["token_id"]: r for r in map(json.loads, cli(db_url, "tokens", "list", "--json").splitlines())}
    assert listed[old_id]["replaced_by"] == new["token_id"] and listed[old_id]["ended"] == "token_expired"
    out = subprocess.run([sys.executable, "-m", "commands.cli.main", "--db", db_url, "tokens", "rotate", old_id],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "invalid_command" in out.stderr  # an ended token is not rotated again


def _code(world: Any, secret: str) -> str | None:
    with world.server.client(secret) as c:
        r = c.get("/v1/chats")
        return None if r.status_code == 200 else r.json()["error"]["code"]
