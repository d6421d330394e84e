"""Lost replies to COMMIT (issue 13 point 1), produced for real: the ledger talks to PostgreSQL through a
loopback proxy (``pgproxy``) that closes the connection instead of forwarding the server's
``CommandComplete COMMIT`` — after the server committed.

* Every command type that writes, with and without an idempotency key, loses the reply to its commit
  once: each is recorded exactly once and answers exactly what a fault-free run of the same commands on
  another schema answers; the two logs are equal (topics and payloads, times aside).
* The server vanishes right after committing (the proxy then refuses every connection): the command is
  refused with ``outcome_unknown`` naming the stream and version to check; healed, that check
  (``chat-ledger audit``) shows the truth, and the command's idempotent repeat returns its first result.
* A server that has gone (a stopped proxy): commands are refused with ``database_unavailable``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from commands.handler import command_from_dict, command_types, execute
from ledger.chat import events as ev
from ledger.errors import LedgerError
from ledger.store import open_app
from tests.chat.helpers import ORG, OWNER, setup_org
from tests.reliability.command_script import NEEDS_SEALING, normalized_log, script, untimed, with_key
from tests.reliability.pgproxy import PgProxy

ROOT = Path(__file__).resolve().parents[2]


def chat_through(proxy: PgProxy, pg_url: str) -> tuple[str, Any, str]:
    """The proxied URL, an application on it, and a chat created there."""
    url = proxy.through(pg_url)
    app = open_app(url)
    setup_org(app)
    chat_id = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                              "text": "hello"}))["chat_id"]
    return url, app, chat_id


def outcome(app: Any, command: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", untimed(execute(app, command_from_dict(command)))  # (ledgers compared ran at other times)
    except LedgerError as e:
        return "refused", e.to_dict()


def commands_of(tag: str, keyed: bool) -> Iterator[Any]:
    """The script's steps; keyed: each with its own key, then once more with the same key."""
    for i, step in enumerate(script(tag)):
        if not keyed:
            yield step
            continue
        keyed_step = (lambda s, k: (lambda results: with_key(s(results), k)) if callable(s) else with_key(s, k))(
            step, f"{tag}-{i}")
        yield keyed_step
        yield keyed_step


@pytest.mark.parametrize("keyed", [False, True])
def test_reconcile_invalid_state_is_recorded_once_when_its_commit_reply_is_lost(
        pg_url: str, clean_pg_url: str, pg_proxy: PgProxy, keyed: bool) -> None:
    """The one writing command the script cannot reach: the same invalid chat (a stored event no decision
    records, as an imported log may hold) on both schemas, then reconcile with its COMMIT reply lost."""
    from tests.chat.helpers import invalid_chat

    faulty, clean = open_app(pg_proxy.through(pg_url)), open_app(clean_pg_url)
    try:
        answers = []
        for app, armed in ((clean, False), (faulty, True)):
            setup_org(app)
            chat_id = invalid_chat(app)
            command = {"type": "reconcile_invalid_state", "chat_id": chat_id,
                       **({"idempotency_key": "reconcile-1"} if keyed else {})}
            if armed:
                pg_proxy.arm()
            answers.append(outcome(app, command))
            if armed:
                assert pg_proxy.disarm()
            if keyed:
                assert outcome(app, command) == answers[-1]  # a repeat returns the first result
        (ok_clean, clean_result), (ok_faulty, faulty_result) = answers
        assert ok_clean == ok_faulty == "ok"
        ids = ("chat_id", "turn_id")  # the two chats' own ids (the turn id is derived from the chat's)
        assert {k: v for k, v in faulty_result.items() if k not in ids} == \
            {k: v for k, v in clean_result.items() if k not in ids}
        topics = [[n.topic for n in a.notifications(0, 10_000) if str(n.originator_id) == r["chat_id"]]
                  for a, r in ((clean, clean_result), (faulty, faulty_result))]
        assert topics[0] == topics[1] and topics[0][-1].endswith("InvalidStateReconciled")
        assert topics[0].count(topics[0][-1]) == 1
    finally:
        faulty.close()
        clean.close()


