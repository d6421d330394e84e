"""The conversations view and CLI: status rows equal the rows of the replayed states, on SQLite and
PostgreSQL; `conversation show --at` gives an earlier state."""

from __future__ import annotations

import json
import uuid

from click.testing import CliRunner

from commands.cli.main import main
from ledger.conversation.queries import conversation_view_row


def cli(db_url: str, *args: str) -> str:
    result = CliRunner().invoke(main, ["--db", db_url, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_conversation_cli_and_view(db_url: str, app) -> None:
    cid = str(uuid.uuid4())
    cli(db_url, "conversation", "start", "--id", cid, "--session", "0123456789abcdef01234567")
    cli(db_url, "conversation", "arrive", cid, "--user", "list the files")
    begun = json.loads(cli(db_url, "conversation", "begin", cid, "--json"))
    assert begun["job"] == 1 and begun["status"] == "Running"
    staged = json.loads(cli(db_url, "conversation", "stage", cid, "--job", "1", "--text", "Looking",
                            "--call", 'ls={"path": "."}', "--json"))
    (call,) = staged["tool_calls"]
    assert call["tool_call_id"] == {"session": "0123456789abcdef01234567", "sequence": 1}
    cli(db_url, "conversation", "arrive", cid, "--tool-return", "0123456789abcdef01234567", "1", "a.txt")
    (row,) = [json.loads(line) for line in cli(db_url, "conversation", "status", "--json").splitlines()]
    assert row["status"] == "Running" and row["last_sequence"] == 1 and row["queued_count"] == 1
    done = json.loads(cli(db_url, "conversation", "complete", cid, "--job", "1", "--text", "One file.", "--json"))
    assert done["outcome"] == "completed"
    (row,) = [json.loads(line) for line in cli(db_url, "conversation", "status", cid, "--json").splitlines()]
    state = app.load(uuid.UUID(cid)).state
    expected = conversation_view_row(state)
    assert {k: row[k] for k in expected} == expected
    assert row["version"] == app.load(uuid.UUID(cid)).version
    earlier = json.loads(cli(db_url, "conversation", "show", cid, "--at", "2", "--json"))
    assert earlier["conversation"]["version"] == 2 and len(earlier["boxes"]) == 1
    at_time = app.stream(uuid.UUID(cid))[1].timestamp.isoformat()
    assert json.loads(cli(db_url, "conversation", "show", cid, "--as-of", at_time, "--json")) == earlier
    now = json.loads(cli(db_url, "conversation", "show", cid, "--json"))
    assert len(now["boxes"]) == row["box_count"]
    rebuilt = cli(db_url, "projections", "rebuild", "conversations", "--blue-green")
    assert "equal" in rebuilt and "switched" in rebuilt
