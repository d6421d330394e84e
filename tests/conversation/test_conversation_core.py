"""Unit tests of the pure conversation core: every operation's preconditions, effects and error texts."""

from __future__ import annotations

import copy
from typing import Any, Callable

import msgspec
import pytest
from tests.conversation.harness import OTHER_SESSION, SESSION, Harness, calls

from ledger.conversation import decide as core
from ledger.conversation.events import (
    ArrivalAppended, ArrivalQueued, ArrivalsFlushed, ConversationHalted, ConversationRecovered,
    RoundCompleted, RoundStalled, SteerDiscarded, SteerPrepared,
)
from ledger.conversation.queries import conversation_show, conversation_view_row, validate_steer
from ledger.conversation.values import (
    MAX_U64, AgentText, Attachment, Box, BoxItem, Call, History, MalformedCall, SteerToken, SystemText,
    TextItem, ToolCall, ToolCallId, ToolReturn, UserText, project,
)
from ledger.errors import LedgerError


def refused(h: Harness, code: str, message: str, op: Callable[[], Any]) -> None:
    """``op`` is refused with (code, message) and changes nothing."""
    before, version, count = copy.deepcopy(h.state), h.version, len(h.events)
    with pytest.raises(LedgerError) as info:
        op()
    assert (info.value.code, info.value.message) == (code, message)
    assert h.state == before and h.version == version and len(h.events) == count


def tid(sequence: int, session: str = SESSION) -> ToolCallId:
    return ToolCallId(session=session, sequence=sequence)


def box(i: int, content: Any) -> Box:
    return Box(id=i, content=content)


def running(h: Harness, text: str = "ask") -> int:
    h.user(text)
    return h.begin_job()


def with_wave(h: Harness, n: int = 1) -> int:
    job = running(h)
    h.stage(job, "thinking", calls(n))
    return job


# -- start ----------------------------------------------------------------------------------------------

def test_new_conversation_is_quiet_and_empty():
    h = Harness()
    s = h.state
    assert (s.session, s.sequence, s.submitted, s.generation, s.boxes, s.mode) == (SESSION, 0, 0, 0, [], "idle")
    assert s.status == "Quiet"
    assert h.begin() == []


def test_forced_start_schedules_an_inference():
    h = Harness(force=True)
    assert h.state.status == "Running"
    began = h.begin()[0]
    assert (began.job, began.submitted_from, began.submitted_to) == (1, 0, 0)


TRANSCRIPT = [
    box(1, UserText(text="ask")),
    box(2, AgentText(text="thinking")),
    box(3, ToolCall(tool_call_id=tid(4), name="ls", arguments="{}")),
    box(4, ToolCall(tool_call_id=tid(7), name="cat", arguments="{}")),
    box(5, ToolReturn(tool_call_id=tid(7), originating_call=4, result="x")),
]


def test_recovered_transcript_sets_sequence_to_highest_stored_and_resends_everything():
    h = Harness(transcript=TRANSCRIPT, force=True)
    assert h.state.sequence == 7 and h.state.submitted == 0 and len(h.state.boxes) == 5
    assert h.state.calls == {4: 3, 7: 4} and h.state.returned == {7}
    began = h.begin()[0]
    assert (began.submitted_from, began.submitted_to) == (0, 5)
    assert h.stage_ids(began.job, 1) == [tid(8)]


def test_recovered_transcript_refuses_a_foreign_session_before_other_checks():
    bad = [box(2, ToolCall(tool_call_id=tid(1, OTHER_SESSION), name="x", arguments=""))]
    with pytest.raises(LedgerError) as info:
        Harness(transcript=bad)
    assert info.value.code == "foreign_session_tool_call"
    assert info.value.message == "recovered ToolCallId belongs to another session"


