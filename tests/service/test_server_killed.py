"""The server killed (SIGKILL) while eight clients record through it, several commands to a transaction.

Each client sends keyed commands on its own chat, one request at a time, until the server dies under it;
a new server is started on the same database and every client sends again the command it got no answer
to (same key), then the rest. Asserted, on SQLite and PostgreSQL: every command is recorded exactly once
and in its client's order; every answer a client got before the kill is what the repeat of that command
answers now; and the command in flight at the kill is recorded once whether or not its batch had
committed.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import httpx

from ledger.store import open_app
from tests.catalog.kit import ALICE, BOB, ORG
from tests.reliability.command_script import untimed
from tests.service.conftest import ROLES, seed
from tests.service.server import Server, tokens

CLIENTS = [("alice", ALICE), ("bob", BOB)] * 4
COMMANDS = 60  # per client
KILL_AFTER = 120  # answers in all before the kill


def _commands(i: int, user: str) -> tuple[str, list[dict[str, Any]]]:
    chat = str(uuid.uuid5(uuid.NAMESPACE_URL, f"killed/{i}"))
    first = {"type": "create_chat", "organization_id": ORG, "owner_id": user, "chat_id": chat, "text": "hello",
             "idempotency_key": f"{i}-create"}
    return chat, [first] + [{"type": "set_title", "chat_id": chat, "title": f"client {i} title {n}",
                             "idempotency_key": f"{i}-{n}"} for n in range(COMMANDS - 1)]


def test_a_killed_server_loses_and_repeats_nothing(db_url: str) -> None:
    seed(db_url)
    secrets = tokens(db_url, alice=ROLES["alice"], bob=ROLES["bob"])
    plans = [_commands(i, user) for i, (_, user) in enumerate(CLIENTS)]
    answered: list[list[Any]] = [[] for _ in CLIENTS]
    total = threading.Semaphore(0)
    errors: list[BaseException] = []

    def client(server: Server, i: int, who: str, start: int) -> None:
        """Send plan i from ``start`` on; stop at the first failed request (the kill)."""
        try:
            with server.client(secrets[who], timeout=60.0) as http:
                for command in plans[i][1][start:]:
                    try:
                        r = http.post("/v1/commands", json=command)
                    except httpx.TransportError:
                        return  # the server died with this command in flight
                    assert r.status_code == 200, r.text
                    answered[i].append(untimed(r.json()))
                    total.release()
        except BaseException as e:
            errors.append(e)

    server = Server(db_url)
    try:
        threads = [threading.Thread(target=client, args=(server, i, who, 0)) for i, (who, _) in enumerate(CLIENTS)]
        for t in threads:
            t.start()
        for _ in range(KILL_AFTER):
            assert total.acquire(timeout=120), "the clients stopped getting answers before the kill"
        server.proc.kill()
        for t in threads:
            t.join()
    finally:
        server.stop()
    assert not errors, errors
    before = [list(a) for a in answered]
    assert sum(map(len, before)) < len(CLIENTS) * COMMANDS  # the kill came while commands were in flight

    with Server(db_url) as again:  # every client goes on from the command it got no answer to
        resumed = [len(a) for a in before]
        threads = [threading.Thread(target=client, args=(again, i, who, resumed[i]))
                   for i, (who, _) in enumerate(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert all(len(a) == COMMANDS for a in answered)
        for (who, _), (_, commands), first in zip(CLIENTS, plans, before):  # repeats answer as first answered
            with again.client(secrets[who]) as http:
                for command, answer in zip(commands, first):
                    assert untimed(http.post("/v1/commands", json=command).json()) == answer

    app = open_app(db_url)
    try:
        for i, (chat, commands) in enumerate(plans):
            events = app.stream(uuid.UUID(chat))
            assert [type(e).__name__ for e in events][:1] == ["ChatCreated"]
            titles = [e.title for e in events if type(e).__name__ == "TitleSet"]
            assert titles == [c["title"] for c in commands[1:]]  # each once, in the client's order
            assert all(a["ok"] for a in answered[i])
    finally:
        app.close()
