"""Tool-call facts over time (issue 14 point 7, requirement 002): the timeout counts from the first claim
(later claims see what is left, ``timed_out`` once it has passed with no response), the true wall duration
from the first claim to the response, the ``unknown`` outcome of a crashed handler, only ``execute``,
``edit_files`` and ``write_file`` cancelable (``tool_call_not_cancelable``), and no cancel of a call the
chat already has a result for (``tool_call_resolved``). The pure rules by hypothesis; the commands on both
backends with the handler's clock set by the test (no sleeps)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given, settings, strategies as st

from ledger.errors import LedgerError
from ledger.toolcalls import decide as rules
from ledger.toolcalls import events as ev
from ledger.toolcalls.state import CANCELABLE_TOOLS, UNKNOWN_OUTCOME_BODY
from tests.chat.helpers import ORG, OWNER, RUNNER, WORKER, run
from tests.toolcalls.core import OK, T, TOPIC, Stream, facts
from tests.toolcalls.helpers import cancel, claim, respond

TOOLS = ["execute", "edit_files", "write_file", "read_file", "search", "advisor"]


class Clocked(Stream):
    """An execution stream whose commands run at ``self.now`` (the test's clock)."""

    def __init__(self, tool: str) -> None:
        super().__init__(facts(tool))
        self.now = T

    def _em(self, key=None):
        em = super()._em(key)
        em.timestamp = self.now
        return em

    def claim_at(self, timeout_ms):
        return self._apply(rules.claim(self.state, self._em(), self.facts, topic=TOPIC,
                                       tool_name=self.facts.tool_name, timeout_ms=timeout_ms))

    def respond_at(self, outcome="completed"):
        response = OK if outcome == "completed" else ev.ToolCallResponse(500, "application/json", UNKNOWN_OUTCOME_BODY)
        return self._apply(rules.record_response(self.state, self._em(), response, outcome))

    def cancel_at(self, resolved):
        return self._apply(rules.cancel(self.state, self._em(), self.facts, topic=TOPIC, resolved=resolved))


_steps = st.lists(st.one_of(
    st.tuples(st.just("wait"), st.integers(0, 5000)),
    st.tuples(st.just("claim"), st.one_of(st.none(), st.integers(1, 4000))),
    st.tuples(st.just("respond"), st.sampled_from(["completed", "unknown"])),
    st.tuples(st.just("cancel"), st.booleans())), max_size=12)


@settings(max_examples=300, deadline=None)
@given(tool=st.sampled_from(TOOLS), steps=_steps)
def test_the_timeout_counts_from_the_first_claim_and_the_wall_time_from_it_to_the_response(tool, steps):
    s = Clocked(tool)
    first_at = first_timeout = None
    for kind, arg in steps:
        if kind == "wait":
            s.now += timedelta(milliseconds=arg)
            continue
        try:
            if kind == "claim":
                events = s.claim_at(arg)
            elif kind == "respond":
                events = s.respond_at(arg)
            else:
                events = s.cancel_at(arg)
        except LedgerError as e:
            if kind == "cancel":  # the two new cancel refusals come first, and exactly when they apply
                assert (e.code == "tool_call_not_cancelable") == (tool not in CANCELABLE_TOOLS)
                if tool in CANCELABLE_TOOLS:
                    assert e.code == "tool_call_resolved" and arg
            continue
        if kind == "cancel":
            assert tool in CANCELABLE_TOOLS and not arg
        for e in events:
            if isinstance(e, ev.ToolCallClaimed):
                if e.claim_epoch == 1:
                    first_at, first_timeout = s.now, arg
                    assert (e.outcome, e.timeout_ms, e.remaining_ms) == ("run", arg, arg)
                    continue
                left = None if first_timeout is None else max(
                    0, first_timeout - int((s.now - first_at) / timedelta(milliseconds=1)))
                assert e.remaining_ms == left and e.timeout_ms is None  # a later timeout never counts
                before = s.state  # (evolved already: the response, if any, came before this claim)
                assert e.outcome == ("timed_out" if before.response is None and left == 0 else "saved")
            elif isinstance(e, ev.ToolCallResponseRecorded):
                assert e.wall_duration_ms == int((s.now - first_at) / timedelta(milliseconds=1))
                assert e.outcome == arg and (arg == "completed" or e.response.status == 500)
        if first_at is not None:
            deadline = None if first_timeout is None else first_at + timedelta(milliseconds=first_timeout)
            assert s.state.deadline_at == deadline and s.state.first_claimed_at == first_at


def test_an_unknown_outcome_must_be_a_server_error():
    s = Clocked("execute")
    s.claim_at(None)
    with pytest.raises(LedgerError) as err:
        s._apply(rules.record_response(s.state, s._em(), OK, "unknown"))
    assert err.value.code == "invalid_command"


# -- through the handler, on both backends -----------------------------------------------------------------

@pytest.fixture
def clock(monkeypatch):
    class Clock:
        now = T

        def advance(self, ms: int) -> None:
            self.now += timedelta(milliseconds=ms)

    c = Clock()
    monkeypatch.setattr("commands.uow.utcnow", lambda: c.now)
    return c


def _owned(app, *calls):
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="go")["chat_id"]
    run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": cid, "tool_name": name, "args": {}} for cid, name in calls]}])
    return chat_id