@pytest.mark.parametrize("transcript, code", [
    ([box(2, UserText(text="a"))], "non_contiguous_box_id"),
    ([box(1, UserText(text="a")), box(1, UserText(text="b"))], "non_contiguous_box_id"),
    ([box(1, AgentText(text=""))], "empty_agent_text"),
    ([box(1, ToolCall(tool_call_id=tid(1), name="a", arguments="")),
      box(2, ToolCall(tool_call_id=tid(1), name="b", arguments=""))], "duplicate_tool_call"),
    ([box(1, ToolReturn(tool_call_id=tid(1), originating_call=1, result=""))], "unknown_tool_call"),
    ([box(1, ToolCall(tool_call_id=tid(1), name="a", arguments="")),
      box(2, UserText(text="u")),
      box(3, ToolReturn(tool_call_id=tid(1), originating_call=2, result=""))], "wrong_originating_call"),
    ([box(1, ToolCall(tool_call_id=tid(1), name="a", arguments="")),
      box(2, ToolReturn(tool_call_id=tid(1), originating_call=1, result="")),
      box(3, ToolReturn(tool_call_id=tid(1), originating_call=1, result=""))], "duplicate_tool_return"),
])
def test_recovered_transcript_validation(transcript, code):
    with pytest.raises(LedgerError) as info:
        Harness(transcript=transcript)
    assert info.value.code == code


# -- arrivals -------------------------------------------------------------------------------------------

def test_idle_arrivals_append_contiguous_boxes_and_schedule():
    h = Harness()
    for arrival in (SystemText(text="sys"), UserText(text="u"), Attachment()):
        assert isinstance(h.arrive(arrival)[0], ArrivalAppended)
    assert [b.id for b in h.state.boxes] == [1, 2, 3]
    assert h.state.status == "Running" and h.state.scheduled


def test_arrivals_during_a_round_queue_without_box_ids():
    h = Harness()
    job = running(h)
    events = h.user("more")
    assert isinstance(events[0], ArrivalQueued) and events[0].job == job
    assert len(h.state.boxes) == 1 and h.state.queued == [UserText(text="more")]


def test_return_resolves_its_originating_call():
    h = Harness()
    job = with_wave(h, 2)
    h.complete(job)
    h.ret(2, "result", is_error=True)
    assert h.state.boxes[-1].content == ToolReturn(tool_call_id=tid(2), originating_call=4, result="result",
                                                   is_error=True)


def test_return_for_a_call_of_the_running_stage_queues():
    h = Harness()
    with_wave(h)
    assert isinstance(h.ret(1)[0], ArrivalQueued)


def test_unknown_and_foreign_returns_are_refused():
    h = Harness()
    job = with_wave(h)
    message = "tool return names an unknown tool call"
    refused(h, "unknown_tool_call", message, lambda: h.ret(2))
    refused(h, "unknown_tool_call", message, lambda: h.ret(1, session=OTHER_SESSION))
    h.complete(job)
    refused(h, "unknown_tool_call", message, lambda: h.ret(9))


def test_duplicate_returns_are_refused_at_accept_time_even_while_queued():
    h = Harness()
    job = with_wave(h)
    h.ret(1)  # queued
    refused(h, "duplicate_tool_return", "tool call already has a return", lambda: h.ret(1))
    h.complete(job)  # drained into a box
    refused(h, "duplicate_tool_return", "tool call already has a return", lambda: h.ret(1))


def test_arrivals_while_stalled_before_a_wave_queue_in_the_open_round():
    h = Harness()
    job = running(h)
    h.fail(job, restartable=True)
    assert isinstance(h.user("x")[0], ArrivalQueued)


def test_arrivals_while_halted_append_but_nothing_begins():
    h = Harness()
    job = with_wave(h)
    h.fail(job)
    assert isinstance(h.user("x")[0], ArrivalAppended)
    assert h.state.status == "Stalled" and h.state.scheduled
    assert h.begin() == []


# -- begin ----------------------------------------------------------------------------------------------

def test_begin_does_nothing_unless_idle_and_ready():
    h = Harness()
    assert h.begin() == []  # quiet
    job = running(h)
    assert h.begin() == []  # running
    h.fail(job, restartable=True)
    assert h.begin() == []  # stalled


def test_begin_sends_the_unsubmitted_boxes_and_numbers_jobs_monotonically():
    h = Harness()
    h.user("a")
    h.user("b")
    began = h.begin()[0]
    assert (began.job, began.resumed, began.frontier, began.submitted_from, began.submitted_to) == (1, False, 2, 0, 2)
    assert h.state.submitted == 2 and h.state.job == 1
    h.complete(1, "answer")
    h.user("c")
    assert h.begin()[0].job == 2


