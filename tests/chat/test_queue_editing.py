"""Queue editing (docs/chatd.md §4.1, upstream's ``editing_since`` design with the "1P" states): the worked
examples from upstream's tests, the checks of ``edit_queued_message``, the paused head at the other
transitions, ``reconcile_invalid_state``, through the real handler. (The § marks below number the sections of
upstream's design document, which docs/chatd.md §4.1 summarizes.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ledger.chat import decide as d
from ledger.chat import events as ev
from ledger.chat.views import message_rows, queue_rows
from ledger.errors import LedgerError
from tests.chat.helpers import (
    MODEL, ORG, OWNER, RUNNER, WORKER, chat_in, chat_state, invalid_chat, new_running_chat, record_raw, run,
)

PAUSED_AT_EDIT = ("paused_queued_head_under_edit",
                  "chat is paused at a queued message under edit; finish editing, send, or remove it first")


def refused(app: Any, code: str, message: str, /, **command: Any) -> None:
    head = app.head()
    with pytest.raises(LedgerError) as err:
        run(app, **command)
    assert (err.value.code, err.value.message) == (code, message)
    assert app.head() == head


def running(app: Any, *texts: str) -> str:
    """An owned running chat (no pending calls) with ``texts`` queued (queued ids 1, 2, ...)."""
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="start")["chat_id"]
    run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
    for t in texts:
        run(app, type="send_message", chat_id=chat_id, text=t)
    return chat_id


def edit(app: Any, chat_id: str, qid: int, **fields: Any) -> dict[str, Any]:
    return run(app, type="edit_queued_message", chat_id=chat_id, queued_message_id=qid, **fields)


def queue(app: Any, chat_id: str) -> list[tuple[int, bool]]:
    """(queued id, under edit) head first."""
    return [(q["queued_message_id"], q["editing_since"] is not None) for q in queue_rows(chat_state(app, chat_id))]


def state(app: Any, chat_id: str) -> str:
    return chat_state(app, chat_id).execution_state


def new_events(app: Any, chat_id: str, since: int) -> list[str]:
    return [type(e).__name__ for e in app.stream(uuid.UUID(chat_id))[since:]]


def prompts(app: Any, chat_id: str) -> list[str]:
    return [r["parts"][0]["text"] for r in message_rows(app.stream(uuid.UUID(chat_id)))
            if r["role"] == "user" and not r["deleted"]]


# -- §9 worked examples --------------------------------------------------------------------------------------

def test_editing_while_running_pauses_at_the_row_under_edit(memory_app):
    """ED-T TestEditing_WhileRunning (the 1P classifier names the second boundary R1P)."""
    app = memory_app
    chat_id = running(app, "1", "2", "3", "4", "5")
    assert edit(app, chat_id, 3, editing=True)["execution_state"] == "R1"  # behind the head: no change
    assert run(app, type="finish_turn", chat_id=chat_id)["promoted_queued_message_id"] == 1
    result = run(app, type="finish_turn", chat_id=chat_id)
    assert (result["promoted_queued_message_id"], result["execution_state"]) == (2, "R1P")
    n = len(app.stream(uuid.UUID(chat_id)))
    result = run(app, type="finish_turn", chat_id=chat_id)
    assert (result["execution_state"], result["status"]) == ("P", "paused") and "promoted_queued_message_id" not in result
    assert new_events(app, chat_id, n) == ["TurnFinished", "ChatPaused"]
    assert queue(app, chat_id) == [(3, True), (4, False), (5, False)]
    refused(app, "transition_not_allowed", "chat state transition FinishTurn not allowed from state P",
            type="finish_turn", chat_id=chat_id)
    result = edit(app, chat_id, 3, editing=False)
    assert (result["execution_state"], result["promoted_queued_message_id"]) == ("R1", 3)
    assert "editing_queued_message_id" not in result  # no prompt is under edit any more
    assert queue(app, chat_id) == [(4, False), (5, False)] and prompts(app, chat_id)[-1] == "3"


def test_an_edit_moves_between_rows_and_beginning_again_is_a_no_op(memory_app):
    """ED-T TestEditing_MovesBetweenRows."""
    app = memory_app
    chat_id = running(app, "a", "b")
    edit(app, chat_id, 2, editing=True)
    n = len(app.stream(uuid.UUID(chat_id)))
    result = edit(app, chat_id, 1, editing=True)
    assert (result["execution_state"], result["editing_queued_message_id"]) == ("R1P", 1)
    assert new_events(app, chat_id, n) == ["QueuedPromptEditEnded", "QueuedPromptEditBegun"]
    moved = app.stream(uuid.UUID(chat_id))[n]
    assert (moved.queued_message_id, moved.cause) == (2, "moved")
    assert queue(app, chat_id) == [(1, True), (2, False)]
    since = chat_state(app, chat_id).queue[0].editing_since
    head = app.head()
    assert edit(app, chat_id, 1, editing=True)["version"] == chat_state(app, chat_id).version
    assert app.head() == head and chat_state(app, chat_id).queue[0].editing_since == since  # kept
    assert run(app, type="finish_turn", chat_id=chat_id)["execution_state"] == "P"
    refused(app, *PAUSED_AT_EDIT, type="edit_queued_message", chat_id=chat_id, queued_message_id=2, editing=True)
    assert queue(app, chat_id) == [(1, True), (2, False)]


def test_an_interruption_pauses_at_the_head_under_edit(memory_app):
    """ED-T TestEditing_InterruptionPauses."""
    app = memory_app
    chat_id = running(app)
    assert run(app, type="send_message", chat_id=chat_id, text="q", busy_behavior="interrupt")["execution_state"] == "I1"
    assert edit(app, chat_id, 1, editing=True)["execution_state"] == "I1P"
    assert run(app, type="finish_interruption", chat_id=chat_id)["execution_state"] == "P"


def test_content_edits_and_overrides(memory_app):
    """ED-T content overrides: content-only keeps model and effort; an effort override sticks; the
    effort is carried into history at promotion."""
    app = memory_app
    chat_id = running(app, "draft")
    edit(app, chat_id, 1, text="first revision")
    (row,) = queue_rows(chat_state(app, chat_id))
    assert (row["text"], row["model_config_id"], row["reasoning_effort"]) == ("first revision", None, None)
    edit(app, chat_id, 1, text="second revision", reasoning_effort="high", model_config_id=MODEL)
    edit(app, chat_id, 1, text="third revision")
    (row,) = queue_rows(chat_state(app, chat_id))
    assert (row["text"], row["model_config_id"], row["reasoning_effort"]) == ("third revision", MODEL, "high")
    assert row["editing_since"] is None and state(app, chat_id) == "R1"  # content edits do not begin an edit
    refused(app, "transition_not_allowed",
            "chat state transition EditQueuedMessage not allowed from state R1: EditQueuedMessage requires content "
            "or editing", type="edit_queued_message", chat_id=chat_id, queued_message_id=1)
    result = run(app, type="finish_turn", chat_id=chat_id)
    promoted = app.stream(uuid.UUID(chat_id))[-1]
    assert isinstance(promoted, ev.QueuedPromptPromoted) and promoted.reasoning_effort == "high"
    assert result["promoted_queued_message_id"] == 1 and prompts(app, chat_id)[-1] == "third revision"


@pytest.mark.parametrize("fields,code,message", [
    ({"model_config_id": MODEL}, "invalid_command", "model_config_id and reasoning_effort require content."),
    ({"reasoning_effort": "low", "editing": True}, "invalid_command",
     "model_config_id and reasoning_effort require content."),
    ({"message": {"role": "user", "parts": []}}, "invalid_command", "Content is required."),
    ({"message": {"role": "assistant", "parts": [{"type": "text", "text": "x"}]}}, "invalid_command",
     "a queued prompt is a user message"),
    ({"text": "x", "model_config_id": str(uuid.uuid4())}, "model_config_invalid",
     "Invalid model_config_id: model config not found or disabled."),
    ({"text": "x", "queued_message_id": 9}, "queued_message_not_found", "queued message not found"),
    ({"editing": False, "queued_message_id": 9}, "queued_message_not_found", "queued message not found"),
])
def test_edit_queued_message_refusals(memory_app, fields, code, message):
    chat_id = running(memory_app, "draft")
    refused(memory_app, code, message, **{"type": "edit_queued_message", "chat_id": chat_id,
                                          "queued_message_id": 1, **fields})


def test_an_invalid_reasoning_effort_is_refused_by_the_decoder(memory_app):
    chat_id = running(memory_app, "draft")
    with pytest.raises(LedgerError) as err:
        edit(memory_app, chat_id, 1, text="x", reasoning_effort="extreme")
    assert err.value.code == "invalid_command" and "reasoning_effort" in err.value.message


@pytest.mark.parametrize("setup,command,after,queue_after,sent", [
    # ED-MT 1P (``*`` = under edit)
    (["h"], {"type": "delete_queued_message", "queued_message_id": 1}, "W", [], None),
    (["h", "a"], {"type": "delete_queued_message", "queued_message_id": 1}, "R0", [], "a"),
    (["h", "a", "b"], {"type": "delete_queued_message", "queued_message_id": 1}, "R1", [(3, False)], "a"),
    (["h", "a"], {"type": "delete_queued_message", "queued_message_id": 2}, "P", [(1, True)], None),
    (["h", "a"], {"type": "promote_queued_message", "queued_message_id": 2}, "R1P", [(1, True)], "a"),
    (["h"], {"type": "promote_queued_message", "queued_message_id": 1}, "R0", [], "h"),
    (["h", "a"], {"type": "edit_message", "message_id": 1, "text": "over"}, "R0", [], "over"),
    (["h", "a"], {"type": "send_message", "text": "c"}, "P", [(1, True), (2, False), (3, False)], None),
    (["h"], {"type": "send_message", "text": "c", "busy_behavior": "interrupt"}, "P", [(1, True), (2, False)], None),
    (["h", "a"], {"type": "edit_queued_message", "queued_message_id": 1, "editing": False}, "R1", [(2, False)], "h"),
    (["h"], {"type": "edit_queued_message", "queued_message_id": 1, "text": "h2"}, "P", [(1, True)], None),
])
def test_from_paused(memory_app, setup, command, after, queue_after, sent):
    app = memory_app
    chat_id = running(app, *setup)
    edit(app, chat_id, 1, editing=True)
    run(app, type="finish_turn", chat_id=chat_id)
    assert state(app, chat_id) == "P"
    before = prompts(app, chat_id)
    n = len(app.stream(uuid.UUID(chat_id)))
    result = run(app, chat_id=chat_id, **command)
    assert result["execution_state"] == after == state(app, chat_id)
    assert queue(app, chat_id) == queue_after
    assert prompts(app, chat_id)[-1] == (sent if sent is not None else before[-1])
    resumed = [e for e in app.stream(uuid.UUID(chat_id))[n:] if isinstance(e, ev.ChatResumed)]
    assert bool(resumed) == (after != "P")  # every way out of a pause records its resume


def test_a_resume_cancels_outstanding_calls_and_applies_the_prefix_and_policy(memory_app):
    """Inferred (§4): the prompt keeps the hook prefix and policy it was queued with; a resume is a
    promotion — calls canceled ("…by queued message promotion"), prefix inserted, policy narrowed."""
    app = memory_app
    chat_id = new_running_chat(app)  # a pending dynamic call ``call_dyn``
    run(app, type="send_message", chat_id=chat_id, text="deploy it", hook_allowed_tools=["ask_user"],
        prefix_messages=[{"role": "user", "visibility": "model", "parts": [{"type": "text", "text": "[hook] ctx"}]}])
    edit(app, chat_id, 1, editing=True)
    run(app, type="finish_turn", chat_id=chat_id)
    edit(app, chat_id, 1, text="deploy it carefully")
    n = len(app.stream(uuid.UUID(chat_id)))
    result = edit(app, chat_id, 1, editing=False)
    assert result["execution_state"] == "R0"
    # (the owned chat resumed from P, an idle state: its owner is released last)
    assert new_events(app, chat_id, n) == ["QueuedPromptEditEnded", "ChatResumed", "ToolCallsCanceled",
                                           "QueuedPromptPromoted", "OwnershipCleared"]
    canceled, promoted = app.stream(uuid.UUID(chat_id))[-3:-1]
    assert canceled.reason == d.QUEUED_PROMOTION and [m.parts[0].tool_call_id for m in canceled.messages] == ["call_dyn"]
    assert [m.parts[0].text for m in promoted.messages] == ["[hook] ctx", "deploy it carefully"]
    assert chat_state(app, chat_id).hook_allowed_tools == ["ask_user"]


@pytest.mark.parametrize("start,command,after", [
    ("R1P", {"type": "interrupt"}, "P"),  # unowned: the interruption finishes at once and pauses
    ("R1P", {"type": "send_message", "text": "now", "busy_behavior": "interrupt"}, "P"),
])
def test_an_unowned_interruption_lands_in_paused(memory_app, start, command, after):
    chat_id = chat_in(memory_app, start, owned=False)
    assert run(memory_app, chat_id=chat_id, **command)["execution_state"] == after


def test_ending_an_edit_on_e1p_does_not_promote(memory_app):
    chat_id = chat_in(memory_app, "E1P")
    result = edit(memory_app, chat_id, 1, editing=False)
    assert result["execution_state"] == "E1" and "promoted_queued_message_id" not in result
    assert chat_state(memory_app, chat_id).last_error.message == "boom"


def test_e1p_send_appends_and_keeps_the_error(memory_app):
    chat_id = chat_in(memory_app, "E1P")
    for behavior in ("queue", "interrupt"):
        result = run(memory_app, type="send_message", chat_id=chat_id, text=behavior, busy_behavior=behavior)
        s = chat_state(memory_app, chat_id)
        assert result["execution_state"] == "E1P" and s.status == "error" and s.last_error.message == "boom"
    assert [q for q, _ in queue(memory_app, chat_id)] == [1, 2, 3]


def test_a_family_with_a_paused_member_cannot_be_archived(memory_app):
    app = memory_app
    root = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="root", initial_status="waiting")[
        "chat_id"]
    child = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="child", parent_chat_id=root)[
        "chat_id"]
    run(app, type="send_message", chat_id=child, text="later")
    edit(app, child, 1, editing=True)
    run(app, type="finish_turn", chat_id=child)
    assert state(app, child) == "P"
    refused(app, "transition_not_allowed", f"chat state transition SetArchived not allowed from state P: chat {child}",
            type="set_archived", chat_id=root, archived=True)


def test_end_chat_clears_a_queue_under_edit(memory_app):
    chat_id = chat_in(memory_app, "R1P")
    result = run(memory_app, type="end_chat", chat_id=chat_id)
    assert result["execution_state"] == "XW" and chat_state(memory_app, chat_id).editing_queued_message_id is None


# -- §7 Invalid and ReconcileInvalidState ------------------------------------------------------------------------

def test_reconcile_an_invalid_chat(app):
    """On SQLite and PostgreSQL. A chat an imported log left Invalid (running, archived, with a queue):
    every other transition is refused with ``invalid_state``; reconcile cancels pending dynamic calls,
    puts it in error, unarchived, queue kept."""
    chat_id = invalid_chat(app)
    refused(app, "invalid_state", "chat is in an invalid execution state",
            type="send_message", chat_id=chat_id, text="x")
    result = run(app, type="reconcile_invalid_state", chat_id=chat_id)
    assert (result["execution_state"], result["status"], result["archived"], result["queue_length"]) == (
        "E1", "error", False, 1)
    s = chat_state(app, chat_id)
    assert s.last_error.message == d.INVALID_STATE_ERROR and s.requires_action_deadline_at is None
    canceled, reconciled = app.stream(uuid.UUID(chat_id))[-2:]
    assert canceled.reason == d.INVALID_STATE_CANCELED and canceled.dynamic_only
    assert isinstance(reconciled, ev.InvalidStateReconciled)
    assert (reconciled.status_before, reconciled.archived_before) == ("running", True)
    refused(app, "transition_not_allowed",
            "chat state transition ReconcileInvalidState not allowed from state E1: reconcile is only valid for "
            "invalid states", type="reconcile_invalid_state", chat_id=chat_id)
    assert run(app, type="send_message", chat_id=chat_id, text="go on")["execution_state"] == "R1"


@pytest.mark.parametrize("shape,after", [
    ("paused_head_not_under_edit", "E1"),
    ("paused_without_rows", "E0"),
    ("waiting_with_rows_head_under_edit", "E1P"),
])
def test_reconcile_keeps_the_queue_and_its_edit_marker(memory_app, shape, after):
    app = memory_app
    chat_id = chat_in(app, "P")
    if shape == "paused_head_not_under_edit":
        record_raw(app, chat_id, ev.QueuedPromptEditEnded, queued_message_id=1, cause="ended")
        # (evolve ends a pause whose head is no longer under edit: an imported ChatPaused re-creates it)
        record_raw(app, chat_id, ev.ChatPaused, queued_message_id=1)
    elif shape == "paused_without_rows":
        record_raw(app, chat_id, ev.ChatPaused, queued_message_id=1)
        record_raw(app, chat_id, ev.QueuedPromptDeleted, queued_message_id=1)
        record_raw(app, chat_id, ev.ChatPaused, queued_message_id=1)
    else:
        record_raw(app, chat_id, ev.ChatResumed, cause="edit_ended", status="waiting", queued_message_id=1)
    assert state(app, chat_id) == "Invalid"
    result = run(app, type="reconcile_invalid_state", chat_id=chat_id, error={"message": "repaired", "kind": "x"},
                 cancellation_reason="repair")
    assert result["execution_state"] == after
    assert chat_state(app, chat_id).last_error.message == "repaired"
