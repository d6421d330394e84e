"""A view row as large as what was recorded (a tool call's arguments of many megabytes) is written like any other.

The ledger's PostgreSQL insert, pipelined, never completed at this size (psycopg 3.3, libpq 18;
tests/store/test_large_saves.py). The views' small batches are written by a pipelined ``executemany``, which
was checked here not to have that failure; this test keeps it so. ``projections catch-up`` runs in a real
process with a deadline: a hang fails the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from uuid import uuid4

from tests.cli.test_cli import LedgerCLI, new_org

BIG = 12 * 1024 * 1024


def test_twelve_megabytes_of_tool_call_arguments_reach_the_views(db_url: str) -> None:
    cli = LedgerCLI(db_url)
    me = str(uuid4())
    org = new_org(cli, me)
    chat_id = str(uuid4())
    args = {"path": "big.txt", "content": "y" * BIG}
    lines = "".join(json.dumps(c) + "\n" for c in (
        {"type": "create_chat", "chat_id": chat_id, "organization_id": org, "owner_id": me, "text": "hi"},
        {"type": "commit_step", "chat_id": chat_id, "messages": [{"role": "assistant", "parts": [
            {"type": "tool-call", "tool_call_id": "call_big", "tool_name": "write", "args": args}]}]},
    ))
    applied = cli.run("apply", "-", input=lines)
    assert applied.exit_code == 0, applied.output[-2000:]
    caught = subprocess.run([sys.executable, "-m", "commands.cli.main", "--db", db_url, "projections", "catch-up"],
                            capture_output=True, text=True, timeout=120)
    assert caught.returncode == 0, caught.stderr[-2000:]
    rows = [json.loads(line) for line in cli.run("unresolved", chat_id, "--json").stdout.splitlines()]
    assert [(r["tool_call_id"], r["args"]) for r in rows] == [("call_big", args)]
