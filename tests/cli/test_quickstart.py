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