def test_every_writing_command_is_recorded_once_when_its_commit_reply_is_lost(
        pg_url: str, clean_pg_url: str, pg_proxy: PgProxy) -> None:
    proxy = pg_proxy
    faulty, clean = open_app(proxy.through(pg_url)), open_app(clean_pg_url)
    try:
        seen_types: set[str] = set()
        writes = 0
        for tag, keyed in (("plain", False), ("keyed", True)):
            results: list[Any] = []
            for step in commands_of(tag, keyed):
                command = step(results) if callable(step) else step
                seen_types.add(command["type"])
                head = clean.head()
                expected = outcome(clean, command)
                wrote = clean.head() > head
                proxy.arm()
                got = outcome(faulty, command)
                dropped = proxy.disarm()
                assert got == expected, command
                assert dropped == wrote, (command, "a write whose COMMIT reply was not dropped" if wrote
                                          else "a COMMIT reply dropped for a command that writes nothing")
                assert expected[0] == "ok", (command, expected)
                writes += wrote
                results.append(got)
        # reconcile_invalid_state needs a chat in an invalid state, which no command makes: its own test below
        assert seen_types | {"reconcile_invalid_state"} | NEEDS_SEALING == set(command_types())
        assert proxy.drops == writes == 2 * (len(script("x")) - 1)  # all but validate_steer write
        assert normalized_log(faulty) == normalized_log(clean)
    finally:
        faulty.close()
        clean.close()


def test_outcome_unknown_when_the_server_vanishes_after_committing(pg_url: str, pg_proxy: PgProxy) -> None:
    proxy = pg_proxy
    url, app, chat_id = chat_through(proxy, pg_url)
    try:
        step = {"type": "commit_step", "chat_id": chat_id, "idempotency_key": "step-1",
                "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "the answer"}]}]}
        proxy.arm(vanish=True)
        with pytest.raises(LedgerError) as refused:
            execute(app, command_from_dict(step))
        assert proxy.drops == 1
        assert refused.value.code == "outcome_unknown"
        message = refused.value.message
        assert f"stream {chat_id} version 2" in message and "may have been recorded" in message
        assert f"`chat-ledger audit {chat_id} --at 2`" in message

        proxy.heal()
        audit = subprocess.run([sys.executable, "-c", "from commands.cli.main import main; main()", "--db", url,
                                "audit", chat_id, "--at", "2", "--json"],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert audit.returncode == 0, audit.stderr
        timeline = [json.loads(line) for line in audit.stdout.splitlines()]
        assert [(e["version"], e["type"], e["idempotency_key"]) for e in timeline][-1] == (2, "StepCommitted", "step-1")

        repeat = execute(app, command_from_dict(step))  # the same key: the first result, nothing new
        assert (repeat["version"], repeat["message_ids"]) == (2, [2])
        assert [type(e) for e in app.stream(uuid.UUID(chat_id))] == [ev.ChatCreated, ev.StepCommitted]
    finally:
        app.close()


def test_a_server_that_has_gone_is_database_unavailable_until_it_is_back(
        pg_url: str, pg_proxy: PgProxy, tmp_path: Path) -> None:
    """Refused while the server is gone (from a running process and from a new one), served again as soon
    as it is back: the pool does not go on backing off (its default waited for minutes)."""
    proxy = pg_proxy
    url, app, chat_id = chat_through(proxy, pg_url)
    try:
        proxy.stop()
        for attempt in range(4):  # an outage long enough for a backing-off pool to fall behind
            with pytest.raises(LedgerError) as refused:
                execute(app, command_from_dict({"type": "set_title", "chat_id": chat_id, "title": f"never {attempt}"}))
            assert refused.value.code == "database_unavailable"
            assert f"PostgreSQL at 127.0.0.1:{proxy.port}/" in refused.value.message
        commands = tmp_path / "one.jsonl"
        commands.write_text(json.dumps({"type": "set_title", "chat_id": chat_id, "title": "never"}) + "\n")
        cli = subprocess.run([sys.executable, "-c", "from commands.cli.main import main; main()", "--db", url,
                              "apply", str(commands)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert cli.returncode == 1
        assert cli.stderr.startswith("error: database_unavailable: cannot reach PostgreSQL at 127.0.0.1:"), cli.stderr
        direct = open_app(pg_url)
        try:
            assert [type(e) for e in direct.stream(uuid.UUID(chat_id))] == [ev.ChatCreated]
        finally:
            direct.close()

        proxy.heal()
        back = execute(app, command_from_dict({"type": "set_title", "chat_id": chat_id, "title": "back"}))
        assert back["version"] == 2
    finally:
        app.close()
