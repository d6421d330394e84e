"""Issue 26, point 2: several writers at once — 4 ``serve`` processes on one PostgreSQL ledger, 64 clients.

Clients send keyed commands through the four servers at once, on few chats (several clients per chat: real
conflicts), while a reader tails the log as a view's follower does (``notifications(after, limit)`` from the last
id it saw). Asserted: every acknowledged command is recorded exactly once; each stream's versions are 1, 2, 3…;
the reader, which only ever asked for ids after the last one it had seen, saw every event of the final log, each
once, in id order — no event was committed under an id it had already passed (the order a follower relies on).
Figures (commands/s, p99) are measured by ``chat-ledger bench --only writepath``, not here."""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import ExitStack

import httpx
import pytest

from commands.eventlog_verify import verify
from ledger.store import open_app
from tests.catalog.kit import ALICE, ORG
from tests.reliability.clusters import apply
from tests.service.conftest import ROLES, seed
from tests.service.server import Server, tokens

pytestmark = pytest.mark.slow

SERVERS, CLIENTS, PER_CLIENT, CHATS = 4, 64, 6, 8


def test_four_servers_sixty_four_clients_keep_the_log_in_order(pg_url):
    seed(pg_url)
    assert apply(pg_url, {"type": "set_deployment_settings", "limits": {"max_queued_messages_per_chat": 1000}})[0]["ok"]
    secret = tokens(pg_url, alice=ROLES["alice"])["alice"]  # her own chats, through every server
    app = open_app(pg_url)
    start = app.head()
    seen: list[int] = []
    stop = threading.Event()

    def tail() -> None:
        after = start
        while True:
            done = stop.is_set()  # (read once more after the writers stopped: the last page)
            page = app.notifications(after, 500)
            for n in page:
                seen.append(n.id)
                after = n.id
            if done and not page:
                return

    with ExitStack() as stack:
        servers = [stack.enter_context(Server(pg_url)) for _ in range(SERVERS)]
        alice = stack.enter_context(servers[0].client(secret))
        chats = [alice.post("/v1/commands", json={"type": "create_chat", "organization_id": ORG,
                                                  "owner_id": ALICE, "text": f"chat {n}"}).json()["result"]["chat_id"]
                 for n in range(CHATS)]
        acked: list[tuple[str, str]] = []
        failures: list[str] = []

        def client(n: int) -> None:
            chat = chats[n % CHATS]
            with httpx.Client(base_url=servers[n % SERVERS].base, timeout=60,
                              headers={"Authorization": f"Bearer {secret}"}) as c:
                for i in range(PER_CLIENT):
                    key = f"c{n}-{i}"
                    body = c.post("/v1/commands", json={"type": "send_message", "chat_id": chat, "text": key,
                                                        "idempotency_key": key}).json()
                    if body.get("ok"):
                        acked.append((chat, key))
                    else:
                        failures.append(str(body.get("error")))

        tailer = threading.Thread(target=tail)
        tailer.start()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        tailer.join(timeout=120)
        assert not failures, failures[:5]
        assert len(acked) == CLIENTS * PER_CLIENT

        for chat in chats:
            queue = alice.get(f"/v1/chats/{chat}/queue").json()
            texts = Counter(q["text"] for q in queue)
            assert texts == Counter(key for c, key in acked if c == chat)  # each acknowledged command once

    final = [n for n in app.notifications(start, 1 << 30)]
    assert [n.id for n in final] == seen, "the tailing reader missed or repeated an event"
    versions: dict[str, list[int]] = {}
    for n in app.notifications(0, 1 << 30):
        versions.setdefault(str(n.originator_id), []).append(n.originator_version)
    for stream, vs in versions.items():
        assert vs == list(range(1, len(vs) + 1)), (stream, vs[:10])
    report = verify(app)
    assert report["ok"], report["anomalies"][:5]
    app.close()
