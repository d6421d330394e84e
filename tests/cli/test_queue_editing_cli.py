"""The human forms of the queue-editing commands and the hook options: each CLI form records what its JSON
command records (SQLite)."""

from __future__ import annotations

import json
from uuid import uuid4

from tests.cli.test_cli import LedgerCLI


def _ok(cli: LedgerCLI, *args: str) -> dict:
    result = cli.run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_edit_queued_pause_resume_and_hook_options(sqlite_url: str) -> None:
    cli = LedgerCLI(sqlite_url)
    org, me = str(uuid4()), str(uuid4())
    assert cli.run("catalog", "add-member", "--org", org, "--user", me).exit_code == 0
    assert cli.run("catalog", "create-model", "--org", org, "--provider", "anthropic", "--model", "m",
                   "--context-limit", "1000").exit_code == 0
    chat = _ok(cli, "chat", "create", "--org", org, "--owner", me, "--text", "first")["chat_id"]
    queued = _ok(cli, "chat", "send", chat, "--text", "second", "--allow-tool", "read_file",
                 "--prefix", "[hook] context", "--max-queue-size", "1")
    assert queued["queued_message_id"] == 1
    full = cli.run("chat", "send", chat, "--text", "third", "--max-queue-size", "1", "--json")
    assert full.exit_code == 1 and "queue_full" in full.stderr
    began = _ok(cli, "chat", "edit-queued", chat, "--queued-id", "1", "--editing", "--text", "second, edited")
    assert began["editing_queued_message_id"] == 1
    paused = _ok(cli, "chat", "finish-turn", chat)
    assert (paused["status"], paused["execution_state"]) == ("paused", "P")
    rows = [json.loads(line) for line in cli.run("status", "--status", "paused", "--json").stdout.splitlines()]
    assert [r["chat_id"] for r in rows] == [chat]
    queue = [json.loads(line) for line in cli.run("queue", chat, "--json").stdout.splitlines()]
    assert queue[0]["text"] == "second, edited" and queue[0]["editing_since"] is not None
    resumed = _ok(cli, "chat", "edit-queued", chat, "--queued-id", "1", "--no-editing")
    assert (resumed["status"], resumed["promoted_queued_message_id"]) == ("running", 1)
    show = json.loads(cli.run("show", chat, "--json").stdout)
    assert show["chat"]["hook_allowed_tools"] == ["read_file"]
    texts = [p["text"] for m in show["messages"] for p in m["parts"] if p["type"] == "text"]
    assert texts[-2:] == ["[hook] context", "second, edited"]
    edited = _ok(cli, "chat", "edit", chat, "--message-id", "1", "--text", "first, again", "--allow-tool",
                 "read_file", "--prefix", "[hook] new")
    assert edited["status"] == "running"
    show = json.loads(cli.run("show", chat, "--json").stdout)
    live = [p["text"] for m in show["messages"] if not m["deleted"] for p in m["parts"] if p["type"] == "text"]
    assert live == ["[hook] new", "first, again"]