def test_begin_sends_only_the_external_delta_not_the_agents_final_text():
    """§8.5 decision: completion moves the frontier past the agent's own final text."""
    h = Harness()
    job = running(h)
    h.user("while running")
    h.complete(job, "final answer")
    assert [type(b.content) for b in h.state.boxes] == [UserText, AgentText, UserText]
    assert h.state.submitted == 2
    began = h.begin()[0]
    assert (began.submitted_from, began.submitted_to) == (2, 3)


def test_begin_refuses_when_job_ids_are_exhausted():
    h = Harness()
    h.user()
    h.state = msgspec.structs.replace(h.state, last_job=MAX_U64)
    refused(h, "job_ids_exhausted", "inference job ids were exhausted", h.begin)


# -- prepare_stage --------------------------------------------------------------------------------------

def test_stage_appends_text_then_calls_with_fresh_ids_in_provider_order():
    h = Harness()
    job = running(h)
    event = h.stage(job, "thinking", calls(3))[0]
    assert [b.id for b in event.boxes] == [2, 3, 4, 5]
    assert event.boxes[0].content == AgentText(text="thinking")
    assert [b.content.tool_call_id for b in event.boxes[1:]] == [tid(1), tid(2), tid(3)]
    assert [b.content.name for b in event.boxes[1:]] == ["tool0", "tool1", "tool2"]
    assert (event.sequence, event.submitted) == (3, 5)
    assert (h.state.sequence, h.state.submitted, h.state.call_wave) == (3, 5, True)
    assert h.stage_ids(job, 2) == [tid(4), tid(5)]


def test_text_only_stage_does_not_latch_the_call_wave():
    h = Harness()
    job = running(h)
    h.stage(job, "just text")
    assert not h.state.call_wave and h.state.submitted == 2


def test_empty_stage_records_nothing():
    h = Harness()
    job = running(h)
    assert h.stage(job) == []


def test_malformed_stage_is_checked_before_the_job_and_consumes_no_id():
    h = Harness()
    job = running(h)
    message = "stage contains a malformed tool call"
    refused(h, "malformed_tool_call", message, lambda: h.stage(job, "t", [Call(name="a", arguments=""),
                                                                           MalformedCall(error="bad json")]))
    refused(h, "malformed_tool_call", message, lambda: h.stage(job + 5, "", [History(item={"a": 1})]))
    assert h.stage_ids(job, 1) == [tid(1)]


def test_stale_stage_is_refused():
    h = Harness()
    refused(h, "stale_stage", "stale Codex inference stage", lambda: h.stage(1, "t"))
    job = running(h)
    refused(h, "stale_stage", "stale Codex inference stage", lambda: h.stage(job + 1, "t"))
    h.complete(job)
    refused(h, "stale_stage", "stale Codex inference stage", lambda: h.stage(job, "t"))


def test_stage_is_refused_while_a_steer_is_pending_and_the_job_check_comes_first():
    h = Harness()
    job = running(h)
    h.user("steer me")
    h.steer(job)
    refused(h, "steer_uncommitted", "a Codex steer remains uncommitted", lambda: h.stage(job, "t", calls(1)))
    refused(h, "stale_stage", "stale Codex inference stage", lambda: h.stage(job + 1, "t"))
    h.commit(h.state.pending_steer)
    assert h.stage_ids(job, 1) == [tid(1)]


def test_stage_refused_when_tool_call_ids_are_exhausted():
    top = [box(1, ToolCall(tool_call_id=tid(MAX_U64), name="a", arguments=""))]
    h = Harness(transcript=top, force=True)
    job = h.begin_job()
    refused(h, "tool_call_ids_exhausted", "ToolCallId space was exhausted", lambda: h.stage(job, "t", calls(1)))
    h.stage(job, "text needs no id")
    assert h.state.sequence == MAX_U64


# -- steering -------------------------------------------------------------------------------------------

