"""Upstream chatd's state-machine tests (coder/coder ``coderd/x/chatd/chatstate``), ported: each test's id
carries the upstream name it ports. Run on the real handler, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from commands.cli.main import main
from ledger.chat import events as ev
from ledger.chat.views import message_rows
from tests.chat.helpers import ORG, OWNER, chat_state, run

DATA = Path(__file__).parent / "data"
MESSAGE_EDIT = "Tool execution interrupted by message edit"


def rows(app: Any, chat_id: str) -> list[dict[str, Any]]:
    return message_rows(app.stream(uuid.UUID(chat_id)))


def tool_call(call_id: str, name: str = "execute") -> dict[str, Any]:
    return {"type": "tool-call", "tool_call_id": call_id, "tool_name": name, "args": {"cmd": "ls"}}


# -- synthetic_cancellation_test.go ------------------------------------------------------------------------

def test_TestSyntheticCancellation_EditMessage_replacement_insertion(app):
    """An assistant tool call and a user message committed in one step; editing the user message keeps the
    assistant message, inserts one synthetic cancellation for its outstanding call, then the replacement
    (the ledger once soft-deleted the assistant message as the edited prompt's hook prefix)."""
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="first")["chat_id"]
    step = run(app, type="commit_step", chat_id=chat_id, messages=[
        {"role": "assistant", "parts": [tool_call("call_1")]},
        {"role": "user", "parts": [{"type": "text", "text": "second user"}]}])
    assistant_id, second_user_id = step["message_ids"]
    edit = run(app, type="edit_message", chat_id=chat_id, message_id=second_user_id, text="edited")

    edited = [e for e in app.stream(uuid.UUID(chat_id)) if isinstance(e, ev.MessageEdited)][-1]
    assert edited.deleted_message_ids == [second_user_id]
    cancel_id, replacement_id = edit["message_ids"]
    by_id = {r["message_id"]: r for r in rows(app, chat_id)}
    assert not by_id[assistant_id]["deleted"]
    (part,) = by_id[cancel_id]["parts"]
    assert by_id[cancel_id]["role"] == "tool" and part["tool_call_id"] == "call_1"
    assert part["result"] == MESSAGE_EDIT and part["is_error"] is True
    assert by_id[replacement_id]["role"] == "user" and cancel_id < replacement_id
    assert by_id[replacement_id]["parts"][0]["text"] == "edited"


# -- ledgers recorded before the fix ----------------------------------------------------------------------

def test_a_ledger_recorded_before_the_recorded_prefix_rule_replays_unchanged(db_url):
    """The export and ``show --json`` of each chat were written by the code before the fix (it soft-deleted
    the assistant message of the first chat): imported and replayed by today's code, every chat shows exactly
    what it showed then. No upcaster and no rule keyed on a class version is needed: an edit's effect is the
    ``deleted_message_ids`` its ``MessageEdited`` recorded, and the prefix the new rule reads (the
    ``messages`` ahead of ``prompt_message_id`` in ``TurnStarted``/``QueuedPromptPromoted``) was recorded by
    every version of those events. Only the next decision changes."""
    cli = CliRunner()
    imported = cli.invoke(main, ["--db", db_url, "events", "import", str(DATA / "edits-before-recorded-prefix.jsonl")])
    assert imported.exit_code == 0, imported.output
    shows = json.loads((DATA / "edits-before-recorded-prefix-shows.json").read_text())
    assert any(m["role"] == "assistant" and m["deleted"] for s in shows.values() for m in s["messages"])
    for chat_id, then in shows.items():
        now = cli.invoke(main, ["--db", db_url, "show", chat_id, "--json"])
        assert now.exit_code == 0, now.output
        shown = json.loads(now.stdout)
        # `show` has shown usage since these were written: none was reported in these chats, and the rest is
        # what it showed then
        assert shown.pop("usage") == {"total": None, "by_turn": []}
        assert all(m.pop("usage") is None for m in shown["messages"])
        assert shown == then
    verify = cli.invoke(main, ["--db", db_url, "events", "verify"])
    assert verify.exit_code == 0, verify.output


def test_the_recorded_prefix_of_an_imported_chat_decides_its_next_edit(db_url):
    """On the imported ledger, an edit of the chat whose prompt came with a prefix deletes that prefix (a
    recorded fact of the old events) and nothing else."""
    from ledger.store import open_app

    cli = CliRunner()
    assert cli.invoke(main, ["--db", db_url, "events", "import",
                             str(DATA / "edits-before-recorded-prefix.jsonl")]).exit_code == 0
    shows = json.loads((DATA / "edits-before-recorded-prefix-shows.json").read_text())
    # the chat of case 4: an assistant reply and a user message in one step, never edited
    (chat_id,) = [c for c, s in shows.items() if [m["role"] for m in s["messages"]] == ["user", "assistant", "user"]]
    app = open_app(db_url)
    try:
        run(app, type="edit_message", chat_id=chat_id, message_id=3, text="and then?")
        assert [(r["role"], r["deleted"]) for r in rows(app, chat_id)] == [
            ("user", False), ("assistant", False), ("user", True), ("user", False)]
        assert chat_state(app, chat_id).messages[3].prefix == 0
    finally:
        app.close()
