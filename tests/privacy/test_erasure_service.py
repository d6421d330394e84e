"""Issue 28, point 3, through the service: a real ``serve`` process of a sealed ledger shows an erasure made by
another process (the CLI's) — its chat, timeline, event log and search answer ``[erased]`` and none of the
erased words, within the service's refresh of destroyed keys (``Sealer.REFRESH``: polled here, no fixed sleep) —
and an erasure it runs itself (a deployment admin's command) is read back at once."""

from __future__ import annotations

import json
import time

from ledger.sealing import ERASED
from tests.audit.kit import cli
from tests.catalog.kit import ALICE, BOB, ORG
from tests.privacy.test_erasure import ALICE_WORDS, BOB_WORDS, found, record
from tests.service.server import Server, sse_events, tokens

from ledger.store import open_app


def reads(c, chat: str) -> str:
    """What a reader of the chat gets: the chat, its timeline, its events, and a search for the first words."""
    out = [c.get(f"/v1/chats/{chat}").text, c.get(f"/v1/chats/{chat}/timeline").text,
           c.get("/v1/events", params={"chat": chat}).text]
    for word in (ALICE_WORDS[0], BOB_WORDS[0]):
        out.append(json.dumps(c.get("/v1/search", params={"q": word}).json()["hits"]))  # (not the query echoed)
    return "\n".join(out)


def test_the_service_reads_an_erasure_made_elsewhere_and_its_own(db_url, master):  # noqa: ARG001 (the master key)
    app = open_app(db_url)
    try:
        chat, bobs = record(app)
    finally:
        app.close()
    secrets = tokens(db_url, admin={"user": ALICE, "org": ORG, "role": "admin"},
                     root={"user": BOB, "deployment_admin": True})
    with Server(db_url) as server, server.client(secrets["admin"]) as c:
        assert found(ALICE_WORDS[:2], reads(c, chat).encode()) == list(ALICE_WORDS[:2])  # read, cached, indexed
        cli(db_url, "erase", ALICE, "--reason", "GDPR request")  # another process
        deadline = time.monotonic() + 30
        while found(ALICE_WORDS, reads(c, chat).encode()) and time.monotonic() < deadline:
            time.sleep(0.1)
        seen = reads(c, chat)
        assert found(ALICE_WORDS, seen.encode()) == [] and ERASED in seen and BOB_WORDS[0] in seen
        # the live stream from the start of the chat: its events as they read now
        with c.stream("GET", "/v1/events/stream", params={"chat": chat, "after": 0}) as r:
            streamed = []
            for message in sse_events(r, deadline=time.monotonic() + 10):
                streamed.append(message.get("data", ""))
                if len(streamed) >= 5:  # (the chat's five events)
                    break
        assert len(streamed) == 5 and not found(ALICE_WORDS, "".join(streamed).encode())
        assert ERASED in "".join(streamed)
        with server.client(secrets["root"]) as root:
            r = root.post("/v1/commands", json={"type": "erase_subject", "user_id": BOB, "reason": "request"})
            assert r.json()["ok"], r.text
        seen = reads(c, chat)  # at once: the service ran it
        assert found(BOB_WORDS, seen.encode()) == [] and found(BOB_WORDS, reads(c, bobs).encode()) == []
