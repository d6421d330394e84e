"""A command whose events are large (a multi-megabyte tool result or message) is recorded like any other.

Found by the benchmark: a PostgreSQL save of a few MB in one statement, sent in psycopg's pipeline mode
(psycopg 3.3, libpq 18), never completed — the end of the statement stayed in the client's output buffer
while the client waited for the reply, and the connection held the events table's lock, so every other
writer waited too. The recorder no longer pipelines (``ledger/recorders/postgres.py``). The command runs in
a real ``chat-ledger apply`` process with a deadline: a hang fails the test instead of the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from uuid import uuid4

from tests.cli.test_cli import LedgerCLI, new_org

#: larger than the size at which the pipelined statement hung here (between 4 and 7 MB)
BIG = 12 * 1024 * 1024


def test_a_twelve_megabyte_message_is_recorded_and_read_back(db_url: str) -> None:
    me = str(uuid4())
    org = new_org(LedgerCLI(db_url), me)
    chat_id = str(uuid4())
    text = "x" * BIG
    lines = "".join(json.dumps(c) + "\n" for c in (
        {"type": "create_chat", "chat_id": chat_id, "organization_id": org, "owner_id": me, "text": "hi"},
        {"type": "commit_step", "chat_id": chat_id, "messages": [
            {"role": "assistant", "parts": [{"type": "text", "text": text}]}]},
        {"type": "set_title", "chat_id": chat_id, "title": "after the big one"},
    ))
    run = subprocess.run([sys.executable, "-m", "commands.cli.main", "--db", db_url, "apply", "-"], input=lines,
                         capture_output=True, text=True, timeout=120)
    results = [json.loads(line) for line in run.stdout.splitlines()]
    assert run.returncode == 0 and [r["ok"] for r in results] == [True, True, True], run.stderr[-2000:]
    shown = json.loads(LedgerCLI(db_url).run("show", chat_id, "--json").stdout)
    assert shown["chat"]["title"] == "after the big one"
    assert [p["text"] for p in shown["messages"][-1]["parts"]] == [text]
