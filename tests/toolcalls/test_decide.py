"""The pure core of tool-call executions: claim / record response / cancel, each branch, the exact cancel
texts, and locating a call in its chat."""

from __future__ import annotations

from uuid import UUID

import pytest

from ledger.chat.views import tool_call_execution_ids
from ledger.errors import LedgerError
from ledger.toolcalls import events as ev
from ledger.toolcalls.identity import locate_call
from ledger.toolcalls.state import cancel_view, evolve
from tests.policy.history import CHAT, assistant, call, history, result, tool, user
from tests.toolcalls.core import CANCELED_EXECUTE, NOT_RUN, OK, TOPIC, Stream, facts

def refused(fn, *args, **kw) -> tuple[str, str]:
    with pytest.raises(LedgerError) as err:
        fn(*args, **kw)
    return err.value.code, err.value.message


# -- claim -----------------------------------------------------------------------------------------------

def test_first_claim_runs_and_opens_the_stream():
    s = Stream(facts())
    events = s.claim(sha="abc")
    assert [type(e) for e in events] == [ev.ToolCallExecutionOpened, ev.ToolCallClaimed]
    assert (events[1].claim_epoch, events[1].outcome) == (1, "run")
    assert events[0].originator_id == s.facts.execution_id and events[0].originator_topic == TOPIC
    assert (s.state.status, s.state.claim_epoch, s.state.input_sha256, s.state.version) == ("running", 1, "abc", 2)


def test_repeat_claims_get_saved_with_a_new_epoch_whether_running_or_done():
    s = Stream(facts())
    s.claim()
    assert [(e.claim_epoch, e.outcome) for e in s.claim()] == [(2, "saved")]
    s.respond()
    assert [(e.claim_epoch, e.outcome) for e in s.claim()] == [(3, "saved")]
    assert s.state.response == OK and s.state.status == "done"


def test_claim_after_cancel_is_refused_whether_or_not_it_ran():
    never = Stream(facts())
    never.cancel()
    assert refused(never.claim) == ("tool_call_canceled", "tool call was canceled; it will not run")
    ran = Stream(facts())
    ran.claim()
    ran.cancel()
    assert refused(ran.claim)[0] == "tool_call_canceled"


def test_claim_checks_the_tool_name_and_the_first_input_hash():
    s = Stream(facts())
    assert refused(s.claim, tool_name="write_file")[0] == "invalid_command"
    s.claim(sha="abc")
    assert refused(s.claim, sha="xyz") == ("tool_call_input_mismatch",
                                          "input_sha256 does not match the first claim of this tool call")
    assert s.claim(sha="abc") and s.claim(sha=None)  # the same hash, or none, is a repeat


def test_a_first_claim_without_hash_adopts_the_first_hash_given_later():
    s = Stream(facts())
    s.claim()
    s.claim(sha="abc")
    assert s.state.input_sha256 == "abc"
    assert refused(s.claim, sha="xyz")[0] == "tool_call_input_mismatch"


# -- record response -----------------------------------------------------------------------------------

def test_response_is_recorded_once():
    s = Stream(facts())
    s.claim()
    assert [type(e) for e in s.respond()] == [ev.ToolCallResponseRecorded]
    assert s.respond() == []  # an identical repeat records nothing
    other = ev.ToolCallResponse(status=500, content_type="text/plain", body="boom")
    assert refused(s.respond, other) == ("tool_call_response_recorded",
                                         "a different response is already recorded for this tool call")


def test_response_needs_a_claim():
    s = Stream(facts())
    assert refused(s.respond) == ("tool_call_not_claimed", "tool call has not been claimed")
    s.cancel()
    assert refused(s.respond)[0] == "tool_call_canceled"  # canceled before it ran: nothing ran


@pytest.mark.parametrize("status", [99, 600, -1])
def test_response_status_must_be_http_like(status):
    s = Stream(facts())
    s.claim()
    assert refused(s.respond, ev.ToolCallResponse(status=status, content_type="text/plain", body=""))[0] == "invalid_command"


def test_a_run_canceled_while_running_still_records_its_response():
    s = Stream(facts("edit_files"))
    s.claim()
    s.cancel()
    assert [type(e) for e in s.respond()] == [ev.ToolCallResponseRecorded]


# -- cancel ----------------------------------------------------------------------------------------------

