"""Group commit (``commands.groupcommit``): commands of concurrent callers saved several to a transaction.

* Property: batches of commands on a few chats (creates, messages, titles, ends, interrupts, membership
  changes, repeats and reuses of idempotency keys, malformed lines) give the rows and the log that running
  the same commands one after another gives, in the order the batch reports — in memory, on SQLite and on
  PostgreSQL.
* Faults, made for real: the reply to the batch's COMMIT lost (a proxy closes the connection after the
  server committed): every command recorded once, the rows those of a fault-free run; the server gone right
  after committing: each command refused with ``outcome_unknown`` naming its own stream; another process
  wrote one of the batch's streams first: the batch is not saved, and every command is then recorded once,
  the stale one decided again on the other process's write; the server gone (at the save, or at the reads
  of a decision): nothing recorded, the batch tried again together, then each command refused
  ``database_unavailable``.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.groupcommit import Job, run_batch
from commands.handler import command_from_dict, execute, run_line
from commands.metrics import COUNTERS
from ledger.store import ChatLedgerApp, open_app
from tests.chat.helpers import ORG, OWNER, setup_org
from tests.conftest import PG_URL, _with_schema, drop_schema, require_pg
from tests.reliability.command_script import ids, normalized_log, untimed
from tests.reliability.pgproxy import PgProxy

CHATS = ids("group-commit", "a", "b", "c")
#: the chats of the property tests: the first two exist before the batches run
MANY = ids("group-commit", "a", "b", "c", "d", "e")
OTHER = "5b1d7e9a-2c4f-4a6b-9d8e-00000000a12e"


def _command(kind: str, chat: int, text: int, key: int | None, other: int) -> bytes:
    chat_id = MANY[chat]
    body: dict[str, Any] = {
        "create": {"type": "create_chat", "organization_id": ORG, "owner_id": OWNER, "chat_id": chat_id,
                   "text": f"hello {text}"},
        "child": {"type": "create_chat", "organization_id": ORG, "owner_id": OWNER, "chat_id": chat_id,
                  "parent_chat_id": MANY[other], "text": f"child {text}"},
        "send": {"type": "send_message", "chat_id": chat_id, "text": f"message {text}"},
        "title": {"type": "set_title", "chat_id": chat_id, "title": f"title {text % 2}"},
        "end": {"type": "end_chat", "chat_id": chat_id},
        "interrupt": {"type": "interrupt", "chat_id": chat_id},
        "join": {"type": "add_organization_member", "organization_id": ORG, "user_id": OTHER},
        "leave": {"type": "remove_organization_member", "organization_id": ORG, "user_id": OTHER},
    }[kind]
    if key is not None:
        body["idempotency_key"] = f"key-{key}"
    return msgspec.json.encode(body)


LINES = st.one_of(
    st.builds(_command, st.sampled_from(["create", "child", "send", "send", "send", "title", "end", "interrupt",
                                         "join", "leave"]),
              st.integers(0, len(MANY) - 1), st.integers(0, 5), st.none() | st.integers(0, 3),
              st.integers(0, len(MANY) - 1)),
    st.sampled_from([b"{", b'{"type": "send_message"}', b'{"type": "no_such_command"}']),
)
BATCHES = st.lists(st.lists(LINES, min_size=1, max_size=8), min_size=1, max_size=4)


def _rows(app: Any, batches: list[list[bytes]]) -> tuple[list[list[Any]], list[list[Any]]]:
    """Run ``batches`` on ``app`` through group commit, each batch's rows, and its lines in its order."""
    rows, orders = [], []
    for lines in batches:
        order: list[int] = []
        got = run_batch(app, [Job(line) for line in lines], order=order)
        assert sorted(order) == list(range(len(lines)))
        rows.append([untimed(r) for r in got])
        orders.append([lines[i] for i in order])
        assert all(isinstance(r, dict) for r in got), got
        rows[-1] = [rows[-1][i] for i in order]
    return rows, orders


def _one_by_one(app: Any, ordered: list[list[bytes]]) -> list[list[Any]]:
    return [[untimed(run_line(app, 1, line)) for line in lines] for lines in ordered]


def _check_equivalent(batched: Any, sequential: Any, batches: list[list[bytes]]) -> None:
    for app in (batched, sequential):
        setup_org(app)
        for chat in MANY[:2]:
            execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                            "chat_id": chat, "text": "hello"}))
    rows, ordered = _rows(batched, batches)
    assert rows == _one_by_one(sequential, ordered)
    assert normalized_log(batched) == normalized_log(sequential)


@settings(max_examples=150, deadline=None, database=None)
@given(BATCHES)
def test_a_batch_is_the_commands_one_after_another_in_memory(batches: list[list[bytes]]) -> None:
    batched, sequential = (ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}) for _ in range(2))
    try:
        _check_equivalent(batched, sequential, batches)
    finally:
        batched.close()
        sequential.close()


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(BATCHES)
def test_a_batch_is_the_commands_one_after_another_on_sqlite(tmp_path: Any, batches: list[list[bytes]]) -> None:
    name = uuid.uuid4().hex
    batched, sequential = (open_app(f"sqlite:///{tmp_path / f'{name}-{i}.db'}") for i in range(2))
    try:
        _check_equivalent(batched, sequential, batches)
    finally:
        batched.close()
        sequential.close()


@pytest.fixture
def two_schemas() -> Iterator[tuple[str, str]]:
    require_pg()
    urls = tuple(_with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}") for _ in range(2))
    yield urls  # type: ignore[misc]
    for url in urls:
        drop_schema(url)


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(BATCHES)
def test_a_batch_is_the_commands_one_after_another_on_postgres(batches: list[list[bytes]]) -> None:
    require_pg()
    urls = [_with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}") for _ in range(2)]
    batched, sequential = (open_app(url) for url in urls)
    try:
        _check_equivalent(batched, sequential, batches)
    finally:
        batched.close()
        sequential.close()
        for url in urls:
            drop_schema(url)


