"""A network partition between the ledger and PostgreSQL, made for real (``partition``: a veth link into a
network namespace, set down): nothing answers and nothing refuses, so only the connection's own TCP
settings end a wait. Without the ledger's defaults (``TCP_DEFAULTS``) a command waited for the kernel's
retransmissions (still unanswered after 60 s); with them it is answered in about 10 s, and what it says
is true.

The URLs here carry no TCP parameter of their own: the defaults are what is tested.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import msgspec

from commands.handler import run_line
from ledger.store import open_app
from tests.chat.helpers import ORG, OWNER, setup_org
from tests.reliability.partition import Partition

#: a bound on the wait, far above the ~10-12 s the defaults give and far below the kernel's 15 minutes
HANG = 60.0


def _line(payload: dict[str, Any]) -> bytes:
    return msgspec.json.encode(payload)


def _answered(app: Any, line: bytes) -> dict[str, Any]:
    """``line``'s row, from a thread given ``HANG`` seconds: a command that hangs fails the test."""
    rows: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: rows.append(run_line(app, 1, line)), daemon=True)
    worker.start()
    worker.join(HANG)
    assert rows, f"the command was not answered within {HANG} s of the partition"
    return rows[0]


def _chat_created(app: Any) -> str:
    setup_org(app)
    chat = str(uuid.uuid4())
    row = run_line(app, 1, _line({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                  "chat_id": chat, "text": "hello"}))
    assert row["ok"], row
    return chat


def _version(pg_url: str, chat: str) -> int:
    """The chat's version as the server holds it (read directly, not across the link)."""
    app = open_app(pg_url)
    try:
        return len(app.stream(uuid.UUID(chat)))
    finally:
        app.close()


def _message(chat: str) -> bytes:
    return _line({"type": "send_message", "chat_id": chat, "text": "across the link",
                  "idempotency_key": f"{chat}-partition"})


def test_a_partition_before_commit_is_refused_in_seconds_and_records_nothing(
        pg_url: str, partition: Partition) -> None:
    app = open_app(partition.through(pg_url))
    try:
        chat = _chat_created(app)
        partition.cut()  # the pool's connections are open: the next query's segments go unacknowledged
        row = _answered(app, _message(chat))
        assert row["ok"] is False and row["error"]["code"] == "database_unavailable", row
        assert f"PostgreSQL at {partition.address}:{partition.port}/" in row["error"]["message"], row
        assert _version(pg_url, chat) == 1  # nothing recorded

        partition.heal()  # the cut connections are dead; the pool opens new ones
        row = _answered(app, _message(chat))
        assert row["ok"] and row["result"]["version"] == 2, row
        assert _version(pg_url, chat) == 2
    finally:
        app.close()


def test_a_partition_at_commit_is_outcome_unknown_and_the_repeat_records_once(
        pg_url: str, partition: Partition) -> None:
    app = open_app(partition.through(pg_url))
    try:
        chat = _chat_created(app)
        partition.cut_at_commit()  # the server commits; its reply is withheld and the link goes down
        row = _answered(app, _message(chat))
        assert partition.was_cut_at_commit(), "the link was not cut at the COMMIT reply"
        assert row["ok"] is False and row["error"]["code"] == "outcome_unknown", row
        assert f"stream {chat} version 2" in row["error"]["message"], row  # what to check, once reachable
        assert _version(pg_url, chat) == 2  # it was recorded: the answer did not claim otherwise

        partition.heal()
        row = _answered(app, _message(chat))  # the same key: its first decision, not a second message
        assert row["ok"] and row["result"]["version"] == 2, row
        assert _version(pg_url, chat) == 2
    finally:
        app.close()