def test_steer_is_one_stable_external_fifo_prefix():
    """The reference's 0.3.0 test: the stage's own boxes are never part of a steer."""
    h = Harness()
    job = running(h, "ask")
    h.stage(job, "thinking", calls(1))
    assert h.steer(job) == []
    h.user("u")
    h.ret(1)
    flushed, prepared = h.steer(job)
    assert isinstance(flushed, ArrivalsFlushed) and isinstance(prepared, SteerPrepared)
    token = h.state.pending_steer
    assert token == SteerToken(job=job, generation=1, start=3, end=5)
    assert [b.content for b in h.state.boxes[3:5]] == [
        UserText(text="u"), ToolReturn(tool_call_id=tid(1), originating_call=3, result="ok")]
    assert h.state.queued == [] and h.state.submitted == 3
    # re-preparing returns the same token and records nothing
    assert h.steer(job) == [] and h.state.pending_steer == token


def test_empty_flush_hands_out_no_token_and_no_generation():
    h = Harness()
    job = running(h)
    assert h.steer(job) == [] and h.state.generation == 0 and h.state.pending_steer is None


def test_stale_steer_is_refused():
    h = Harness()
    refused(h, "stale_steer", "stale Codex inference steer", lambda: h.steer(1))
    job = running(h)
    refused(h, "stale_steer", "stale Codex inference steer", lambda: h.steer(job + 1))


def test_steer_refused_when_frontier_is_inconsistent():
    h = Harness()
    job = running(h)
    h.user("q")
    h.state = msgspec.structs.replace(h.state, submitted=0)
    refused(h, "frontier_inconsistent", "Codex submitted frontier is inconsistent", lambda: h.steer(job))


def test_steer_refused_when_generations_are_exhausted():
    h = Harness()
    job = running(h)
    h.user("q")
    h.state = msgspec.structs.replace(h.state, generation=MAX_U64)
    refused(h, "steer_generations_exhausted", "Codex steer generation was exhausted", lambda: h.steer(job))


def test_commit_advances_the_frontier_exactly_once():
    h = Harness()
    job = running(h)
    h.user("q")
    h.steer(job)
    token = h.state.pending_steer
    validate_steer(h.state, token)
    h.commit(token)
    assert h.state.submitted == token.end == 2 and h.state.pending_steer is None
    refused(h, "invalid_steer", "stale or invalid Codex steer", lambda: h.commit(token))
    with pytest.raises(LedgerError):
        validate_steer(h.state, token)


@pytest.mark.parametrize("change", [{"job": 2}, {"generation": 2}, {"start": 0}, {"end": 3}])
def test_tampered_tokens_are_invalid(change):
    h = Harness()
    job = running(h)
    h.user("q")
    h.steer(job)
    bad = msgspec.structs.replace(h.state.pending_steer, **change)
    refused(h, "invalid_steer", "stale or invalid Codex steer", lambda: h.commit(bad))


def test_generations_count_up_and_later_steers_start_at_the_frontier():
    h = Harness()
    job = running(h)
    h.user("a")
    h.steer(job)
    h.commit(h.state.pending_steer)
    h.user("b")
    h.steer(job)
    assert h.state.pending_steer == SteerToken(job=job, generation=2, start=2, end=3)


def test_flush_consumes_the_follow_up():
    h = Harness()
    job = running(h)
    h.user("a")
    h.steer(job)
    h.commit(h.state.pending_steer)
    completed = h.complete(job, "done")[0]
    assert not completed.follow_up and h.state.status == "Quiet"


# -- complete -------------------------------------------------------------------------------------------

def test_stale_completion_is_refused():
    h = Harness()
    refused(h, "stale_completion", "stale Codex inference completion", lambda: h.complete(1, "x"))
    job = running(h)
    refused(h, "stale_completion", "stale Codex inference completion", lambda: h.complete(job + 1, "x"))


def test_completion_concatenates_text_items_and_drains_arrivals_with_one_follow_up():
    h = Harness()
    job = running(h)
    for text in ("a", "b", "c"):
        h.user(text)
    event = h.complete(job, items=[TextItem(text="part 1, "), TextItem(text="part 2")])[0]
    assert isinstance(event, RoundCompleted)
    assert event.text_box == box(2, AgentText(text="part 1, part 2"))
    assert [b.id for b in event.drained] == [3, 4, 5] and event.follow_up
    assert h.state.status == "Running" and h.state.mode == "idle"
    follow_up = h.begin_job()
    assert follow_up == job + 1 and h.begin() == []
    h.complete(follow_up)
    assert h.state.status == "Quiet"