# -- faults ----------------------------------------------------------------------------------------------------

def _messages(chats: list[str], n: int) -> list[bytes]:
    return [msgspec.json.encode({"type": "send_message", "chat_id": chat, "text": f"message {n}",
                                 "idempotency_key": f"{chat}-{n}"}) for chat in chats]


def _created(app: Any) -> None:
    setup_org(app)
    for chat in CHATS:
        execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                        "chat_id": chat, "text": "hello"}))


def _batch(app: Any, lines: list[bytes], repeats: bool = False) -> list[Any]:
    """The rows of ``lines`` (one command per chat) run as one batch, checked to be one save (``repeats``:
    no save at all)."""
    saves = []
    save = app.save
    app.save = lambda *a, **k: saves.append(len(a)) or save(*a, **k)
    try:
        rows = run_batch(app, [Job(line) for line in lines])
    finally:
        del app.save
    assert saves[:1] == ([] if repeats else [len(lines)]), saves  # every command in the batch's one transaction
    return rows


def test_a_lost_commit_reply_records_the_batch_once(two_schemas: tuple[str, str], pg_proxy: PgProxy) -> None:
    faulty_url, clean_url = two_schemas
    faulty, clean = open_app(pg_proxy.through(faulty_url)), open_app(clean_url)
    try:
        for app in (faulty, clean):
            _created(app)
        for n in range(3):
            lines = _messages(CHATS, n)
            expected = [untimed(r) for r in _batch(clean, lines)]
            pg_proxy.arm()
            got = [untimed(r) for r in _batch(faulty, lines)]
            assert pg_proxy.disarm(), "the batch's COMMIT reply was not dropped"
            assert got == expected and all(r["ok"] for r in got)
            assert [untimed(r) for r in _batch(faulty, lines, repeats=True)] == expected  # the first results
        assert normalized_log(faulty) == normalized_log(clean)
        assert pg_proxy.drops == 3
    finally:
        faulty.close()
        clean.close()


def test_a_server_gone_after_committing_leaves_each_command_outcome_unknown(
        pg_url: str, pg_proxy: PgProxy) -> None:
    app = open_app(pg_proxy.through(pg_url))
    try:
        _created(app)
        pg_proxy.arm(vanish=True)
        rows = _batch(app, _messages(CHATS, 0))
        assert pg_proxy.drops == 1
        for chat, row in zip(CHATS, rows):
            assert row["ok"] is False and row["error"]["code"] == "outcome_unknown"
            message = row["error"]["message"]
            assert f"stream {chat} version 2" in message, message
            assert all(other not in message for other in CHATS if other != chat), message
        pg_proxy.heal()
        rows = _batch(app, _messages(CHATS, 0), repeats=True)  # the same keys: recorded once, answered as first decided
        assert [(r["ok"], r["result"]["version"]) for r in rows] == [(True, 2)] * len(CHATS)
        for chat in CHATS:
            assert len(app.stream(uuid.UUID(chat))) == 2
    finally:
        app.close()


def test_a_stream_another_process_wrote_first_is_decided_again(pg_url: str) -> None:
    here, there = open_app(pg_url), open_app(pg_url)  # two processes' applications: each its own memory
    try:
        _created(here)
        _batch(here, _messages(CHATS, 0))  # ``here`` now decides on its remembered copies
        execute(there, command_from_dict({"type": "set_title", "chat_id": CHATS[1], "title": "from there"}))
        rows = _batch(here, _messages(CHATS, 1))  # refused at commit (chat b is stale), then one by one
        assert all(r["ok"] for r in rows), rows
        assert [r["result"]["version"] for r in rows] == [3, 4, 3]  # chat b: after the other's title
        for chat, version in zip(CHATS, (3, 4, 3)):
            assert len(here.stream(uuid.UUID(chat))) == version
        assert here.load(uuid.UUID(CHATS[1])).state.title == "from there"
    finally:
        here.close()
        there.close()


def test_a_server_gone_records_nothing_and_says_so(pg_url: str, pg_proxy: PgProxy) -> None:
    """The server gone: a batch decided from memory (no read) fails at its save, one whose decisions read
    the store (a new process) fails there. Either way nothing is recorded, the batch is tried again
    together for ``RECONNECT_SECONDS``, then every command is refused ``database_unavailable``; back, they
    record once."""
    url = pg_proxy.through(pg_url)
    app, fresh = open_app(url), open_app(url)
    try:
        _created(app)
        pg_proxy.stop()
        lines = _messages(CHATS, 0)
        for who in (app, fresh):
            failed = COUNTERS.get("chat_ledger_group_commits_total", outcome="unavailable")
            rows = run_batch(who, [Job(line) for line in lines])
            assert [r["error"]["code"] for r in rows] == ["database_unavailable"] * len(CHATS), rows
            assert all(f"PostgreSQL at 127.0.0.1:{pg_proxy.port}/" in r["error"]["message"] for r in rows), rows
            saves_failed = COUNTERS.get("chat_ledger_group_commits_total", outcome="unavailable") - failed
            assert (saves_failed >= 1) == (who is app)  # from memory: staged, then the save failed
        pg_proxy.heal()
        for chat in CHATS:
            assert len(app.stream(uuid.UUID(chat))) == 1  # nothing of the batches was recorded
        rows = _batch(app, lines)
        assert [(r["ok"], r["result"]["version"]) for r in rows] == [(True, 2)] * len(CHATS)
    finally:
        app.close()
        fresh.close()
