"""chatd fidelity (issue 15, points 1–3), table tests on the real handler (``commands.handler.execute``)
on SQLite and PostgreSQL: refusals with chatd's codes and exact texts (nothing recorded), results that
say what happened, and the hook rules of requirements 000 (stale hook prefixes, ``suffix_messages`` on
``complete_requires_action``, ``hook_allowed_tools`` on ``edit_message``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ledger.chat import events as ev
from ledger.chat.views import message_rows
from ledger.errors import LedgerError
from tests.chat.helpers import ORG, OWNER, RUNNER, WORKER, chat_in, chat_state, run

NOT_FROM_N = "chat state transition CreateChat not allowed from state N: "


def refused(app: Any, code: str, message: str, /, **command: Any) -> None:
    head = app.head()
    with pytest.raises(LedgerError) as err:
        run(app, **command)
    assert (err.value.code, err.value.message) == (code, message)
    assert app.head() == head  # nothing recorded


def create(**fields: Any) -> dict[str, Any]:
    return {"type": "create_chat", "organization_id": ORG, "owner_id": OWNER, **fields}


def events_of(app: Any, chat_id: str) -> list[Any]:
    return app.stream(uuid.UUID(chat_id))


def rows(app: Any, chat_id: str) -> list[dict[str, Any]]:
    return message_rows(events_of(app, chat_id))


def active_text(app: Any, chat_id: str) -> list[str]:
    return [p["text"] for r in rows(app, chat_id) if not r["deleted"] for p in r["parts"] if p["type"] == "text"]


# -- 1. refusals ---------------------------------------------------------------------------------------------

ASSISTANT = {"role": "assistant", "parts": [{"type": "text", "text": "I start"}]}


@pytest.mark.parametrize("fields,code,message", [
    ({"text": "hi", "initial_status": "paused"}, "transition_not_allowed",
     NOT_FROM_N + "initial status must be waiting or running"),
    ({"text": "hi", "initial_status": "error"}, "transition_not_allowed",
     NOT_FROM_N + "initial status must be waiting or running"),
    ({}, "transition_not_allowed", NOT_FROM_N + "initial messages must include at least one message"),
    ({"initial_status": "paused"}, "transition_not_allowed",  # no message is checked first
     NOT_FROM_N + "initial messages must include at least one message"),
    ({"message": ASSISTANT}, "transition_not_allowed",
     NOT_FROM_N + "admitted chat creation requires exactly one initial user message"),
    ({"message": ASSISTANT, "initial_status": "bogus"}, "transition_not_allowed",  # the status before admission
     NOT_FROM_N + "initial status must be waiting or running"),
    ({"message": {**ASSISTANT, "role": "system"}}, "transition_not_allowed",
     NOT_FROM_N + "admitted chat creation requires exactly one initial user message"),
    ({"text": "hi", "chat_id": "00000000-0000-0000-0000-000000000000"}, "invalid_command",
     "chatstate: CreateChatWithID called with nil chat ID"),
    ({"chat_id": "00000000-0000-0000-0000-000000000000"}, "invalid_command",  # the nil id before anything
     "chatstate: CreateChatWithID called with nil chat ID"),
])
def test_create_chat_refusals(app, fields, code, message):
    refused(app, code, message, **create(**fields))


@pytest.mark.parametrize("status,state", [("", "R0"), ("running", "R0"), ("waiting", "W")])
def test_create_chat_initial_status_empty_means_running(app, status, state):
    assert run(app, **create(text="hi", initial_status=status))["execution_state"] == state


@pytest.mark.parametrize("state", ["W", "E0", "E1", "R0", "R1", "I1", "A0", "P", "R1P"])
@pytest.mark.parametrize("behavior", ["later", "", "Queue"])
def test_send_message_with_an_unknown_busy_behavior(app, state, behavior):
    chat_id = chat_in(app, state)
    refused(app, "transition_not_allowed",
            f"chat state transition SendMessage not allowed from state {state}: invalid BusyBehavior",
            type="send_message", chat_id=chat_id, text="x", busy_behavior=behavior)


def test_send_message_checks_the_matrix_then_the_role_then_the_busy_behavior(app):
    archived = chat_in(app, "XW")
    refused(app, "transition_not_allowed", "chat state transition SendMessage not allowed from state XW",
            type="send_message", chat_id=archived, message=ASSISTANT, busy_behavior="later")
    chat_id = chat_in(app, "R0")
    refused(app, "invalid_command", "SendMessage requires a user message",
            type="send_message", chat_id=chat_id, message=ASSISTANT, busy_behavior="later")


@pytest.mark.parametrize("state,size,code,message", [
    ("R0", 0, "invalid_command", "insert queued: max queue size must be positive, got 0"),
    ("R1", -3, "invalid_command", "insert queued: max queue size must be positive, got -3"),
    ("R1", 1, "queue_full", "chat message queue is full (max 1)"),
    ("P", 1, "queue_full", "chat message queue is full (max 1)"),  # the row under edit counts
    ("E1", 1, "queue_full", "chat message queue is full (max 1)"),
])
def test_max_queue_size_per_send(app, state, size, code, message):
    chat_id = chat_in(app, state)
    refused(app, code, message, type="send_message", chat_id=chat_id, text="x", max_queue_size=size)


def test_max_queue_size_is_read_only_when_a_prompt_is_queued(app):
    chat_id = chat_in(app, "W")
    assert run(app, type="send_message", chat_id=chat_id, text="direct", max_queue_size=0)["execution_state"] == "R0"
    for i in range(21):  # past the default cap of 20
        result = run(app, type="send_message", chat_id=chat_id, text=f"q{i}", max_queue_size=25)
    assert result["queue_length"] == 21
    refused(app, "queue_full", "chat message queue is full (max 20)", type="send_message", chat_id=chat_id, text="x")


# -- 2. results that say what happened ------------------------------------------------------------------------

def test_an_unowned_interrupting_send_with_an_empty_queue_is_reported_as_inserted(app):
    chat_id = chat_in(app, "R0", owned=False)
    result = run(app, type="send_message", chat_id=chat_id, text="instead", busy_behavior="interrupt")
    assert result["execution_state"] == "R0" and result["queue_length"] == 0
    assert "queued_message_id" not in result  # it went straight into history
    prompt = rows(app, chat_id)[-1]
    assert prompt["parts"] == [{"type": "text", "text": "instead"}] and result["message_ids"][-1] == prompt["message_id"]


@pytest.mark.parametrize("state,owned,command,queued,promoted", [
    # owned: the runner finishes the interruption later; the prompt is queued
    ("R0", True, {"text": "now", "busy_behavior": "interrupt"}, 1, None),
    # unowned with a queue: the new prompt stays queued behind the promoted head
    ("R1", False, {"text": "now", "busy_behavior": "interrupt"}, 2, 1),
    # E1: queued at the tail, the head promoted
    ("E1", True, {"text": "later"}, 2, 1),
    # E1P: queued behind the head under edit, nothing promoted
    ("E1P", True, {"text": "later"}, 2, None),
    ("P", True, {"text": "later", "busy_behavior": "interrupt"}, 2, None),
])
def test_send_results_name_what_was_queued_and_promoted(app, state, owned, command, queued, promoted):
    chat_id = chat_in(app, state, owned=owned)
    result = run(app, type="send_message", chat_id=chat_id, **command)
    assert result.get("queued_message_id") == queued and result.get("promoted_queued_message_id") == promoted
    queue_ids = [q.queued_message_id for q in chat_state(app, chat_id).queue]
    assert queued in queue_ids and promoted not in queue_ids


# -- 3. hook rules (requirements 000) --------------------------------------------------------------------------

def hook(text: str) -> dict[str, Any]:
    return {"role": "user", "visibility": "model", "parts": [{"type": "text", "text": text}]}


@pytest.mark.parametrize("how", ["direct", "promoted"])
def test_an_edit_soft_deletes_the_stale_hook_prefix_of_the_edited_turn(app, how):
    """The review of PR 27428: without it "[hook] OLD CONTEXT" stays in the model's context next to the
    new prefix."""
    if how == "direct":
        chat_id = chat_in(app, "W")
        run(app, type="send_message", chat_id=chat_id, text="do it", prefix_messages=[hook("[hook] OLD CONTEXT")])
    else:
        chat_id = chat_in(app, "R0")
        run(app, type="send_message", chat_id=chat_id, text="do it", prefix_messages=[hook("[hook] OLD CONTEXT")])
        run(app, type="finish_turn", chat_id=chat_id)  # promotes it with its prefix
    (old_prefix,) = [r for r in rows(app, chat_id) if r["parts"][0].get("text") == "[hook] OLD CONTEXT"]
    (prompt,) = [r for r in rows(app, chat_id) if r["parts"][0].get("text") == "do it"]
    assert old_prefix["turn_id"] == prompt["turn_id"]
    run(app, type="edit_message", chat_id=chat_id, message_id=prompt["message_id"], text="do it better",
        prefix_messages=[hook("[hook] NEW CONTEXT")])
    edited = [e for e in events_of(app, chat_id) if isinstance(e, ev.MessageEdited)][-1]
    assert edited.deleted_message_ids[0] == old_prefix["message_id"]
    texts = active_text(app, chat_id)
    assert "[hook] OLD CONTEXT" not in texts and texts[-2:] == ["[hook] NEW CONTEXT", "do it better"]
    new_rows = [r for r in rows(app, chat_id) if not r["deleted"]][-2:]
    assert new_rows[0]["turn_id"] == new_rows[1]["turn_id"]  # the new prefix carries the edit's turn id


def test_only_the_prefix_recorded_with_the_target_is_deleted(app):
    """A caller reusing a turn id: the earlier turn's rows carry it too, but were not recorded with the
    edited prompt, so they stay."""
    turn = str(uuid.uuid4())
    chat_id = chat_in(app, "W")
    run(app, type="send_message", chat_id=chat_id, text="first", turn_id=turn, prefix_messages=[hook("[hook] A")])
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "text", "text": "answer one"}]}])
    run(app, type="finish_turn", chat_id=chat_id)
    run(app, type="send_message", chat_id=chat_id, text="second", turn_id=turn, prefix_messages=[hook("[hook] B")])
    (second,) = [r for r in rows(app, chat_id) if r["parts"][0].get("text") == "second"]
    run(app, type="edit_message", chat_id=chat_id, message_id=second["message_id"], text="second, again")
    assert active_text(app, chat_id)[-4:] == ["[hook] A", "first", "answer one", "second, again"]


def test_the_cancellations_recorded_with_a_prompt_are_not_its_prefix(app):
    """A send from W cancels the open call (a tool row, in the same command) before the prefix; with the
    caller's turn id equal to the chat's current one, the cancellation carries it too — and stays."""
    chat_id = chat_in(app, "W")  # ``call_dyn`` still open
    turn = str(chat_state(app, chat_id).turn_id)
    run(app, type="send_message", chat_id=chat_id, text="go", turn_id=turn, prefix_messages=[hook("[hook] P")])
    cancel, prefix, prompt = rows(app, chat_id)[-3:]
    assert cancel["role"] == "tool" and cancel["turn_id"] == prefix["turn_id"] == prompt["turn_id"] == turn
    run(app, type="edit_message", chat_id=chat_id, message_id=prompt["message_id"], text="go on")
    edited = [e for e in events_of(app, chat_id) if isinstance(e, ev.MessageEdited)][-1]
    assert edited.deleted_message_ids == [prefix["message_id"], prompt["message_id"]]
    assert not any(isinstance(e, ev.ToolCallsCanceled) and e.reason == "Tool execution interrupted by message edit"
                   for e in events_of(app, chat_id))  # call_dyn stays closed by its first cancellation


def test_complete_requires_action_accepts_suffix_messages(app):
    chat_id = chat_in(app, "A0")
    turn = chat_state(app, chat_id).turn_id
    result = run(app, type="complete_requires_action", chat_id=chat_id,
                 results=[{"tool_call_id": "call_dyn", "output": "\"main\""}],
                 suffix_messages=[hook("[post_tool_use hook] branch main is protected")])
    assert result["execution_state"] == "R0"
    last = rows(app, chat_id)[-2:]
    assert [r["role"] for r in last] == ["tool", "user"]
    assert last[1]["parts"][0]["text"] == "[post_tool_use hook] branch main is protected"
    assert last[1]["visibility"] == "model" and {r["turn_id"] for r in last} == {str(turn)}
    assert result["message_ids"] == [r["message_id"] for r in last]
    submitted = events_of(app, chat_id)[-1]
    assert isinstance(submitted, ev.ToolResultsSubmitted) and len(submitted.messages) == 2
    # a suffix cannot answer a call twice
    chat_id = chat_in(app, "A0")
    refused(app, "tool_result_duplicate", "duplicate tool_call_id submitted", type="complete_requires_action",
            chat_id=chat_id, results=[{"tool_call_id": "call_dyn", "output": "1"}],
            suffix_messages=[{"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": "call_dyn",
                                                         "tool_name": "ask_user", "result": 2}]}])


@pytest.mark.parametrize("before,incoming,after", [
    (None, ["read", "search"], ["read", "search"]),  # adopted
    (["read", "search", "execute"], ["execute", "deploy", "read"], ["execute", "read"]),  # intersection, incoming order
    (["read"], None, ["read"]),  # no hook policy: unchanged
    (["read"], ["search"], []),  # never widens
])
def test_edit_message_narrows_with_hook_allowed_tools_as_a_direct_send(app, before, incoming, after):
    chat_id = run(app, **create(text="start", hook_allowed_tools=before))["chat_id"]
    run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
    run(app, type="edit_message", chat_id=chat_id, message_id=1, text="start over", hook_allowed_tools=incoming)
    started = events_of(app, chat_id)[-1]
    assert isinstance(started, ev.TurnStarted) and started.cause == "edit"
    assert (started.hook_allowed_tools, started.tool_policy_before, started.tool_policy) == (incoming, before, after)
    assert chat_state(app, chat_id).hook_allowed_tools == after
