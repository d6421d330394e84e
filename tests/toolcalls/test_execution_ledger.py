"""The tool-call execution ledger as chatd keeps it (issue 24, point 3): chatd's statuses, the process a run
records, and how a chat's synthetic cancellations and edits map the executions — ported from upstream's
``synthetic_cancellation_ledger_test.go`` (the upstream names are in the test ids). On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from commands.toolcalls import load_execution
from ledger.base import Emitter
from ledger.chat.views import message_rows, tool_call_execution_ids
from ledger.errors import LedgerError
from ledger.toolcalls import events as tev
from ledger.toolcalls.state import evolve
from tests.chat.helpers import ORG, OWNER, run

EXECUTE = {"type": "tool-call", "tool_name": "execute", "args": {}}


def _chat_with_step(app: Any, *calls: str) -> tuple[str, int, int]:
    """A chat (R0) with one step: a user message, then an assistant message with ``execute`` calls."""
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="hello")["chat_id"]
    run(app, type="acquire", chat_id=chat_id, worker_id=str(uuid.uuid4()), runner_id=str(uuid.uuid4()))
    step = run(app, type="commit_step", chat_id=chat_id, messages=[
        {"role": "user", "parts": [{"type": "text", "text": "first user"}]},
        {"role": "assistant", "parts": [{**EXECUTE, "tool_call_id": c} for c in calls]}])
    user, assistant = step["message_ids"]
    return chat_id, user, assistant


def _claim(app: Any, chat_id: str, amid: int, call: str, background: bool, process: str | None) -> dict[str, Any]:
    base = {"chat_id": chat_id, "assistant_message_id": amid, "tool_call_id": call}
    claimed = run(app, type="claim_tool_call", tool_name="execute", input_sha256=f"hash-{call}",
                  background=background, **base)
    assert claimed["execution_status"] == "reserved"
    if process is not None:
        run(app, type="record_tool_call_process", claim_epoch=claimed["claim_epoch"], **base)
        started = run(app, type="record_tool_call_process", claim_epoch=claimed["claim_epoch"],
                      process_id=process, workspace_agent_id=str(uuid.uuid4()), **base)
        assert started["execution_status"] == "running"
    return claimed


def _execution(app: Any, chat_id: str, amid: int, call: str, calls: list[str]) -> Any:
    eid = tool_call_execution_ids(uuid.UUID(chat_id), amid, calls)[call]
    return load_execution(app, eid).state


def _tool_results(app: Any, chat_id: str, ids: list[int]) -> dict[str, Any]:
    rows = {r["message_id"]: r for r in message_rows(app.stream(uuid.UUID(chat_id)))}
    return {p["tool_call_id"]: p for i in ids if rows[i]["role"] == "tool" for p in rows[i]["parts"]}


def test_TestEditMessage_MapsExecutionLedgerBeforeHistoryDelete(app):
    chat_id, user1, amid = _chat_with_step(app, "call_fg", "call_bg")
    _claim(app, chat_id, amid, "call_fg", False, "proc-fg")
    _claim(app, chat_id, amid, "call_bg", True, "proc-bg")
    edit = run(app, type="edit_message", chat_id=chat_id, message_id=user1, text="edited")
    assert not _tool_results(app, chat_id, edit["message_ids"]), "the deleted turn gets no synthetic history results"
    for call in ("call_fg", "call_bg"):
        s = _execution(app, chat_id, amid, call, ["call_fg", "call_bg"])
        assert s.execution_status == "cancel_requested" and s.result_committed_at is not None


def _detached_setup(app: Any) -> tuple[str, int, int, int, Any]:
    """chatd's CODAGT-757 orphan shape: user1, assistant (a background execute), its process recorded, the turn
    finished, user2 sent: the row is spared to detached and the synthetic result carries its handle."""
    chat_id, user1, amid = _chat_with_step(app, "call_bg")
    _claim(app, chat_id, amid, "call_bg", True, "proc-bg")
    run(app, type="finish_turn", chat_id=chat_id)
    send = run(app, type="send_message", chat_id=chat_id, text="second user")
    assert len(send["message_ids"]) == 2, "synthetic spare + new user"
    (result,) = _tool_results(app, chat_id, send["message_ids"]).values()
    assert result.get("is_error", False) is False and result["result"]["background_process_id"] == "proc-bg"
    s = _execution(app, chat_id, amid, "call_bg", ["call_bg"])
    assert s.execution_status == "detached" and s.result_committed_at is not None
    return chat_id, user1, amid, send["message_ids"][-1], s.result_committed_at


def test_TestEditMessage_KillsPriorDetachedExecutions_DeletedCarrierIsKilled(app):
    chat_id, user1, amid, _, before = _detached_setup(app)
    run(app, type="edit_message", chat_id=chat_id, message_id=user1, text="edited")
    s = _execution(app, chat_id, amid, "call_bg", ["call_bg"])
    assert s.execution_status == "cancel_requested"
    assert s.result_committed_at > before, "the give-up anchor restarts at the edit"


def test_TestEditMessage_KillsPriorDetachedExecutions_SurvivingCarrierIsSpared(app):
    chat_id, _, amid, user2, _ = _detached_setup(app)
    run(app, type="edit_message", chat_id=chat_id, message_id=user2, text="edited")
    assert _execution(app, chat_id, amid, "call_bg", ["call_bg"]).execution_status == "detached"


def test_TestEditMessage_KillsRunningRowWhoseDetachWriteFailed(app):
    chat_id, user1, amid = _chat_with_step(app, "call_bg")
    _claim(app, chat_id, amid, "call_bg", True, "proc-bg")
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "tool", "parts": [
        {"type": "tool-result", "tool_call_id": "call_bg", "tool_name": "execute",
         "result": {"background_process_id": "proc-bg"}}]}])
    assert _execution(app, chat_id, amid, "call_bg", ["call_bg"]).execution_status == "running"
    run(app, type="edit_message", chat_id=chat_id, message_id=user1, text="edited")
    s = _execution(app, chat_id, amid, "call_bg", ["call_bg"])
    assert s.execution_status == "cancel_requested" and s.result_committed_at is not None


def test_TestSyntheticCancellation_MapsExecutionLedger(app):
    chat_id, _, amid = _chat_with_step(app, "call_fg", "call_bg")
    _claim(app, chat_id, amid, "call_fg", False, "proc-fg")
    _claim(app, chat_id, amid, "call_bg", True, "proc-bg")
    run(app, type="finish_turn", chat_id=chat_id)
    send = run(app, type="send_message", chat_id=chat_id, text="after-cancel")
    assert len(send["message_ids"]) == 3, "two synthetic cancels + new user"
    results = _tool_results(app, chat_id, send["message_ids"])
    assert results["call_fg"]["is_error"] is True
    assert results["call_bg"].get("is_error", False) is False and "proc-bg" in str(results["call_bg"]["result"])
    fg = _execution(app, chat_id, amid, "call_fg", ["call_fg", "call_bg"])
    bg = _execution(app, chat_id, amid, "call_bg", ["call_fg", "call_bg"])
    assert (fg.execution_status, bg.execution_status) == ("cancel_requested", "detached")
    assert fg.result_committed_at is not None and bg.result_committed_at is not None


def test_a_call_never_claimed_and_a_finished_run_are_left_as_they_are(app):
    chat_id, _, amid = _chat_with_step(app, "c_done", "c_free")
    claimed = _claim(app, chat_id, amid, "c_done", False, "p1")
    run(app, type="record_tool_call_response", chat_id=chat_id, assistant_message_id=amid, tool_call_id="c_done",
        status=200, body='{"exit_code": 0}')
    run(app, type="finish_turn", chat_id=chat_id)
    run(app, type="send_message", chat_id=chat_id, text="next")
    assert _execution(app, chat_id, amid, "c_done", ["c_done", "c_free"]).execution_status == "exited"
    assert load_execution(app, tool_call_execution_ids(uuid.UUID(chat_id), amid, ["c_done", "c_free"])["c_free"]) is None
    assert claimed["claim_epoch"] == 1


def test_record_tool_call_process_refusals(app):
    chat_id, _, amid = _chat_with_step(app, "c1")
    base = {"chat_id": chat_id, "assistant_message_id": amid, "tool_call_id": "c1"}
    with pytest.raises(LedgerError) as e:
        run(app, type="record_tool_call_process", claim_epoch=1, process_id="p", **base)
    assert e.value.code == "tool_call_not_claimed"
    _claim(app, chat_id, amid, "c1", False, None)
    with pytest.raises(LedgerError) as e:
        run(app, type="record_tool_call_process", claim_epoch=2, process_id="p", **base)
    assert e.value.code == "tool_call_claim_stale"
    run(app, type="record_tool_call_response", status=200, body="{}", **base)
    with pytest.raises(LedgerError) as e:
        run(app, type="record_tool_call_process", claim_epoch=1, process_id="p", **base)
    assert e.value.code == "tool_call_not_running"


def test_streams_recorded_before_the_statuses_replay_unchanged():
    """A claim recorded without ``background`` (before this ledger kept chatd's statuses) was running from
    the claim on: the stream folds to what it folded to before (``status``, epoch, response), and to chatd's
    ``running``/``exited`` — no upcaster is needed, the recorded fact decides."""
    sid, t = uuid.uuid4(), datetime(2026, 1, 1, tzinfo=timezone.utc)
    em = Emitter(sid, 0, t)
    em.emit(tev.ToolCallExecutionOpened, originator_topic="x", chat_id=uuid.uuid4(), assistant_message_id=2,
            tool_call_id="c1", tool_name="execute")
    em.emit(tev.ToolCallClaimed, claim_epoch=1, outcome="run")
    s = None
    for e in em.events:
        s = evolve(s, e)
    assert (s.status, s.execution_status, s.claim_epoch) == ("running", "running", 1)
    em2 = Emitter(sid, s.version, t)
    em2.emit(tev.ToolCallResponseRecorded, response=tev.ToolCallResponse(status=200, content_type="text/plain",
                                                                           body="ok"))
    s = evolve(s, em2.events[0])
    assert (s.status, s.execution_status) == ("done", "exited")


steps = st.lists(st.sampled_from(["process", "respond", "cancel", "finish", "send", "edit"]), max_size=7)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(background=st.booleans(), plan=steps)
def test_the_execution_ledger_rules(memory_app, background, plan):
    """Whatever the order of a run's reports and the chat's cancellations and edits: a detached run is a
    background one with a process; a run with a response is exited (or unknown); one canceled before any claim
    is no_effect; each status change is an event (replay equals live); and the chat never commits an error
    result for a run it detached."""
    app = memory_app
    chat_id, user1, amid = _chat_with_step(app, "c1")
    base = {"chat_id": chat_id, "assistant_message_id": amid, "tool_call_id": "c1"}
    claimed = "cancel" != (plan[:1] or [None])[0]
    if claimed:
        _claim(app, chat_id, amid, "c1", background, None)
    for step in plan:
        try:
            if step == "process":
                run(app, type="record_tool_call_process", claim_epoch=1, process_id="p1", **base)
            elif step == "respond":
                run(app, type="record_tool_call_response", status=200, body="{}", **base)
            elif step == "cancel":
                run(app, type="cancel_tool_call", **base)
            elif step == "finish":
                run(app, type="finish_turn", chat_id=chat_id)
            elif step == "send":
                run(app, type="send_message", chat_id=chat_id, text="more")
            else:
                run(app, type="edit_message", chat_id=chat_id, message_id=user1, text="again")
        except LedgerError:
            pass
    agg = load_execution(app, tool_call_execution_ids(uuid.UUID(chat_id), amid, ["c1"])["c1"])
    if agg is None:
        return
    s = agg.state
    replayed = None
    for e in app.stream(agg.id):
        replayed = evolve(replayed, e)
    assert replayed == s
    if s.execution_status == "detached":
        assert s.background and s.process_id
        results = [p for r in message_rows(app.stream(uuid.UUID(chat_id))) if r["role"] == "tool"
                   for p in r["parts"] if p["tool_call_id"] == "c1" and isinstance(p.get("result"), dict)
                   and p["result"].get("detached")]
        assert results and not results[-1].get("is_error", False)
    if s.response is not None and not s.canceled:
        assert s.execution_status in ("exited", "unknown", "cancel_requested", "detached")
    if not s.claimed:
        assert s.execution_status == "no_effect"
