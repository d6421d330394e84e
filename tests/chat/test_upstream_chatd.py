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
METADATA = ("title_source", "plan_mode", "pinned_at", "workspace_id", "build_id", "agent_id", "shared", "labels")


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
        # and the chat metadata since added: none recorded then (the title was derived from the first message)
        assert {k: shown["chat"].pop(k) for k in METADATA} == {
            "title_source": "fallback", "plan_mode": None, "pinned_at": None, "workspace_id": None,
            "build_id": None, "agent_id": None, "shared": False, "labels": {}}
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


# -- resume_ownership_test.go ----------------------------------------------------------------------------

def _resume(app: Any, chat_id: str, how: str) -> None:
    state = chat_state(app, chat_id)
    if how == "send":
        run(app, type="send_message", chat_id=chat_id, text="resume")
    elif how == "edit":
        first_user = next(m.message_id for m in state.messages if m.role == "user" and not m.deleted)
        run(app, type="edit_message", chat_id=chat_id, message_id=first_user, text="edited")
    else:
        run(app, type="promote_queued_message", chat_id=chat_id, queued_message_id=state.queue[0].queued_message_id)


@pytest.mark.parametrize("state, how", [
    pytest.param("W", "send", id="TestResumeFromIdleClearsOwnership/SendMessageFromWaiting"),
    pytest.param("E1", "send", id="TestResumeFromIdleClearsOwnership/SendMessageFromErrorWithQueue"),
    pytest.param("W", "edit", id="TestResumeFromIdleClearsOwnership/EditMessageFromWaiting"),
    pytest.param("E1", "promote", id="TestResumeFromIdleClearsOwnership/PromoteQueuedMessageFromErrorWithQueue"),
    # the same rule from the other idle states (the ledger's reading of "idle": W, E0, E1, E1P, P)
    pytest.param("E0", "send", id="E0-send"), pytest.param("E0", "edit", id="E0-edit"),
    pytest.param("E1", "edit", id="E1-edit"), pytest.param("P", "edit", id="P-edit"),
    pytest.param("P", "promote", id="P-promote"), pytest.param("E1P", "promote", id="E1P-promote"),
])
def test_TestResumeFromIdleClearsOwnership(app, state, how):
    """An owned idle chat that resumes is running with no worker and no runner; the event says so, and so
    do the views (chat_status) and the audit timeline."""
    from ledger.audit.timeline import timeline
    from ledger.chat.views import status_values
    from tests.chat.helpers import chat_in

    chat_id = chat_in(app, state)
    worker, runner = uuid.uuid4(), uuid.uuid4()
    run(app, type="acquire", chat_id=chat_id, worker_id=str(worker), runner_id=str(runner))
    _resume(app, chat_id, how)
    after = chat_state(app, chat_id)
    assert after.status == "running" and after.worker_id is None and after.runner_id is None
    cleared = [e for e in app.stream(uuid.UUID(chat_id)) if isinstance(e, ev.OwnershipCleared)]
    assert len(cleared) == 1 and (cleared[0].worker_id, cleared[0].runner_id) == (worker, runner)
    row = status_values(after)
    assert row["worker_id"] is None and row["runner_id"] is None
    events = list(app.stream(uuid.UUID(chat_id)))
    assert any("ownership cleared" in e["summary"] for e in timeline(events, None)["events"])


@pytest.mark.parametrize("state", ["R0", "R1", "A1"])
def test_TestEditMessageFromRunningKeepsOwnership(app, state):
    """An edit (or, from A1, a promotion) of a busy chat keeps its worker and runner, and records no
    OwnershipCleared."""
    from tests.chat.helpers import RUNNER, WORKER, chat_in

    chat_id = chat_in(app, state)
    _resume(app, chat_id, "promote" if state == "A1" else "edit")
    after = chat_state(app, chat_id)
    assert after.status == "running"
    assert (str(after.worker_id), str(after.runner_id)) == (WORKER, RUNNER)
    assert not [e for e in app.stream(uuid.UUID(chat_id)) if isinstance(e, ev.OwnershipCleared)]


def test_an_unowned_idle_resume_records_no_ownership_change(app):
    from tests.chat.helpers import chat_in

    chat_id = chat_in(app, "W", owned=False)
    _resume(app, chat_id, "send")
    assert not [e for e in app.stream(uuid.UUID(chat_id)) if isinstance(e, ev.OwnershipCleared)]


# -- receipt_test.go -------------------------------------------------------------------------------------

def receipt(status: str = "succeeded", **outcome: Any) -> dict[str, Any]:
    """A terminal receipt as chatd's ``ReceiptParts`` builds it: a text fallback, then one outcome part."""
    if not outcome:
        outcome = {"value": {"a": 1}} if status == "succeeded" else {
            "error": {"code": "validation_exhausted", "message": "no valid output"}}
    part = {"type": "structured-output-outcome", "request_id": str(uuid.uuid4()), "status": status, **outcome}
    return {"role": "assistant", "visibility": "user",
            "parts": [{"type": "text", "text": json.dumps(outcome.get("value"))}, part]}


