"""Two ``serve`` processes on one PostgreSQL ledger serve the same ledger: what one records the other
shows (views, the log, the live stream), both record concurrently, and the views stay right."""

from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack

from commands.eventlog_verify import verify
from commands.views import all_projections
from ledger.store import open_app
from projections import open_backend
from tests.catalog.kit import ALICE, ORG
from tests.service.conftest import ROLES, seed
from tests.service.server import Server, sse_events, take_events, tokens


def test_two_servers_one_ledger(pg_url):
    chat_a, chat_b, _ = seed(pg_url)
    secret = tokens(pg_url, admin=ROLES["admin"], alice=ROLES["alice"])
    with Server(pg_url) as one, Server(pg_url) as two, one.client(secret["alice"]) as c1, \
            two.client(secret["admin"]) as c2:
        head = c2.get("/v1/events", params={"limit": 1}).json()["head"]
        with c2.stream("GET", "/v1/events/stream", params={"chat": chat_a, "after": head}) as live:
            r = c1.post("/v1/commands", json={"type": "set_title", "chat_id": chat_a, "title": "via one"})
            assert r.json()["ok"], r.text
            message = next(sse_events(live))  # server two streams what server one recorded
            assert json.loads(message["data"])["type"] == "TitleSet"
        assert c2.get(f"/v1/chats/{chat_a}").json()["title"] == "via one"

        def write(client, chat, n):
            for i in range(n):
                assert client.post("/v1/commands", json={"type": "set_title", "chat_id": chat,
                                                         "title": f"t{i}"}).json()["ok"]

        with one.client(secret["admin"]) as c3:
            threads = [threading.Thread(target=write, args=(c3, chat_b, 25)),
                       threading.Thread(target=write, args=(c2, chat_b, 25))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            made = c1.post("/v1/commands", json={"type": "create_chat", "organization_id": ORG, "owner_id": ALICE,
                                                 "text": "hi"}).json()["result"]["chat_id"]
            for c in (c2, c3):
                assert c.get(f"/v1/chats/{made}").json()["owner_id"] == ALICE
                assert c.get(f"/v1/chats/{chat_b}").json()["version"] == c3.get(f"/v1/chats/{chat_b}").json()["version"]
            ones = [e["notification_id"] for e in c3.get("/v1/events", params={"limit": 1000}).json()["events"]]
            twos = [e["notification_id"] for e in c2.get("/v1/events", params={"limit": 1000}).json()["events"]]
            assert ones == twos

    app = open_app(pg_url)
    backend = open_backend(pg_url)
    try:
        report = verify(app, backend, all_projections(app))
        assert report["ok"], report["anomalies"]
    finally:
        backend.close()
        app.close()


def test_each_servers_stream_has_both_servers_writes_once_in_log_order(db_url):
    """Each server streams its own writes from its saves and the other's from the log; where they
    interleave, each stream still has every event once, in log order, as the log shows it."""
    _, chat_b, _ = seed(db_url)
    secret = tokens(db_url, admin=ROLES["admin"])["admin"]
    writes = 30
    with Server(db_url) as one, Server(db_url) as two, one.client(secret) as c1, two.client(secret) as c2:
        head = c1.get("/v1/events", params={"limit": 1}).json()["head"]
        def write(client, tag):
            for i in range(writes):
                assert client.post("/v1/commands", json={"type": "set_title", "chat_id": chat_b,
                                                         "title": f"{tag}{i}"}).json()["ok"]

        with ExitStack() as streams, one.client(secret) as w1, two.client(secret) as w2:
            lives = [streams.enter_context(c.stream("GET", "/v1/events/stream",
                                                    params={"chat": chat_b, "after": head})) for c in (c1, c2)]
            threads = [threading.Thread(target=write, args=(w, tag)) for w, tag in ((w1, "one"), (w2, "two"))]
            for t in threads:
                t.start()
            received = [take_events(live, 2 * writes, time.monotonic() + 60) for live in lives]
            for t in threads:
                t.join()
        logged = c1.get("/v1/events", params={"chat": chat_b, "after": head, "limit": 1000}).json()["events"]
    assert len(logged) == 2 * writes
    assert received[0] == logged and received[1] == logged