def test_empty_completion_adds_no_box():
    h = Harness()
    job = running(h)
    h.complete(job)
    assert len(h.state.boxes) == 1 and h.state.status == "Quiet"


def test_completion_with_an_uncommitted_steer_stalls_non_restartably():
    h = Harness()
    job = running(h)
    h.user("q")
    h.steer(job)
    events = h.complete(job, "done")
    assert [type(e) for e in events] == [SteerDiscarded, RoundStalled]
    assert events[1].message == "Codex inference completed with an uncommitted steer"
    assert h.state.status == "Stalled" and not h.state.restartable
    assert h.state.pending_steer is None and h.state.submitted == 1  # frontier not advanced
    refused(h, "not_restartable", "stalled conversation is not restartable", h.restart)


def test_completion_with_a_box_stalls_and_the_steer_check_comes_first():
    h = Harness()
    job = running(h)
    event = h.complete(job, items=[TextItem(text="x"), BoxItem(value=Call(name="late", arguments=""))])[0]
    assert isinstance(event, RoundStalled) and event.message == "terminal Codex output contains a box"
    assert not event.restartable and len(h.state.boxes) == 1

    h2 = Harness()
    job = running(h2)
    h2.user("q")
    h2.steer(job)
    events = h2.complete(job, items=[BoxItem(value=Call(name="late", arguments=""))])
    assert events[-1].message == "Codex inference completed with an uncommitted steer"


def test_completion_failure_after_a_wave_halts_and_closes_the_round():
    h = Harness()
    job = with_wave(h)
    h.user("queued")
    event = h.complete(job, items=[BoxItem(value=Call(name="late", arguments=""))])[0]
    assert isinstance(event, ConversationHalted) and event.follow_up
    assert [b.content for b in event.drained] == [UserText(text="queued")]
    assert h.state.halted and not h.state.round_open and not h.state.restartable


# -- fail -----------------------------------------------------------------------------------------------

def test_stale_fail_is_ignored():
    h = Harness()
    assert h.fail(1) == []
    job = running(h)
    assert h.fail(job + 1) == [] and h.state.mode == "running"


@pytest.mark.parametrize("restartable", [True, False])
def test_fail_before_a_wave_stalls_with_the_round_open(restartable):
    h = Harness()
    job = running(h)
    h.stage(job, "text only")
    event = h.fail(job, "boom", restartable)[0]
    assert isinstance(event, RoundStalled)
    assert h.state.status == "Stalled" and h.state.stall_message == "boom"
    assert h.state.restartable is restartable and h.state.round_open and not h.state.halted


def test_fail_after_a_wave_halts_even_if_the_caller_says_restartable():
    h = Harness()
    job = with_wave(h)
    event = h.fail(job, "boom", True)[0]
    assert isinstance(event, ConversationHalted) and not event.follow_up
    assert h.state.status == "Stalled" and not h.state.restartable and h.state.halted
    refused(h, "not_restartable", "stalled conversation is not restartable", h.restart)


def test_fail_discards_a_pending_steer_without_advancing_the_frontier():
    h = Harness()
    job = running(h)
    h.user("q")
    h.steer(job)
    token = h.state.pending_steer
    events = h.fail(job, "boom", True)
    assert isinstance(events[0], SteerDiscarded) and events[0].generation == token.generation
    assert h.state.pending_steer is None and h.state.submitted == 1


# -- restart --------------------------------------------------------------------------------------------

def test_restart_requires_a_restartable_stall():
    h = Harness()
    refused(h, "not_stalled", "conversation is not stalled", h.restart)
    job = running(h)
    refused(h, "not_stalled", "conversation is not stalled", h.restart)
    h.fail(job, restartable=False)
    refused(h, "not_restartable", "stalled conversation is not restartable", h.restart)