def test_cancel_before_any_claim_records_not_run():
    s = Stream(facts())
    events = s.cancel()
    assert [type(e) for e in events] == [ev.ToolCallExecutionOpened, ev.ToolCallCanceled]
    c = events[1]
    assert (c.received, c.outcome, c.result, c.is_error) == (False, "not_run", NOT_RUN, True)
    assert s.state.status == "canceled" and s.state.claim_epoch == 0


def test_cancel_of_a_running_execute_stops_it():
    s = Stream(facts("execute"))
    s.claim()
    c = s.cancel()[0]
    assert (c.received, c.outcome, c.result, c.is_error) == (True, "canceled_while_running", CANCELED_EXECUTE, False)


def test_cancel_of_another_running_tool_waits_for_its_response():
    s = Stream(facts("write_file"))
    s.claim()
    c = s.cancel()[0]
    assert (c.received, c.outcome, c.result) == (True, "pending", None)
    s.respond(ev.ToolCallResponse(status=200, content_type="application/json", body='{"ok": true}'))
    assert cancel_view(s.state) == {"received": True, "outcome": "completed", "result": {"ok": True},
                                    "is_error": False}


@pytest.mark.parametrize("response,result,is_error", [
    (OK, {"exit_code": 0, "output": "hi"}, False),
    (ev.ToolCallResponse(status=200, content_type="application/json; charset=utf-8", body="[1]"), [1], False),
    (ev.ToolCallResponse(status=200, content_type="text/plain", body="done"), "done", False),
    (ev.ToolCallResponse(status=400, content_type="application/problem+json", body='{"error": "bad"}'),
     {"error": "bad"}, True),
    (ev.ToolCallResponse(status=500, content_type="application/json", body="not json"), "not json", True),
])
def test_cancel_of_a_finished_run_reports_its_response(response, result, is_error):
    s = Stream(facts("execute"))
    s.claim()
    s.respond(response)
    c = s.cancel()[0]
    assert (c.received, c.outcome, c.result, c.is_error) == (True, "completed", result, is_error)


def test_a_second_cancel_records_nothing():
    s = Stream(facts())
    s.cancel()
    assert s.cancel() == []
    s2 = Stream(facts())
    s2.claim()
    s2.cancel()
    assert s2.cancel() == []


def test_the_stream_replays_to_the_same_state():
    s = Stream(facts("write_file"))
    s.claim(sha="h")
    s.claim()
    s.cancel()
    s.respond()
    replayed = None
    for e in s.events:
        replayed = evolve(replayed, e)
    assert replayed == s.state


# -- locating the call -----------------------------------------------------------------------------------

CHAT_WITH_CALLS = history(
    user(), assistant(call("c1", "execute"), call("dup", "a"), call("dup", "b"), call("", "c"),
                      call("w1", "web_search", provider_executed=True), result("w1", "web_search")),
    tool(result("c1", "execute")),
)


def test_locate_finds_the_call_and_its_deterministic_id():
    f = locate_call(CHAT_WITH_CALLS, 2, "c1")
    expected = UUID(str(tool_call_execution_ids(CHAT, 2, ["c1", "dup", "dup", "", "w1"])["c1"]))
    assert (f.execution_id, f.chat_id, f.assistant_message_id, f.tool_call_id, f.tool_name) == (
        expected, CHAT, 2, "c1", "execute")


@pytest.mark.parametrize("chat,message_id,call_id,code", [
    (None, 2, "c1", "chat_not_found"),
    (CHAT_WITH_CALLS, 9, "c1", "message_not_found"),
    (CHAT_WITH_CALLS, 0, "c1", "message_not_found"),
    (CHAT_WITH_CALLS, 1, "c1", "tool_call_not_found"),   # a user message
    (CHAT_WITH_CALLS, 3, "c1", "tool_call_not_found"),   # a tool message
    (CHAT_WITH_CALLS, 2, "zz", "tool_call_not_found"),
    (CHAT_WITH_CALLS, 2, "dup", "tool_call_no_identity"),
    (CHAT_WITH_CALLS, 2, "", "tool_call_no_identity"),
    (CHAT_WITH_CALLS, 2, "w1", "invalid_command"),
])
def test_locate_refusals(chat, message_id, call_id, code):
    assert refused(locate_call, chat, message_id, call_id)[0] == code
