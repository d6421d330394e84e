"""Issue 23, point 6 (the limits) and point 2 (last use), against a real ``serve`` with small limits: stalled
headers are cut, a body over the limit is refused, a token over its write rate or its open streams is answered
``rate_limited`` (429, ``Retry-After``) and nothing is recorded, other tokens are not affected, and ``tokens
list`` shows when each token was last used."""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Iterator

import httpx
import pytest

from tests.security.test_tokens_end_everywhere import OpenStream, cli
from tests.service.conftest import ROLES, seed
from tests.service.server import Server, tokens

WAIT = 30.0  # seconds before a test gives up on a condition (the bounds themselves are 1 s here)


class Limited:
    def __init__(self, server: Server, secrets: dict[str, str], chats: tuple[str, str, str], url: str) -> None:
        self.server, self.secrets, self.url = server, secrets, url
        self.chat_a, self.chat_b, _ = chats

    def client(self, who: str) -> httpx.Client:
        return self.server.client(self.secrets[who])


@pytest.fixture
def limited(db_url: str) -> Iterator[Limited]:
    chats = seed(db_url)
    secrets = tokens(db_url, **ROLES)
    # one command a minute and a burst of 3; two streams per token; 64 kB bodies; headers within 1 s
    with Server(db_url, "--write-rate", "0.0167", "--write-burst", "3", "--streams-per-token", "2",
                "--max-body-bytes", "65536", "--header-timeout", "1") as server:
        yield Limited(server, secrets, chats, db_url)


def versions(c: httpx.Client, chat: str) -> int:
    return len(c.get("/v1/events", params={"chat": chat, "limit": 1000}).json()["events"])


def title(chat: str, text: str) -> dict[str, Any]:
    return {"type": "set_title", "chat_id": chat, "title": text}


def test_a_token_over_its_write_rate_is_answered_rate_limited_and_nothing_is_recorded(limited: Limited) -> None:
    with limited.client("alice") as alice, limited.client("admin") as admin:
        for n in range(3):  # the burst
            r = alice.post("/v1/commands", json=title(limited.chat_a, f"t{n}"))
            assert r.status_code == 200 and r.json()["ok"], r.text
        before = versions(admin, limited.chat_a)
        r = alice.post("/v1/commands", json=title(limited.chat_a, "one too many"))
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited", r.text
        assert int(r.headers["retry-after"]) >= 1
        lines = "\n".join(json.dumps(title(limited.chat_a, f"batch {n}")) for n in range(2))
        r = alice.post("/v1/commands", content=lines, headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
        assert versions(admin, limited.chat_a) == before  # nothing recorded
        assert alice.get(f"/v1/chats/{limited.chat_a}").json()["title"] == "t2"
        assert alice.get(f"/v1/chats/{limited.chat_a}").status_code == 200  # reads are not writes
        # another token of the same organization has a bucket of its own
        r = admin.post("/v1/commands", json=title(limited.chat_a, "by the admin"))
        assert r.status_code == 200 and r.json()["ok"], r.text


def test_a_token_over_its_open_streams_is_answered_rate_limited_until_one_closes(limited: Limited) -> None:
    w: Any = type("W", (), {"server": limited.server, "secrets": limited.secrets})
    first, second = (OpenStream(w, "alice", {"chat": limited.chat_a}) for _ in range(2))
    try:
        for s in (first, second):
            assert s.opened.wait(WAIT) and s.status == 200
        with limited.client("alice") as alice:
            r = alice.get("/v1/events/stream", params={"chat": limited.chat_a})
            assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
            assert int(r.headers["retry-after"]) >= 1
        with limited.client("admin") as admin, admin.stream("GET", "/v1/events/stream") as r:
            assert r.status_code == 200  # another token's streams are its own
        first.close()
        assert first.ended.wait(WAIT)
        third = OpenStream(w, "alice", {"chat": limited.chat_a})
        try:  # the slot is given back when a stream ends (the server sees the client go)
            deadline = time.monotonic() + WAIT
            while True:
                assert third.opened.wait(WAIT)
                if third.status == 200:
                    break
                assert third.status == 429 and time.monotonic() < deadline, third.status
                third.close()
                third = OpenStream(w, "alice", {"chat": limited.chat_a})
        finally:
            third.close()
    finally:
        first.close()
        second.close()


def test_a_body_over_the_limit_is_refused_request_too_large(limited: Limited) -> None:
    with limited.client("admin") as admin:
        before = versions(admin, limited.chat_a)
        r = admin.post("/v1/commands", json=title(limited.chat_a, "x" * 70_000))
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large", r.text
        assert versions(admin, limited.chat_a) == before


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def test_stalled_headers_are_cut_and_other_connections_are_served(limited: Limited) -> None:
    with socket.create_connection(("127.0.0.1", limited.server.port)) as half, \
            socket.create_connection(("127.0.0.1", limited.server.port)) as silent:
        half.settimeout(WAIT)
        silent.settimeout(WAIT)
        half.sendall(b"GET /v1/chats HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ")  # and no more
        started = time.monotonic()
        with limited.client("alice") as alice:  # the stalled connections hold nothing another needs
            assert alice.get("/v1/chats").status_code == 200
        answer = _read_all(half)  # ends when the server closes the connection
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert _read_all(silent).startswith(b"HTTP/1.1 408")  # connected, never wrote: cut too
        assert time.monotonic() - started < WAIT
    # a kept-alive connection that sends a whole request after a pause is served (the bound is per request)
    with socket.create_connection(("127.0.0.1", limited.server.port)) as kept:
        kept.settimeout(WAIT)
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")


def test_tokens_list_shows_each_tokens_last_use(limited: Limited) -> None:
    def rows() -> dict[str, dict[str, Any]]:
        out = [json.loads(line) for line in cli(limited.url, "tokens", "list", "--json").splitlines()]
        return {r["role"] or "deployer": r for r in out}

    assert rows()["member"]["last_used_at"] is None  # seeded, never used
    with limited.client("auditor") as auditor:
        assert auditor.get("/v1/chats").status_code == 200
        deadline = time.monotonic() + WAIT
        while (used := rows()["auditor"]["last_used_at"]) is None:  # recorded in the background
            assert time.monotonic() < deadline, "the use was never recorded"
            time.sleep(0.1)  # polling the condition above
        for _ in range(5):
            assert auditor.get("/v1/chats").status_code == 200
    listing = rows()
    assert listing["auditor"]["last_used_at"] == used  # one use recorded per minute, not one per request
    assert listing["admin"]["last_used_at"] is None
    text = cli(limited.url, "tokens", "list")
    assert "last_used" in text  # a column of the table (its width depends on the terminal)