def test_restart_reopens_the_same_round_under_a_fresh_job_with_full_replay():
    h = Harness()
    h.user("a")
    job = h.begin_job()
    h.user("queued before failure")
    h.steer(job)
    generation = h.state.generation
    h.fail(job, restartable=True)
    h.user("queued while stalled")
    h.restart()
    s = h.state
    assert (s.status, s.mode, s.submitted, s.pending_steer, s.generation) == ("Running", "idle", 0, None, generation)
    began = h.begin()[0]
    assert (began.job, began.resumed, began.frontier) == (job + 1, True, 1)
    assert (began.submitted_from, began.submitted_to) == (0, 2)
    h.steer(began.job)
    assert h.state.pending_steer == SteerToken(job=began.job, generation=generation + 1, start=2, end=3)
    h.commit(h.state.pending_steer)
    assert not h.complete(began.job, "ok")[0].follow_up
    assert h.state.status == "Quiet"


def test_restart_keeps_the_sequence():
    h = Harness()
    job = running(h)
    h.stage(job, "no calls")
    h.fail(job, restartable=True)
    h.restart()
    job = h.begin_job()
    assert h.stage_ids(job, 1) == [tid(1)]
    h.fail(job)
    h.recover(force=True)
    job = h.begin_job()
    assert h.stage_ids(job, 1) == [tid(2)]


def test_queued_arrivals_survive_stall_and_restart_and_arm_one_follow_up():
    h = Harness()
    job = running(h)
    h.fail(job, restartable=True)
    h.user("x")
    h.user("y")
    h.restart()
    job = h.begin_job()
    event = h.complete(job, "done")[0]
    assert [b.content for b in event.drained] == [UserText(text="x"), UserText(text="y")] and event.follow_up


# -- recover --------------------------------------------------------------------------------------------

def test_recover_resets_runtime_state_and_appends_queued_arrivals():
    h = Harness()
    job = with_wave(h, 2)
    h.user("queued")
    h.ret(1)
    h.steer(job)
    h.user("queued after the flush")
    event = h.recover()[0]
    assert isinstance(event, ConversationRecovered)
    assert event.abandoned_job == job and event.sequence == 2 and event.scheduled
    s = h.state
    assert (s.mode, s.job, s.submitted, s.pending_steer, s.round_open, s.queued) == ("idle", None, 0, None, False, [])
    assert s.boxes[-1].content == UserText(text="queued after the flush") and s.generation == 1
    began = h.begin()[0]
    assert began.job == job + 1 and (began.submitted_from, began.submitted_to) == (0, len(s.boxes))
    refused(h, "stale_completion", "stale Codex inference completion", lambda: h.complete(job))


def test_recover_from_a_halt_is_quiet_unless_forced_or_work_is_pending():
    h = Harness()
    job = with_wave(h)
    h.fail(job)
    h.recover()
    assert h.state.status == "Quiet" and not h.state.halted and h.state.stall_message is None
    h.recover(force=True)
    assert h.state.status == "Running"


def test_recover_keeps_a_scheduled_inference():
    h = Harness()
    h.user()
    h.recover()
    assert h.state.status == "Running"


# -- idempotency keys, views ----------------------------------------------------------------------------

def test_evolve_remembers_the_versions_each_idempotency_key_recorded():
    h = Harness()
    job = running(h)
    h.user("a")
    h.apply(lambda e: core.decide_prepare_steer(h.state, job, e), key="steer-1")
    assert h.state.idempotency["steer-1"].first == h.version - 1
    assert h.state.idempotency["steer-1"].last == h.version


def test_view_row_and_show():
    h = Harness()
    job = with_wave(h)
    h.user("q")
    row = conversation_view_row(h.state)
    assert row == {"session": SESSION, "status": "Running", "restartable": False, "stall_message": None,
                   "halted": False, "box_count": 3, "queued_count": 1, "current_job": job,
                   "pending_steer": False, "last_sequence": 1, "submitted": 3}
    h.fail(job, "boom")
    show = conversation_show(h.state)
    assert show["conversation"]["status"] == "Stalled" and show["conversation"]["halted"]
    assert show["boxes"][0] == {"type": "history", "item": {"box_id": 1, "type": "user", "text": "ask"}}
    assert show["boxes"][2]["item"]["tool_call_id"] == {"session": SESSION, "sequence": 1}
    assert show["boxes"] == [msgspec.to_builtins(project(b)) for b in h.state.boxes]


def test_replay_equals_live_state():
    h = Harness()
    job = with_wave(h)
    h.user("q")
    h.steer(job)
    h.commit(h.state.pending_steer)
    h.complete(job, "done")
    assert h.replay() == h.state
