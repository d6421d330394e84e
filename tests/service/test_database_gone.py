"""The database goes away under a running server (a real proxy between them stops), while eight clients
send commands at once: every request is answered — 503 ``database_unavailable`` naming the server — and
nothing is recorded; once the database is back, the same commands record, each once.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from ledger.store import DatabaseURL, open_app
from tests.catalog.kit import ALICE, BOB
from tests.conftest import PG_URL
from tests.reliability.pgproxy import PgProxy
from tests.reliability.test_lost_commit_reply import through
from tests.service.conftest import ROLES, seed
from tests.service.server import Server, tokens

CLIENTS = [("alice", ALICE), ("bob", BOB)] * 4


def test_requests_while_the_database_is_gone_are_answered_and_record_nothing(pg_url: str) -> None:
    chat_a, chat_b, _ = seed(pg_url)
    secrets = tokens(pg_url, alice=ROLES["alice"], bob=ROLES["bob"])
    db = DatabaseURL.parse(PG_URL)
    with PgProxy((db.host, db.port)) as proxy, Server(through(proxy, pg_url)) as server:
        def send(n: int, who: str, answers: list[Any]) -> None:
            chat = chat_a if who == "alice" else chat_b
            with server.client(secrets[who], timeout=60.0) as http:
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
            app = open_app(pg_url)  # (directly, not through the proxy)
            try:
                return [len(app.stream(uuid.UUID(c))) for c in (chat_a, chat_b)]
            finally:
                app.close()

        before = versions()
        proxy.stop()
        gone = all_send()
        assert len(gone) == len(CLIENTS)
        for _, status, body in gone:
            assert status == 503 and body["error"]["code"] == "database_unavailable", body
            assert f"PostgreSQL at 127.0.0.1:{proxy.port}/" in body["error"]["message"], body
        assert versions() == before  # nothing recorded

        proxy.heal()
        back = all_send()
        assert [(status, body["ok"]) for _, status, body in back] == [(200, True)] * len(CLIENTS), back
        assert all_send() == back  # the same keys: each recorded once
