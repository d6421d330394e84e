"""Issue 25, point 3: ``serve --replica-url`` reads from a hot standby, and a client reads its own writes.

Two clusters made by the test (a primary and its synchronous standby, ``pg_basebackup -R``). The standby's
replay is paused (``pg_wal_replay_pause``: a standby far behind, made on purpose). Alice writes through the
service; her next reads show her write (the standby has not got it: the primary answers them after the bounded
wait). Bob, who wrote nothing, reads the same chat from the standby: he does not see it yet — the proof that his
reads come from the standby — and ``/metrics`` shows the standby's lag and who answered. Replay resumes: Bob's
reads catch up, Alice's are answered by the standby again, the lag is 0. Runs as root with PostgreSQL's server
binaries; skipped with the reason elsewhere."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.reliability.clusters import apply, pair  # noqa: F401 - pair: a fixture
from tests.service.server import Server, tokens

pytestmark = pytest.mark.slow

ORG = "0a000000-0000-4000-8000-0000000000e1"
ALICE, BOB = "0b000000-0000-4000-8000-0000000000e1", "0b000000-0000-4000-8000-0000000000e2"


def metric(server: Server, name: str, **labels: str) -> float:
    text = httpx.get(f"{server.base}/metrics", timeout=30).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" ([0-9.e+-]+)"
    found = re.search(pattern, text)
    assert found, (name, labels, text[-2000:])
    return float(found.group(1))


def texts(client: httpx.Client, chat: str) -> list[str]:
    r = client.get(f"/v1/chats/{chat}/timeline")
    assert r.status_code == 200, r.text
    return [e["summary"] for e in r.json()]


def test_reads_come_from_the_standby_and_a_writer_reads_its_own_writes(pair) -> None:
    primary, standby = pair
    url = f"postgresql://postgres@127.0.0.1:{primary.port}/postgres?schema=rep"
    replica_url = f"postgresql://postgres@127.0.0.1:{standby.port}/postgres?schema=rep"
    rows = apply(url, {"type": "add_organization_member", "organization_id": ORG, "user_id": ALICE},
                 {"type": "add_organization_member", "organization_id": ORG, "user_id": BOB},
                 {"type": "create_model_config", "organization_id": ORG, "provider": "anthropic", "model": "claude",
                  "context_limit": 200000},
                 {"type": "create_chat", "organization_id": ORG, "owner_id": ALICE, "text": "first words"})
    assert all(r["ok"] for r in rows), rows
    chat = rows[-1]["result"]["chat_id"]
    secrets = tokens(url, alice={"user": ALICE, "org": ORG, "role": "member"},
                     bob={"user": BOB, "org": ORG, "role": "admin"})
    server = Server(url, "--replica-url", replica_url, "--replica-wait", "0.5")
    try:
        with server.client(secrets["alice"]) as alice, server.client(secrets["bob"]) as bob:
            # the standby has the chat (its views are the primary follower's, replicated)
            deadline = time.monotonic() + 60
            while not any("first words" in t for t in texts(bob, chat)):
                assert time.monotonic() < deadline, "the standby never showed the chat"
                time.sleep(0.1)  # polling the condition above

            version = bob.get(f"/v1/chats/{chat}").json()["version"]
            standby.sql("SELECT pg_wal_replay_pause()")
            r = alice.post("/v1/commands", json={"type": "send_message", "chat_id": chat, "text": "while paused"})
            assert r.status_code == 200 and r.json()["ok"], r.text

            # Alice reads her own write (the primary answers: the standby cannot have it)
            before = metric(server, "chat_ledger_replica_reads_total", served_by="primary")
            assert any("while paused" in t for t in texts(alice, chat))
            assert alice.get(f"/v1/chats/{chat}").json()["version"] == version + 1
            assert metric(server, "chat_ledger_replica_reads_total", served_by="primary") >= before + 2
            # Bob reads from the standby: not there yet
            served = metric(server, "chat_ledger_replica_reads_total", served_by="replica")
            assert not any("while paused" in t for t in texts(bob, chat))
            assert bob.get(f"/v1/chats/{chat}").json()["version"] == version
            page = bob.get("/v1/events", params={"after": 0, "limit": 1000}).json()
            assert not any("while paused" in str(e["data"]) for e in page["events"])
            assert metric(server, "chat_ledger_replica_reads_total", served_by="replica") >= served + 3
            assert metric(server, "chat_ledger_replica_lag_events") >= 1

            standby.sql("SELECT pg_wal_replay_resume()")
            deadline = time.monotonic() + 60
            while not any("while paused" in t for t in texts(bob, chat)):
                assert time.monotonic() < deadline, "the standby did not catch up after its replay resumed"
                time.sleep(0.1)  # polling the condition above
            page = bob.get("/v1/events", params={"after": 0, "limit": 1000}).json()
            assert any("while paused" in str(e["data"]) for e in page["events"])
            served = metric(server, "chat_ledger_replica_reads_total", served_by="replica")
            assert any("while paused" in t for t in texts(alice, chat))  # the standby has her write now
            assert metric(server, "chat_ledger_replica_reads_total", served_by="replica") == served + 1
            assert metric(server, "chat_ledger_replica_lag_events") == 0

            # the standby refuses writes; the service never sends it any
            r = alice.post("/v1/commands", json={"type": "set_title", "chat_id": chat, "title": "after"})
            assert r.json()["ok"], r.text
    finally:
        server.stop()