def test_TestTerminalReceipts_R0_commits_with_the_turn_and_keeps_history_version(app):
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="q")["chat_id"]
    before = chat_state(app, chat_id)
    run(app, type="finish_turn", chat_id=chat_id, terminal_messages=[receipt()])
    after = chat_state(app, chat_id)
    assert after.status == "waiting"
    assert after.history_version == before.history_version
    last = rows(app, chat_id)[-1]
    assert last["role"] == "assistant" and last["visibility"] == "user"
    assert last["parts"][1]["type"] == "structured-output-outcome"


def test_TestTerminalReceipts_R1_cancellation_then_receipt_then_promoted_head(app):
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="q")["chat_id"]
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [tool_call("call_9")]}])
    run(app, type="send_message", chat_id=chat_id, text="queued")
    n = len(rows(app, chat_id))
    run(app, type="finish_turn", chat_id=chat_id, terminal_messages=[receipt()])
    added = rows(app, chat_id)[n:]
    assert [r["role"] for r in added] == ["tool", "assistant", "user"]
    assert added[0]["parts"][0]["tool_call_id"] == "call_9"
    assert added[1]["visibility"] == "user" and added[2]["parts"][0]["text"] == "queued"
    after = chat_state(app, chat_id)
    assert after.history_version == after.version  # the promoted head advanced it


def test_TestTerminalReceipts_FinishError_commits_the_receipt_before_parking(app):
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="q")["chat_id"]
    run(app, type="finish_error", chat_id=chat_id, error={"message": "boom"},
        terminal_messages=[receipt("failed")])
    assert chat_state(app, chat_id).status == "error"
    assert rows(app, chat_id)[-1]["visibility"] == "user"


def test_TestTerminalReceipts_FinishInterruption_takes_the_receipt_last(app):
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="q")["chat_id"]
    run(app, type="acquire", chat_id=chat_id, worker_id=str(uuid.uuid4()), runner_id=str(uuid.uuid4()))
    run(app, type="interrupt", chat_id=chat_id, reason="test")
    partial = {"role": "assistant", "parts": [{"type": "text", "text": "partial"}]}
    run(app, type="finish_interruption", chat_id=chat_id, partial_messages=[partial],
        terminal_messages=[receipt("canceled", error={"code": "interrupted", "message": "interrupted"})])
    shown = rows(app, chat_id)
    assert [r["visibility"] for r in shown[-2:]] == ["both", "user"]


def test_TestTerminalReceipts_a_receipt_does_not_hide_an_outstanding_tool_call(app):
    from ledger.errors import LedgerError

    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="q")["chat_id"]
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [tool_call("call_2")]}])
    run(app, type="acquire", chat_id=chat_id, worker_id=str(uuid.uuid4()), runner_id=str(uuid.uuid4()))
    run(app, type="interrupt", chat_id=chat_id, reason="test")
    version = chat_state(app, chat_id).version
    with pytest.raises(LedgerError, match="outstanding tool calls"):
        run(app, type="finish_interruption", chat_id=chat_id, terminal_messages=[receipt()])
    assert chat_state(app, chat_id).version == version


@pytest.mark.parametrize("bad", [
    pytest.param({**receipt(), "visibility": "both"}, id="visibility-both"),
    pytest.param({"role": "assistant", "visibility": "user", "parts": [{"type": "text", "text": "x"}]}, id="text-only"),
    pytest.param(receipt("succeeded", value={"a": 1}, error={"code": "interrupted", "message": "x"}), id="value-and-error"),
    pytest.param(receipt("failed", error={"code": "interrupted", "message": "x"}), id="code-of-another-status"),
    pytest.param({**receipt(), "role": "user"}, id="role-user"),
])
@pytest.mark.parametrize("kind", ["finish_turn", "finish_error"])
def test_TestTerminalReceipts_anything_but_a_valid_receipt_is_rejected(app, bad, kind):
    from ledger.errors import LedgerError

    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="q")["chat_id"]
    version = chat_state(app, chat_id).version
    extra = {"error": {"message": "boom"}} if kind == "finish_error" else {}
    with pytest.raises(LedgerError, match="not a structured output receipt"):
        run(app, type=kind, chat_id=chat_id, terminal_messages=[bad], **extra)
    assert chat_state(app, chat_id).version == version


def test_TestTerminalReceipts_an_outcome_without_its_data_is_refused_at_decoding(app):
    from ledger.errors import LedgerError

    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="q")["chat_id"]
    bad = {"role": "assistant", "visibility": "user", "parts": [{"type": "structured-output-outcome"}]}
    with pytest.raises(LedgerError) as e:
        run(app, type="finish_turn", chat_id=chat_id, terminal_messages=[bad])
    assert e.value.code == "invalid_command"
