"""The database goes away under a running server while eight clients send commands at once: every
request is answered — 503 ``database_unavailable`` naming the server — and nothing is recorded; once the
database is back, the same commands record, each once. Gone two ways, both real: a proxy between them
stops (connections are refused at once), and a network partition (``partition``: nothing answers and
nothing refuses, so only the TCP defaults end the waits).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

from ledger.store import DatabaseURL, open_app
from tests.catalog.kit import ALICE, BOB
from tests.conftest import PG_URL
from tests.reliability.partition import partition_for
from tests.reliability.pgproxy import PgProxy
from tests.service.conftest import ROLES, seed
from tests.service.server import Server, tokens

CLIENTS = [("alice", ALICE), ("bob", BOB)] * 4
#: the clients' read timeout: an answer that does not come fails the test (a partition without TCP
#: defaults waits about 15 minutes; with them, seconds)
HANG = 60.0


def _gone_and_back(pg_url: str, url: str, where: str, go: Callable[[], None], back: Callable[[], None]) -> None:
    """A server on ``url`` (``where`` is how its errors name the database); ``go`` takes the database away
    under it, ``back`` returns it."""
    chat_a, chat_b, _ = seed(pg_url)
    secrets = tokens(pg_url, alice=ROLES["alice"], bob=ROLES["bob"])
    with Server(url) as server:
        def send(n: int, who: str, answers: list[Any]) -> None:
            chat = chat_a if who == "alice" else chat_b
            with server.client(secrets[who], timeout=HANG) as http:
                r = http.post("/v1/commands", json={"type": "set_title", "chat_id": chat, "title": f"t{n}",
                                                    "idempotency_key": f"gone-{n}"})
                answers.append((n, r.status_code, r.json()))

        def all_send() -> list[Any]:
            answers: list[Any] = []
            threads = [threading.Thread(target=send, args=(n, who, answers)) for n, (who, _) in enumerate(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sorted(answers)

        def versions() -> list[int]:
            app = open_app(pg_url)  # (directly, not through the fault)
            try:
                return [len(app.stream(uuid.UUID(c))) for c in (chat_a, chat_b)]
            finally:
                app.close()

        before = versions()
        go()
        gone = all_send()
        assert len(gone) == len(CLIENTS)
        for _, status, body in gone:
            assert status == 503 and body["error"]["code"] == "database_unavailable", body
            assert f"PostgreSQL at {where}/" in body["error"]["message"], body
        with server.client(timeout=HANG) as http:
            ready = http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "database_unavailable", ready.text
        assert versions() == before  # nothing recorded

        back()
        server.wait_ready(HANG)  # the pool reconnects first: a request in that moment is refused, not lost
        again = all_send()
        assert [(status, body["ok"]) for _, status, body in again] == [(200, True)] * len(CLIENTS), again
        assert all_send() == again  # the same keys: each recorded once


def test_requests_while_the_database_is_gone_are_answered_and_record_nothing(pg_url: str) -> None:
    db = DatabaseURL.parse(PG_URL)
    with PgProxy((db.host, db.port)) as proxy:
        _gone_and_back(pg_url, proxy.through(pg_url), f"127.0.0.1:{proxy.port}", proxy.stop, proxy.heal)


def test_requests_across_a_partition_are_answered_and_record_nothing(pg_url: str) -> None:
    with partition_for(PG_URL) as partition:
        _gone_and_back(pg_url, partition.through(pg_url), f"{partition.address}:{partition.port}",
                       partition.cut, partition.heal)
