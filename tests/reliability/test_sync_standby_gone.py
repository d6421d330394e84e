"""Issue 25, point 1: every wait is bounded. A PostgreSQL primary configured for a synchronous standby that is
not there (it died, nobody reconfigured the primary) makes every COMMIT wait for it — for ever, before. Now a
command answers ``replication_unconfirmed`` after ``--commit-timeout``, naming the stream and version; what it
recorded is committed on the primary (reads see it); a repeat with the same idempotency key is answered as the
first; ``/readyz`` says the database cannot confirm commits; and when the standby is no longer required, all is
well again. The primary is a cluster of the test's own (``initdb``, run as the ``postgres`` user)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import psycopg
import pytest

from tests.service.server import Server, tokens

CLI = [sys.executable, "-m", "commands.cli.main"]
ORG, USER = "0a000000-0000-4000-8000-0000000000e1", "0b000000-0000-4000-8000-0000000000e1"


def _bindir() -> Path | None:
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return Path(out) if (Path(out) / "initdb").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def primary() -> Iterator[str]:
    """A PostgreSQL cluster of this test's own on a free port; its URL (superuser ``postgres``, trust)."""
    bindir = _bindir()
    if bindir is None or os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root, runuser and PostgreSQL's server binaries (pg_config --bindir) to make a cluster")
    root = Path(tempfile.mkdtemp(prefix="chat-ledger-primary-"))
    shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", _free_port()

    def as_postgres(*argv: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, timeout=120)

    as_postgres(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    as_postgres(str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "log"), "-o",
                f"-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root}", "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres?schema=ledger"
    finally:
        as_postgres(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def require_standby(url: str, name: str) -> None:
    """Make the primary wait for a synchronous standby named ``name`` ('' : for none), as a config reload."""
    conninfo = url.split("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if name:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
        else:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while conn.execute("SHOW synchronous_standby_names").fetchone()[0] != name:
            assert time.monotonic() < deadline, "the reload did not take"
            time.sleep(0.05)  # polling the condition above


def apply(url: str, *commands: dict, timeout: str = "1") -> tuple[int, list[dict]]:
    out = subprocess.run([*CLI, "--db", url, "--commit-timeout", timeout, "apply", "-"],
                         input="\n".join(json.dumps(c) for c in commands), capture_output=True, text=True,
                         timeout=120)
    return out.returncode, [json.loads(line) for line in out.stdout.splitlines()]


def test_a_commit_no_standby_confirms_is_answered_within_the_bound_and_settled_by_its_repeat(primary):
    code, rows = apply(primary, {"type": "add_organization_member", "organization_id": ORG, "user_id": USER},
                       {"type": "create_model_config", "organization_id": ORG, "provider": "anthropic",
                        "model": "claude", "context_limit": 200000},
                       {"type": "create_chat", "organization_id": ORG, "owner_id": USER, "text": "hello"})
    assert code == 0, rows
    chat = rows[-1]["result"]["chat_id"]
    version = rows[-1]["result"]["version"]
    secret = tokens(primary, admin={"user": USER, "org": ORG, "role": "admin"})["admin"]
    require_standby(primary, "ghost")
    try:
        title = {"type": "set_title", "chat_id": chat, "title": "unconfirmed", "idempotency_key": "t-1"}
        code, (row,) = apply(primary, title)  # (it returned: before, it waited as long as the standby stayed away)
        assert code == 1 and row["error"]["code"] == "replication_unconfirmed", row
        assert f"stream {chat} version {version + 1}" in row["error"]["message"]
        status = subprocess.run([*CLI, "--db", primary, "status", chat, "--json"], capture_output=True, text=True,
                                timeout=120)
        assert json.loads(status.stdout)["title"] == "unconfirmed"  # committed on the primary
        code, (again,) = apply(primary, title)  # the repeat settles it: answered as the first, nothing new
        assert code == 0 and again["ok"] and again["result"]["version"] == version + 1, again
        with Server(primary, "--write-rate", "0") as server:
            ready = httpx.get(f"{server.base}/readyz", timeout=30)
            assert ready.status_code == 503 and ready.json()["error"]["code"] == "replication_unconfirmed"
            assert "ghost" in ready.json()["error"]["message"]
            require_standby(primary, "")
            server.wait_ready(within=30)  # no standby required any more: ready again
            with server.client(secret) as c:
                r = c.post("/v1/commands", json={"type": "set_title", "chat_id": chat, "title": "confirmed"})
                assert r.status_code == 200 and r.json()["ok"], r.text
    finally:
        require_standby(primary, "")


def test_a_new_ledger_is_made_while_no_standby_confirms_and_its_first_command_is_bounded(primary):
    """Making a ledger's schema and tables is no command: it commits on the primary alone (were the primary lost
    now, the next command makes them again on the new one), so a new ledger does not wait for a standby that has
    gone; its first command is then answered within the bound, as on any ledger."""
    fresh = primary.replace("schema=ledger", "schema=fresh_while_unconfirmed")
    require_standby(primary, "ghost")
    try:
        started = time.monotonic()
        code, rows = apply(fresh, {"type": "add_organization_member", "organization_id": ORG, "user_id": USER})
        assert time.monotonic() - started < 30, "bounded, not as long as the standby stays away"
        assert code == 1 and rows[0]["error"]["code"] == "replication_unconfirmed", rows
        code, rows = apply(fresh, {"type": "add_organization_member", "organization_id": ORG, "user_id": USER})
        assert rows[0]["error"]["code"] in ("already_organization_member", "replication_unconfirmed"), rows
    finally:
        require_standby(primary, "")
    code, rows = apply(fresh, {"type": "add_organization_member", "organization_id": ORG, "user_id": USER})
    assert rows[0]["error"]["code"] == "already_organization_member", rows  # the first was recorded, once