def test_a_takeover_sees_what_is_left_then_timed_out_and_the_response_its_wall_time(app, clock):
    chat_id = _owned(app, ("c1", "execute"))
    first = claim(app, chat_id, timeout_ms=20 * 60_000)
    assert (first["outcome"], first["remaining_ms"], first["timeout_ms"]) == ("run", 1_200_000, 1_200_000)
    clock.advance(15 * 60_000)  # the runner is replaced: the new one must not restart the 20 minutes
    again = claim(app, chat_id, timeout_ms=20 * 60_000)
    assert (again["outcome"], again["remaining_ms"], again["timeout_ms"]) == ("saved", 300_000, 1_200_000)
    clock.advance(5 * 60_000)
    late = claim(app, chat_id)
    assert (late["outcome"], late["remaining_ms"]) == ("timed_out", 0)
    clock.advance(1000)
    done = respond(app, chat_id, body='{"exit_code": 0}')
    assert done["wall_duration_ms"] == 20 * 60_000 + 1000 and done["response_outcome"] == "completed"


def test_a_crashed_handler_records_the_unknown_outcome(app, clock):
    chat_id = _owned(app, ("c1", "execute"))
    claim(app, chat_id)
    out = run(app, type="record_tool_call_response", chat_id=chat_id, assistant_message_id=2, tool_call_id="c1",
              outcome="unknown")
    assert out["response_outcome"] == "unknown" and out["response"]["status"] == 500
    assert json.loads(out["response"]["body"]) == {"error": "tool call handler crashed: the outcome is unknown"}
    assert claim(app, chat_id)["response"] == out["response"]  # a repeat gets the saved 500
    with pytest.raises(LedgerError) as err:  # completed needs its status and body
        run(app, type="record_tool_call_response", chat_id=chat_id, assistant_message_id=2, tool_call_id="c1")
    assert err.value.code == "invalid_command"


@pytest.mark.parametrize("tool", ["read_file", "search", "advisor"])
def test_only_the_acting_tools_can_be_canceled(app, tool):
    chat_id = _owned(app, ("c1", tool), ("c2", "edit_files"), ("c3", "write_file"), ("c4", "execute"))
    before = app.head()
    with pytest.raises(LedgerError) as err:
        cancel(app, chat_id, "c1")
    assert (err.value.code, err.value.message) == (
        "tool_call_not_cancelable", "only execute, edit_files and write_file calls can be canceled")
    assert app.head() == before
    assert [cancel(app, chat_id, c)["outcome"] for c in ("c2", "c3", "c4")] == ["not_run"] * 3


def test_a_call_resolved_in_the_chat_cannot_be_canceled(app):
    chat_id = _owned(app, ("c1", "execute"), ("c2", "execute"))
    claim(app, chat_id, "c1")
    respond(app, chat_id, "c1")
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "tool", "parts": [
        {"type": "tool-result", "tool_call_id": "c1", "tool_name": "execute", "result": {"exit_code": 0}}]}])
    before = app.head()
    with pytest.raises(LedgerError) as err:
        cancel(app, chat_id, "c1")
    assert err.value.code == "tool_call_resolved" and app.head() == before
    assert cancel(app, chat_id, "c2")["outcome"] == "not_run"  # its sibling has no result yet
