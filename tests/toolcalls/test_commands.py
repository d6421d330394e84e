"""claim_tool_call / record_tool_call_response / cancel_tool_call through the real handler: results,
refusals, idempotency, and what is recorded (on the in-memory store, and on SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid

import pytest

from commands.toolcalls import load_execution
from ledger.chat.views import tool_call_execution_ids, unresolved_rows
from ledger.errors import LedgerError
from ledger.toolcalls import events as ev
from tests.chat.helpers import chat_state, run
from tests.toolcalls.helpers import ASSISTANT_MESSAGE_ID, call_command, cancel, claim, new_chat, respond

NOT_RUN = "tool call was canceled before it ran; no changes were made"


def refused(fn, *args, **kw):
    with pytest.raises(LedgerError) as err:
        fn(*args, **kw)
    return err.value.code


def stream(app, result):
    return app.stream(uuid.UUID(result["execution_id"]))


def test_claim_run_then_saved_then_response(app):
    chat_id = new_chat(app)
    first = claim(app, chat_id, input_sha256="abc")
    expected_id = tool_call_execution_ids(uuid.UUID(chat_id), ASSISTANT_MESSAGE_ID, ["c1"])["c1"]
    assert first["execution_id"] == str(expected_id)
    assert (first["outcome"], first["status"], first["claim_epoch"], first["response"]) == ("run", "running", 1, None)
    again = claim(app, chat_id, input_sha256="abc")
    assert (again["outcome"], again["claim_epoch"], again["response"]) == ("saved", 2, None)
    rec = respond(app, chat_id, body='{"exit_code": 0, "output": "hi"}')
    assert rec["recorded"] is True and rec["status"] == "done"
    assert rec["response"] == {"status": 200, "content_type": "application/json",
                               "body": '{"exit_code": 0, "output": "hi"}'}
    later = claim(app, chat_id)
    assert (later["outcome"], later["claim_epoch"], later["response"]) == ("saved", 3, rec["response"])
    kinds = [type(e).__name__ for e in stream(app, first)]
    assert kinds == ["ToolCallExecutionOpened", "ToolCallClaimed", "ToolCallClaimed",
                     "ToolCallResponseRecorded", "ToolCallClaimed"]


def test_the_execution_id_is_the_unresolved_view_s(memory_app):
    chat_id = new_chat(memory_app, ("c1", "execute"), ("c2", "write_file"))
    rows = unresolved_rows(chat_state(memory_app, chat_id))
    for row in rows:
        assert claim(memory_app, chat_id, row["tool_call_id"], row["tool_name"])["execution_id"] == row["execution_id"]


def test_cancel_before_claim_then_claim_refused(memory_app):
    chat_id = new_chat(memory_app, ("e1", "edit_files"))
    c = cancel(memory_app, chat_id, "e1")
    assert (c["recorded"], c["received"], c["outcome"], c["result"], c["is_error"]) == (
        True, False, "not_run", NOT_RUN, True)
    assert c["status"] == "canceled" and c["claim_epoch"] == 0
    with pytest.raises(LedgerError) as err:
        claim(memory_app, chat_id, "e1", "edit_files")
    assert (err.value.code, err.value.message) == ("tool_call_canceled", "tool call was canceled; it will not run")
    assert refused(respond, memory_app, chat_id, "e1") == "tool_call_canceled"
    again = cancel(memory_app, chat_id, "e1")
    assert again["recorded"] is False and again["outcome"] == "not_run" and again["version"] == c["version"]


def test_cancel_while_execute_runs(memory_app):
    chat_id = new_chat(memory_app)
    claim(memory_app, chat_id)
    c = cancel(memory_app, chat_id)
    assert (c["received"], c["outcome"], c["is_error"]) == (True, "canceled_while_running", False)
    assert c["result"] == {"success": False, "exit_code": -1, "error": "tool call was canceled while running",
                           "canceled": True}
    assert refused(claim, memory_app, chat_id) == "tool_call_canceled"


def test_cancel_while_an_edit_runs_waits_for_its_response(memory_app):
    chat_id = new_chat(memory_app, ("w1", "write_file"))
    claim(memory_app, chat_id, "w1", "write_file")
    c = cancel(memory_app, chat_id, "w1")
    assert (c["received"], c["outcome"], c["result"]) == (True, "pending", None)
    respond(memory_app, chat_id, "w1", body='{"ok": true}')
    again = cancel(memory_app, chat_id, "w1")
    assert (again["recorded"], again["outcome"], again["result"], again["is_error"]) == (
        False, "completed", {"ok": True}, False)


def test_cancel_after_the_run_reports_the_saved_response(memory_app):
    chat_id = new_chat(memory_app)
    claim(memory_app, chat_id)
    respond(memory_app, chat_id, status=500, content_type="text/plain", body="start failed")
    c = cancel(memory_app, chat_id)
    assert (c["received"], c["outcome"], c["result"], c["is_error"]) == (True, "completed", "start failed", True)
    assert c["response"] == {"status": 500, "content_type": "text/plain", "body": "start failed"}


def test_response_refusals(memory_app):
    chat_id = new_chat(memory_app)
    assert refused(respond, memory_app, chat_id) == "tool_call_not_claimed"
    claim(memory_app, chat_id)
    respond(memory_app, chat_id, body="{}")
    same = respond(memory_app, chat_id, body="{}")
    assert same["recorded"] is False
    assert refused(respond, memory_app, chat_id, body='{"other": 1}') == "tool_call_response_recorded"
    assert refused(respond, memory_app, chat_id, status=700) == "invalid_command"


@pytest.mark.parametrize("command,code", [
    (lambda chat: call_command("claim_tool_call", str(uuid.uuid4()), tool_name="execute"), "chat_not_found"),
    (lambda chat: {**call_command("cancel_tool_call", chat), "assistant_message_id": 7}, "message_not_found"),
    (lambda chat: {**call_command("cancel_tool_call", chat), "assistant_message_id": 1}, "tool_call_not_found"),
    (lambda chat: call_command("cancel_tool_call", chat, "nope"), "tool_call_not_found"),
    (lambda chat: call_command("claim_tool_call", chat, "dup", tool_name="a"), "tool_call_no_identity"),
    (lambda chat: call_command("claim_tool_call", chat, "c1", tool_name="write_file"), "invalid_command"),
    (lambda chat: {**call_command("claim_tool_call", chat, "c1", tool_name="execute"), "extra": 1}, "invalid_command"),
])
def test_refusals_record_nothing(memory_app, command, code):
    chat_id = new_chat(memory_app, ("c1", "execute"), ("dup", "a"), ("dup", "b"))
    head = memory_app.head()
    with pytest.raises(LedgerError) as err:
        run(memory_app, **command(chat_id))
    assert err.value.code == code
    assert memory_app.head() == head


def test_idempotency_key_returns_the_first_result_and_records_nothing(memory_app):
    chat_id = new_chat(memory_app)
    first = claim(memory_app, chat_id, idempotency_key="k1")
    claim(memory_app, chat_id)  # another runner's claim in between
    repeat = claim(memory_app, chat_id, idempotency_key="k1")
    assert repeat == first and repeat["outcome"] == "run"
    assert len(stream(memory_app, first)) == 3
    with pytest.raises(LedgerError) as err:
        cancel(memory_app, chat_id, idempotency_key="k1")
    assert err.value.code == "idempotency_key_reused"
    c = cancel(memory_app, chat_id, idempotency_key="k2")
    respond(memory_app, chat_id)
    assert cancel(memory_app, chat_id, idempotency_key="k2") == c  # as it was then (before the response)


def test_events_carry_the_command_s_key_and_actor(memory_app):
    chat_id = new_chat(memory_app)
    actor = str(uuid.uuid4())
    r = claim(memory_app, chat_id, idempotency_key="k", actor=actor)
    events = stream(memory_app, r)
    assert all(e.idempotency_key == "k" and str(e.actor) == actor for e in events)
    opened = events[0]
    assert isinstance(opened, ev.ToolCallExecutionOpened)
    assert (str(opened.chat_id), opened.assistant_message_id, opened.tool_call_id, opened.tool_name) == (
        chat_id, ASSISTANT_MESSAGE_ID, "c1", "execute")


def test_the_execution_replays_and_round_trips_the_codec(app):
    chat_id = new_chat(app, ("w1", "write_file"))
    claim(app, chat_id, "w1", "write_file", input_sha256="h")
    cancel(app, chat_id, "w1")
    respond(app, chat_id, "w1", body='{"ok": true}')
    execution_id = tool_call_execution_ids(uuid.UUID(chat_id), ASSISTANT_MESSAGE_ID, ["w1"])["w1"]
    agg = load_execution(app, execution_id)
    assert agg is not None and agg.state.status == "canceled" and agg.state.response.body == '{"ok": true}'
    events = app.stream(execution_id)
    assert [type(e).__name__ for e in events] == ["ToolCallExecutionOpened", "ToolCallClaimed",
                                                   "ToolCallCanceled", "ToolCallResponseRecorded"]
    assert events[2].result is None and events[2].outcome == "pending"
    assert load_execution(app, uuid.uuid4()) is None
