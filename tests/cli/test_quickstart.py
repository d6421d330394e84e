"""Issue 30, point 1: the service quick start shows something. The README's ``tokens create`` line, run after a
demo on a new ledger, gives a token whose ``/v1/chats`` lists the demo's chats; ``tokens create`` refuses an
organization the ledger never saw (``--force`` issues it anyway); ``serve`` refuses a ledger that does not exist
(``--create`` starts one), says it is listening only once it is (naming ``/ui/``), and a taken port is a usage
error naming it."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.cli.test_docs import readme_blocks

CLI = [sys.executable, "-m", "commands.cli.main"]


def run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def readme_line(command: str) -> list[str]:
    """The arguments of the README's ``.venv/bin/chat-ledger COMMAND …`` line (up to a comment)."""
    for block in readme_blocks():
        for line in block.splitlines():
            if line.startswith(f".venv/bin/chat-ledger {command}"):
                return shlex.split(line.split("#")[0])[1:]
    raise AssertionError(f"no `chat-ledger {command}` line in the README")


def start(args: list[str], cwd: Path) -> tuple[subprocess.Popen[str], str]:
    """A ``serve`` process and the line it printed when it said it was listening."""
    proc = subprocess.Popen([*CLI, *args, "--port", "0"], cwd=cwd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    line = proc.stderr.readline()  # the first thing it says (blocks until it does, or exits)
    return proc, line


@pytest.mark.slow
def test_the_readme_quick_start_serves_the_demos_chats(tmp_path):
    assert run("demo", "--sim-chats", "0", cwd=tmp_path).returncode == 0
    made = run(*readme_line("tokens create"), "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    secret = json.loads(made.stdout)["secret"]
    proc, line = start(["serve"], tmp_path)
    try:
        base = re.search(r"on (http://\S+) ", line).group(1)
        chats = httpx.get(f"{base}/v1/chats", headers={"Authorization": f"Bearer {secret}"}, timeout=30).json()
        assert len(chats["items"]) >= 2, chats  # the demo's chats of that organization
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_tokens_create_refuses_an_organization_never_seen(tmp_path):
    assert run("init", cwd=tmp_path).returncode == 0
    args = ["tokens", "create", "--user", "0b000000-0000-4000-8000-0000000000a1",
            "--org", "0a000000-0000-4000-8000-0000000000ff", "--role", "member"]
    refused = run(*args, cwd=tmp_path)
    assert refused.returncode == 1 and "organization_not_found" in refused.stderr
    assert "0a000000-0000-4000-8000-0000000000ff" in refused.stderr and "--force" in refused.stderr
    assert json.loads(run("tokens", "list", "--json", cwd=tmp_path).stdout or "[]") == []  # nothing issued
    assert run(*args, "--force", cwd=tmp_path).returncode == 0


def test_serve_refuses_a_ledger_that_does_not_exist_and_creates_one_when_asked(tmp_path):
    refused = run("--db", "sqlite:///missing.db", "serve", "--port", "0", cwd=tmp_path, timeout=60)
    assert refused.returncode == 1 and "database_not_found" in refused.stderr
    assert not (tmp_path / "missing.db").exists()
    proc, line = start(["--db", "sqlite:///new.db", "serve", "--create"], tmp_path)
    try:
        assert "/ui/" in line and "serving" in line, line
        base = re.search(r"on (http://\S+) ", line).group(1)
        # said once it listens: the first request after the line is answered
        assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
        assert (tmp_path / "new.db").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_on_a_postgres_schema_that_does_not_exist_is_database_not_found(pg_url, tmp_path):
    missing = re.sub(r"schema=[^&]+", "schema=never_made_here", pg_url)
    refused = run("--db", missing, "serve", "--port", "0", cwd=tmp_path, timeout=60)
    assert refused.returncode == 1 and "database_not_found" in refused.stderr


def test_a_taken_port_is_an_error_naming_it(tmp_path):
    assert run("init", cwd=tmp_path).returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run("serve", "--port", str(port), cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and f"port {port}" in out.stderr and "taken" in out.stderr
    assert "Traceback" not in out.stderr and "serving" not in out.stderr


# -- issue 30, point 6: small things -----------------------------------------------------------------------------

def _status_ids(tmp_path: Path, db: str, *args: str) -> list[str]:
    out = run("--db", db, "status", "--json", *args, cwd=tmp_path)
    return [json.loads(line)["chat_id"] for line in out.stdout.splitlines()]


def test_a_seed_gives_the_same_ids_on_a_new_ledger_and_new_ones_beside_its_run(tmp_path):
    for db in ("sqlite:///one.db", "sqlite:///two.db"):
        assert run("--db", db, "simulate", "--chats", "2", "--seed", "5", cwd=tmp_path).returncode == 0
    first = _status_ids(tmp_path, "sqlite:///one.db")
    assert first and sorted(first) == sorted(_status_ids(tmp_path, "sqlite:///two.db"))
    assert run("--db", "sqlite:///one.db", "simulate", "--chats", "2", "--seed", "5", cwd=tmp_path).returncode == 0
    again = _status_ids(tmp_path, "sqlite:///one.db")
    assert len(again) == 2 * len(first) and set(first) < set(again)  # a repeat here: new chats beside
    salted = run("--db", "sqlite:///three.db", "simulate", "--chats", "2", "--seed", "5", "--salt", "x", cwd=tmp_path)
    assert salted.returncode == 0 and not set(_status_ids(tmp_path, "sqlite:///three.db")) & set(first)


def test_status_limit_shows_the_newest_and_sort_orders(tmp_path):
    assert run("simulate", "--chats", "4", "--seed", "2", cwd=tmp_path).returncode == 0
    rows = [json.loads(line) for line in run("status", "--json", cwd=tmp_path).stdout.splitlines()]
    oldest_first = [r["chat_id"] for r in rows]
    assert [r["updated_at"] for r in rows] == sorted(r["updated_at"] for r in rows)
    assert _status_ids(tmp_path, "sqlite:///chat-ledger.db", "--limit", "2") == oldest_first[::-1][:2]
    assert _status_ids(tmp_path, "sqlite:///chat-ledger.db", "--sort", "newest") == oldest_first[::-1]
    assert _status_ids(tmp_path, "sqlite:///chat-ledger.db", "--limit", "2", "--sort", "oldest") == oldest_first[:2]


def test_show_says_empty_for_an_empty_queue_and_an_unknown_chat_is_named(tmp_path):
    org, user = "0a000000-0000-4000-8000-000000000001", "0b000000-0000-4000-8000-0000000000a1"
    lines = "\n".join(json.dumps(c) for c in (
        {"type": "add_organization_member", "organization_id": org, "user_id": user},
        {"type": "create_model_config", "organization_id": org, "provider": "anthropic", "model": "claude",
         "context_limit": 200_000},
        {"type": "create_chat", "organization_id": org, "owner_id": user, "text": "hello"}))
    made = subprocess.run([*CLI, "apply", "-"], input=lines, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    chat = json.loads(made.stdout.splitlines()[-1])["result"]["chat_id"]
    assert "queue: (empty)" in run("show", chat, cwd=tmp_path).stdout
    missing = "0f000000-0000-4000-8000-0000000000ff"
    out = subprocess.run([*CLI, "status", missing], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and f"chat {missing} not found" in out.stderr


def test_a_bad_output_path_is_a_usage_error_naming_it(tmp_path):
    assert run("simulate", "--chats", "1", "--seed", "3", cwd=tmp_path).returncode == 0
    (chat,) = _status_ids(tmp_path, "sqlite:///chat-ledger.db")
    for option in ("--html", "-o"):
        target = str(tmp_path / "no" / "such" / "dir" / "page.html")
        out = subprocess.run([*CLI, "audit", chat, option, target], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 2 and target in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_json_help_says_json_lines_where_the_output_is_json_lines(tmp_path):
    assert run("simulate", "--chats", "2", "--seed", "3", cwd=tmp_path).returncode == 0
    chat = _status_ids(tmp_path, "sqlite:///chat-ledger.db")[0]
    for argv in (["status"], ["states"], ["unresolved"], ["queue", chat], ["projections", "status"],
                 ["events", "stats"], ["audit", chat], ["tokens", "list"], ["show", chat], ["events", "verify"]):
        out = subprocess.run([*CLI, *argv, "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        lines = [line for line in out.stdout.splitlines() if line.strip()]
        helptext = subprocess.run([*CLI, *argv[:2 if argv[0] in ("projections", "events", "tokens") else 1],
                                   "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60).stdout
        says_lines = "JSON Lines" in " ".join(helptext.split())
        if len(lines) > 1:
            assert says_lines, (argv, "prints JSON Lines but its help does not say so")
        if not says_lines:
            assert len(lines) <= 1, argv


def test_create_chat_over_http_defaults_its_owner_to_the_tokens_user(db_url):
    from tests.catalog.kit import ALICE, ORG
    from tests.service.conftest import ROLES, seed
    from tests.service.server import Server, tokens

    seed(db_url)
    secret = tokens(db_url, alice=ROLES["alice"])["alice"]
    with Server(db_url) as server, server.client(secret) as c:
        made = c.post("/v1/commands", json={"type": "create_chat", "organization_id": ORG, "text": "mine"}).json()
        assert made["ok"], made
        assert c.get(f"/v1/chats/{made['result']['chat_id']}").json()["owner_id"] == ALICE
    out = subprocess.run([*CLI, "--db", db_url, "apply", "-"], input=json.dumps(
        {"type": "create_chat", "organization_id": ORG, "text": "whose?"}), capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "owner_id" in out.stdout  # the local administrator names the owner
