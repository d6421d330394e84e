"""Per-transition behaviour of docs/chatd.md §3.1 and §4: queue, hook prefixes and policies, cancellations,
requires-action, edit, compaction, ownership, families."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from commands.queries import load_chat
from ledger.chat import decide as d
from ledger.chat import events as ev
from ledger.chat.views import message_rows, queue_rows, unresolved_rows
from ledger.errors import LedgerError
from tests.chat.helpers import DYNAMIC_CALL, ORG, OWNER, RUNNER, WORKER, chat_in, chat_state, new_running_chat, run


def events_of(app, chat_id):
    return app.stream(uuid.UUID(chat_id))


def messages(app, chat_id):
    return message_rows(events_of(app, chat_id))


def create(app, **kw):
    fields = {"type": "create_chat", "organization_id": ORG, "owner_id": OWNER, "text": "start"}
    fields.update(kw)
    return run(app, **fields)["chat_id"]


def assistant_calls(app, chat_id, *calls):
    parts = [{"type": "tool-call", "tool_call_id": cid, "tool_name": name, "args": {}} for cid, name in calls]
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": parts}])


# -- queue ---------------------------------------------------------------------------------------------

def test_queue_cap_is_twenty(memory_app):
    chat_id = create(memory_app)
    for i in range(20):
        run(memory_app, type="send_message", chat_id=chat_id, text=f"q{i}")
    version = chat_state(memory_app, chat_id).version
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="send_message", chat_id=chat_id, text="one too many")
    assert (err.value.code, err.value.message) == ("queue_full", "chat message queue is full (max 20)")
    assert chat_state(memory_app, chat_id).version == version
    assert len(chat_state(memory_app, chat_id).queue) == 20


def test_head_order_promote_to_head_and_delete(memory_app):
    chat_id = create(memory_app)
    run(memory_app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
    for text in ("a", "b", "c"):
        run(memory_app, type="send_message", chat_id=chat_id, text=text)
    run(memory_app, type="promote_queued_message", chat_id=chat_id, queued_message_id=3)
    s = chat_state(memory_app, chat_id)
    assert [q["text"] for q in queue_rows(s)] == ["c", "a", "b"]
    assert [q["position"] for q in queue_rows(s)] == [0, 1, 2]  # the old lowest position minus one
    assert s.execution_state == "I1"  # R1: promotion interrupts; the boundary promotes the head
    run(memory_app, type="delete_queued_message", chat_id=chat_id, queued_message_id=1)
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="delete_queued_message", chat_id=chat_id, queued_message_id=1)
    assert (err.value.code, err.value.message) == ("queued_message_not_found", "queued message not found")
    result = run(memory_app, type="finish_interruption", chat_id=chat_id)
    assert result["promoted_queued_message_id"] == 3
    assert [q["text"] for q in queue_rows(chat_state(memory_app, chat_id))] == ["b"]
    assert messages(memory_app, chat_id)[-1]["parts"][0]["text"] == "c"


def test_promoting_the_head_again_does_not_move_it(memory_app):
    chat_id = chat_in(memory_app, "E1")
    n = len(events_of(memory_app, chat_id))
    run(memory_app, type="promote_queued_message", chat_id=chat_id, queued_message_id=1)
    new = events_of(memory_app, chat_id)[n:]
    assert not any(isinstance(e, ev.QueuedPromptMovedToHead) for e in new)
    assert any(isinstance(e, ev.QueuedPromptPromoted) for e in new)


def test_edit_clears_queue_soft_deletes_and_inserts_prefix_suffix(memory_app):
    chat_id = chat_in(memory_app, "R1")
    turn = str(uuid.uuid4())
    result = run(memory_app, type="edit_message", chat_id=chat_id, message_id=1, text="hello again", turn_id=turn,
                 prefix_messages=[{"role": "user", "visibility": "model", "parts": [{"type": "text", "text": "pre"}]}],
                 suffix_messages=[{"role": "user", "visibility": "model", "parts": [{"type": "text", "text": "post"}]}])
    assert result["execution_state"] == "R0" and result["queue_length"] == 0
    rows = messages(memory_app, chat_id)
    assert [r["deleted"] for r in rows[:2]] == [True, True]
    new = [r for r in rows if not r["deleted"]]
    assert [r["parts"][0]["text"] for r in new] == ["pre", "hello again", "post"]
    assert {r["turn_id"] for r in new} == {turn}
    assert result["message_ids"] == [3, 4, 5]  # ids keep counting after soft-deleted rows
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="edit_message", chat_id=chat_id, message_id=2, text="x")
    assert (err.value.code, err.value.message) == ("message_not_found", "chat message not found")
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="edit_message", chat_id=chat_id, message_id=99, text="x")
    assert err.value.code == "message_not_found"


def test_edit_cancels_calls_left_outstanding_by_the_truncation(memory_app):
    chat_id = create(memory_app)
    assistant_calls(memory_app, chat_id, ("c1", "execute"))
    run(memory_app, type="interrupt", chat_id=chat_id)  # unowned: canceled and finished at once -> W
    run(memory_app, type="send_message", chat_id=chat_id, text="second")
    assistant_calls(memory_app, chat_id, ("c2", "execute"))
    second = next(r for r in messages(memory_app, chat_id) if r["parts"][0].get("text") == "second")
    run(memory_app, type="edit_message", chat_id=chat_id, message_id=second["message_id"], text="second, edited")
    canceled = [e for e in events_of(memory_app, chat_id) if isinstance(e, ev.ToolCallsCanceled)]
    assert [e.reason for e in canceled] == [d.INTERRUPTED_BY_USER]  # c1 was already closed; c2 was deleted


# -- hook prefixes and tool policy -----------------------------------------------------------------------

def test_queued_hook_prefix_is_stamped_and_inserted_before_prompt_at_promotion(memory_app):
    chat_id = create(memory_app, hook_allowed_tools=["read", "search", "execute"])
    run(memory_app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
    assistant_calls(memory_app, chat_id, ("c1", "execute"))
    turn = str(uuid.uuid4())
    prefix = [{"role": "user", "visibility": "model", "parts": [{"type": "text", "text": "hook says hi"}]}]
    run(memory_app, type="send_message", chat_id=chat_id, text="next", prefix_messages=prefix, turn_id=turn,
        hook_allowed_tools=["execute", "deploy", "search"])
    assert chat_state(memory_app, chat_id).hook_allowed_tools == ["read", "search", "execute"]  # deferred
    assert messages(memory_app, chat_id)[-1]["role"] == "assistant"  # queueing never changes history
    run(memory_app, type="finish_turn", chat_id=chat_id)
    rows = messages(memory_app, chat_id)
    # cancellation of the outstanding call, then the prefix, then the prompt
    assert [r["role"] for r in rows[-3:]] == ["tool", "user", "user"]
    assert rows[-3]["parts"][0]["result"] == d.QUEUED_PROMOTION and rows[-3]["parts"][0]["is_error"]
    assert rows[-2]["parts"][0]["text"] == "hook says hi" and rows[-2]["visibility"] == "model"
    assert rows[-2]["turn_id"] == rows[-1]["turn_id"] == turn
    s = chat_state(memory_app, chat_id)
    assert s.hook_allowed_tools == ["execute", "search"]  # intersection in the incoming order
    promoted = [e for e in events_of(memory_app, chat_id) if isinstance(e, ev.QueuedPromptPromoted)][-1]
    assert promoted.tool_policy_before == ["read", "search", "execute"]
    assert promoted.tool_policy == ["execute", "search"]


def test_direct_send_narrows_at_once_and_policy_never_widens(memory_app):
    chat_id = create(memory_app, initial_status="waiting")
    assert chat_state(memory_app, chat_id).hook_allowed_tools is None
    run(memory_app, type="send_message", chat_id=chat_id, text="a", hook_allowed_tools=["x", "y", "z"])
    assert chat_state(memory_app, chat_id).hook_allowed_tools == ["x", "y", "z"]  # adopted
    run(memory_app, type="finish_turn", chat_id=chat_id)
    run(memory_app, type="send_message", chat_id=chat_id, text="b", hook_allowed_tools=["z", "w", "x"])
    assert chat_state(memory_app, chat_id).hook_allowed_tools == ["z", "x"]
    run(memory_app, type="finish_turn", chat_id=chat_id)
    run(memory_app, type="send_message", chat_id=chat_id, text="c")  # no policy: unchanged
    assert chat_state(memory_app, chat_id).hook_allowed_tools == ["z", "x"]
    run(memory_app, type="finish_turn", chat_id=chat_id)
    run(memory_app, type="send_message", chat_id=chat_id, text="d", hook_allowed_tools=["x", "y", "z", "w"])
    assert chat_state(memory_app, chat_id).hook_allowed_tools == ["x", "z"]


def test_narrow_tool_policy_rules():
    assert d.narrow_tool_policy(None, None) is None
    assert d.narrow_tool_policy(["a"], None) == ["a"]
    assert d.narrow_tool_policy(None, ["b", "a", "b"]) == ["b", "a"]
    assert d.narrow_tool_policy(["a", "b", "c"], ["c", "q", "a"]) == ["c", "a"]
    assert d.narrow_tool_policy(["a"], []) == []
    assert d.narrow_tool_policy([], ["a"]) == []


# -- cancellations ------------------------------------------------------------------------------------------

def _last_cancel(app, chat_id):
    return [e for e in events_of(app, chat_id) if isinstance(e, ev.ToolCallsCanceled)][-1]


@pytest.mark.parametrize("setup,command,reason,dynamic_only", [
    ("W", {"type": "send_message", "text": "new"}, d.NEW_USER_MESSAGE, False),
    ("E1", {"type": "send_message", "text": "new"}, d.QUEUED_PROMOTION, False),
    ("A0", {"type": "send_message", "text": "new", "busy_behavior": "interrupt"}, d.USER_MESSAGE, True),
    ("A0", {"type": "interrupt"}, d.INTERRUPTED_BY_USER, True),
    ("A0", {"type": "cancel_requires_action"}, d.TIMED_OUT, True),
    ("A1", {"type": "promote_queued_message", "queued_message_id": 1}, d.QUEUED_PROMOTION, False),
    ("R1", {"type": "finish_turn"}, d.QUEUED_PROMOTION, False),
    ("R0", {"type": "end_chat"}, d.CHAT_ENDED, False),
])
def test_cancellation_reasons(memory_app, setup, command, reason, dynamic_only):
    chat_id = chat_in(memory_app, setup)
    if setup in ("W", "E1", "R1", "R0"):
        assistant = {"type": "commit_step", "messages": [{"role": "assistant", "parts": [
            {"type": "tool-call", "tool_call_id": "local_1", "tool_name": "execute", "args": {}}, DYNAMIC_CALL]}]}
        if setup in ("R1", "R0"):
            run(memory_app, chat_id=chat_id, **assistant)
    run(memory_app, chat_id=chat_id, **command)
    cancel = _last_cancel(memory_app, chat_id)
    assert cancel.reason == reason and cancel.dynamic_only == dynamic_only
    for m in cancel.messages:
        (part,) = m.parts
        assert m.role == "tool" and m.visibility == "both"
        assert part.is_error is True and part.result == reason
    names = {m.parts[0].tool_name for m in cancel.messages}
    assert ("execute" in names) == (not dynamic_only and setup in ("R1", "R0"))
    assert "ask_user" in names


def test_edit_of_an_earlier_prompt_cancels_with_the_edit_reason(memory_app):
    chat_id = create(memory_app)
    assistant_calls(memory_app, chat_id, ("c1", "execute"))
    run(memory_app, type="commit_step", chat_id=chat_id, messages=[{"role": "user", "parts": [{"type": "text", "text": "x"}]}])
    run(memory_app, type="edit_message", chat_id=chat_id, message_id=3, text="y")
    cancel = _last_cancel(memory_app, chat_id)
    assert cancel.reason == d.MESSAGE_EDIT and [m.parts[0].tool_call_id for m in cancel.messages] == ["c1"]


def test_provider_executed_and_answered_calls_are_not_outstanding(memory_app):
    chat_id = create(memory_app)
    run(memory_app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "p", "tool_name": "web_search", "args": {}, "provider_executed": True},
        {"type": "tool-call", "tool_call_id": "a", "tool_name": "read", "args": {"path": "x"}},
        {"type": "tool-call", "tool_call_id": "b", "tool_name": "read", "args": {}},
    ]}, {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": "a", "tool_name": "read", "result": 1}]}])
    rows = unresolved_rows(chat_state(memory_app, chat_id))
    assert [(r["tool_call_id"], r["kind"]) for r in rows] == [("b", "local")]
    assert rows[0]["execution_id"] == str(uuid.uuid5(uuid.UUID("0af4d6d3-691c-45dd-ac54-55ea97970ebc"),
                                                     f"{chat_id}/2/b"))


# -- requires action -----------------------------------------------------------------------------------------

def test_enter_requires_action_deadline_is_five_minutes_after_the_event(memory_app):
    chat_id = new_running_chat(memory_app)
    run(memory_app, type="enter_requires_action", chat_id=chat_id)
    entered = events_of(memory_app, chat_id)[-1]
    assert isinstance(entered, ev.RequiresActionEntered)
    assert entered.deadline - entered.timestamp == timedelta(minutes=5)
    assert chat_state(memory_app, chat_id).requires_action_deadline_at == entered.deadline


def test_enter_requires_action_needs_a_pending_dynamic_call(memory_app):
    chat_id = create(memory_app)
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="enter_requires_action", chat_id=chat_id)
    assert (err.value.code, err.value.message) == ("no_pending_dynamic_tool_calls", "no pending dynamic tool calls")


def test_complete_requires_action_validation_order(memory_app):
    chat_id = create(memory_app, dynamic_tools=["ask", "pick"])
    assistant_calls(memory_app, chat_id, ("d1", "ask"), ("d2", "pick"))
    run(memory_app, type="enter_requires_action", chat_id=chat_id)
    cases = [
        # duplicate wins over invalid JSON, missing and unexpected
        ([("d1", "nope"), ("d1", "1"), ("zz", "1")], "tool_result_duplicate", "duplicate tool_call_id submitted"),
        ([("d1", "nope"), ("zz", "1")], "tool_result_invalid_json", "tool result output is not valid JSON"),
        ([("d1", "1"), ("zz", "1")], "tool_result_missing", "submitted tool results do not match pending tool calls"),
        ([("d1", "1"), ("d2", "2"), ("zz", "1")], "tool_result_unexpected",
         "submitted tool_call_id does not match a pending dynamic tool call"),
    ]
    for results, code, message in cases:
        with pytest.raises(LedgerError) as err:
            run(memory_app, type="complete_requires_action", chat_id=chat_id,
                results=[{"tool_call_id": t, "output": o} for t, o in results])
        assert (err.value.code, err.value.message) == (code, message)
    result = run(memory_app, type="complete_requires_action", chat_id=chat_id,
                 results=[{"tool_call_id": "d2", "output": "{\"x\": 1}"},
                          {"tool_call_id": "d1", "output": "\"yes\"", "is_error": True}])
    assert result["execution_state"] == "R0"
    rows = messages(memory_app, chat_id)[-2:]
    assert [r["parts"][0]["tool_call_id"] for r in rows] == ["d2", "d1"]  # submitted order
    assert rows[0]["parts"][0] == {"type": "tool-result", "tool_call_id": "d2", "tool_name": "pick", "result": {"x": 1}}
    assert rows[1]["parts"][0]["is_error"] is True
    assert chat_state(memory_app, chat_id).requires_action_deadline_at is None


# -- interrupts and ownership ---------------------------------------------------------------------------------

def test_unowned_interrupt_finishes_at_once(memory_app):
    chat_id = create(memory_app)
    assistant_calls(memory_app, chat_id, ("c1", "execute"))
    result = run(memory_app, type="interrupt", chat_id=chat_id, reason="stop now")
    assert result["execution_state"] == "W"
    assert _last_cancel(memory_app, chat_id).reason == "stop now"
    finished = [e for e in events_of(memory_app, chat_id) if isinstance(e, ev.InterruptionFinished)]
    assert finished and finished[-1].unowned


def test_unowned_interrupting_send_promotes_the_new_prompt(memory_app):
    chat_id = create(memory_app)
    assistant_calls(memory_app, chat_id, ("c1", "execute"))
    result = run(memory_app, type="send_message", chat_id=chat_id, text="instead", busy_behavior="interrupt")
    assert result["execution_state"] == "R0"
    # queued and promoted by this command: reported as inserted, not queued (docs/chatd.md §3.1)
    assert "queued_message_id" not in result and result["promoted_queued_message_id"] == 1
    prompt = messages(memory_app, chat_id)[-1]
    assert result["message_ids"][-1] == prompt["message_id"]
    assert _last_cancel(memory_app, chat_id).reason == d.NEW_USER_MESSAGE
    assert messages(memory_app, chat_id)[-1]["parts"][0]["text"] == "instead"


def test_owned_interrupting_send_waits_for_the_runner(memory_app):
    chat_id = chat_in(memory_app, "R0")
    result = run(memory_app, type="send_message", chat_id=chat_id, text="instead", busy_behavior="interrupt")
    assert result["execution_state"] == "I1"
    run(memory_app, type="abandon", chat_id=chat_id)
    result = run(memory_app, type="interrupt", chat_id=chat_id)  # unowned I1: finishes and promotes
    assert result["execution_state"] == "R0" and result["promoted_queued_message_id"] == 1


def test_finish_interruption_refuses_outstanding_calls(memory_app):
    chat_id = chat_in(memory_app, "I0")
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="finish_interruption", chat_id=chat_id)
    assert err.value.message == ("chat state transition FinishInterruption not allowed from state I0: "
                                 "outstanding tool calls remain after partial commit")


# -- compaction, clear, errors, attempts -----------------------------------------------------------------------

def test_compaction_marker_is_one_shot(memory_app):
    chat_id = chat_in(memory_app, "W")
    result = run(memory_app, type="request_compaction", chat_id=chat_id)
    s = chat_state(memory_app, chat_id)
    assert result["execution_state"] == "R0" and s.compaction_requested_at is not None
    assert s.worker_id is None and s.generation_attempt == 0 and s.history_version == s.version
    run(memory_app, type="record_generation_attempt", chat_id=chat_id)
    run(memory_app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [{"type": "text", "text": "x"}]}])
    assert chat_state(memory_app, chat_id).compaction_requested_at is not None  # carried without consume
    run(memory_app, type="commit_step", chat_id=chat_id, consume_compaction_request=True,
        messages=[{"role": "assistant", "parts": [{"type": "text", "text": "y"}]}])
    assert chat_state(memory_app, chat_id).compaction_requested_at is None
    run(memory_app, type="finish_turn", chat_id=chat_id)
    run(memory_app, type="request_compaction", chat_id=chat_id)
    run(memory_app, type="finish_turn", chat_id=chat_id)  # a terminal transition clears it too
    assert chat_state(memory_app, chat_id).compaction_requested_at is None


def test_fail_idle_and_finish_error(memory_app):
    chat_id = chat_in(memory_app, "W")
    run(memory_app, type="fail_idle", chat_id=chat_id, error="agent gone")
    s = chat_state(memory_app, chat_id)
    assert s.execution_state == "E0" and s.last_error.message == "agent gone" and s.last_error.kind == "generic"
    assert s.worker_id is not None  # ownership untouched
    run(memory_app, type="send_message", chat_id=chat_id, text="again")
    assert chat_state(memory_app, chat_id).last_error is None
    run(memory_app, type="finish_error", chat_id=chat_id, error={"message": "overloaded", "kind": "overloaded"})
    assert chat_state(memory_app, chat_id).last_error.kind == "overloaded"


def test_generation_attempts_reset_on_history_change(memory_app):
    chat_id = chat_in(memory_app, "R0")
    assert run(memory_app, type="record_generation_attempt", chat_id=chat_id)["generation_attempt"] == 1
    run(memory_app, type="record_retry_state", chat_id=chat_id, retry_state={"attempt": 1, "delay_ms": 1000})
    assert chat_state(memory_app, chat_id).retry_state == {"attempt": 1, "delay_ms": 1000}
    assert run(memory_app, type="record_generation_attempt", chat_id=chat_id)["generation_attempt"] == 2
    assert chat_state(memory_app, chat_id).retry_state is None
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="record_retry_state", chat_id=chat_id, retry_state={})
    assert err.value.message == "RecordRetryState requires a retry payload"
    before = chat_state(memory_app, chat_id).history_version
    result = run(memory_app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [{"type": "text", "text": "x"}]}])
    s = chat_state(memory_app, chat_id)
    assert result["generation_attempt"] == 0 and s.history_version == s.version > before


# -- families -------------------------------------------------------------------------------------------------

def test_child_chats_share_the_root_and_archive_as_a_family(memory_app):
    root = create(memory_app, initial_status="waiting")
    child = create(memory_app, parent_chat_id=root)
    grandchild = create(memory_app, parent_chat_id=child)
    assert str(chat_state(memory_app, grandchild).root_chat_id) == root
    head = memory_app.head()
    with pytest.raises(LedgerError) as err:  # a busy member refuses the whole family
        run(memory_app, type="set_archived", chat_id=root, archived=True)
    assert err.value.code == "transition_not_allowed"
    assert memory_app.head() == head and not chat_state(memory_app, root).archived
    run(memory_app, type="finish_turn", chat_id=child)
    run(memory_app, type="finish_turn", chat_id=grandchild)
    result = run(memory_app, type="set_archived", chat_id=root, archived=True)
    assert set(result["family_chat_ids"]) == {child, grandchild}
    assert all(chat_state(memory_app, c).execution_state == "XW" for c in (root, child, grandchild))
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="set_archived", chat_id=root, archived=True)
    assert (err.value.code, err.value.message) == ("archived_flag_unchanged",
                                                   "SetArchived input matches the current archived flag")
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="set_archived", chat_id=child, archived=False)
    assert (err.value.code, err.value.message) == ("not_root_chat",
                                                   "Chat archive state can only be changed on the root chat.")
    with pytest.raises(LedgerError) as err:
        create(memory_app, parent_chat_id=grandchild)
    assert err.value.code == "chat_family_archived"


def test_end_chat_cascades_clears_queue_and_releases(memory_app):
    root = chat_in(memory_app, "R1")
    child = create(memory_app, parent_chat_id=root)
    result = run(memory_app, type="end_chat", chat_id=root, prefix_messages=[
        {"role": "assistant", "parts": [{"type": "tool-call", "tool_call_id": "in_batch", "tool_name": "x", "args": {}}]}])
    assert result["execution_state"] == "XW" and result["family_chat_ids"] == [child]
    s = chat_state(memory_app, root)
    assert s.queue == [] and s.worker_id is None and s.archived
    cancels = [e for e in events_of(memory_app, root) if isinstance(e, ev.ToolCallsCanceled)]
    # first the dynamic call left outstanding, then the call carried in the batch itself
    assert [m.parts[0].tool_call_id for e in cancels[-2:] for m in e.messages] == ["call_dyn", "in_batch"]
    assert chat_state(memory_app, child).execution_state == "XW"
    assert load_chat(memory_app, uuid.UUID(child)).state.archived


def test_titles(memory_app):
    chat_id = create(memory_app, text="  A long   first message\nwith lines  ")
    assert chat_state(memory_app, chat_id).title == "A long first message with lines"
    run(memory_app, type="set_title", chat_id=chat_id, title="  Better  ")
    assert chat_state(memory_app, chat_id).title == "Better"
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="set_title", chat_id=chat_id, title="   ")
    assert (err.value.code, err.value.message) == ("invalid_command", "Title cannot be empty.")


def test_unknown_chat(memory_app):
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="interrupt", chat_id=str(uuid.uuid4()))
    assert (err.value.code, err.value.message) == ("chat_not_found", "chat not found")
