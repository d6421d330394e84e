"""Property: over every interleaving of several runners (claim, then run and record the response when told
to run; maybe a crash-retry claim) and a canceler (cancel, maybe twice), the execution record is truthful.

The store linearizes commands on one stream (optimistic concurrency), so an interleaving of commands is
a sequence of atomic decisions; hypothesis explores those sequences on the pure core.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from ledger.errors import LedgerError
from ledger.toolcalls import events as ev
from ledger.toolcalls.state import cancel_view, evolve
from tests.toolcalls.core import Stream, facts

RESPONSES = st.sampled_from([
    ev.ToolCallResponse(status=200, content_type="application/json", body='{"ok": true}'),
    ev.ToolCallResponse(status=500, content_type="text/plain", body="failed"),
])


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    runners = draw(st.integers(min_value=1, max_value=3))
    programs: list[list[str]] = []
    for _ in range(runners):
        programs.append(["claim", "run"] + (["claim"] if draw(st.booleans()) else []))
    programs.append(["cancel"] * draw(st.integers(min_value=0, max_value=2)))
    total = sum(len(p) for p in programs)
    order = draw(st.lists(st.integers(min_value=0, max_value=len(programs) - 1), min_size=total, max_size=total))
    return {"tool": draw(st.sampled_from(["execute", "write_file"])), "programs": programs, "order": order,
            "response": draw(RESPONSES)}


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_interleaving_is_truthful(sc: dict[str, Any]) -> None:
    s = Stream(facts(sc["tool"]))
    programs = [list(p) for p in sc["programs"]]
    told_to_run: set[int] = set()
    runs = responses = 0
    response_before_cancel = None  # set at the first recorded cancel
    cancel_reports: list[dict[str, Any]] = []

    steps = [i for i in sc["order"]] + [i for i, p in enumerate(programs) for _ in p]  # then drain
    for actor in steps:
        if not programs[actor]:
            continue
        step = programs[actor].pop(0)
        canceled_before = s.state is not None and s.state.canceled
        if step == "claim":
            try:
                claimed = s.claim()
            except LedgerError as e:
                assert e.code == "tool_call_canceled" and canceled_before  # refused only after a cancel
                programs[actor] = []
                continue
            assert not canceled_before
            if claimed[-1].outcome == "run":
                runs += 1
                told_to_run.add(actor)
        elif step == "run":
            if actor not in told_to_run:
                continue  # told "saved": the runner uses the saved response and never runs the tool
            s.respond(sc["response"])
            responses += 1
        else:
            recorded = s.cancel()
            if recorded:
                assert not canceled_before
                response_before_cancel = s.state.response is not None
                c = recorded[-1]
                assert c.received is (runs == 1)  # received iff a claim ran before the cancel
                assert (c.outcome == "not_run") is (runs == 0)
            else:
                assert canceled_before
            cancel_reports.append(cancel_view(s.state))

    assert runs <= 1, "a tool call ran twice"
    assert responses == runs
    assert sum(isinstance(e, ev.ToolCallResponseRecorded) for e in s.events) == responses
    if s.state.canceled:
        view = cancel_view(s.state)
        if runs == 0:
            assert view == {"received": False, "outcome": "not_run", "is_error": True,
                            "result": "tool call was canceled before it ran; no changes were made"}
        elif response_before_cancel:
            assert view["outcome"] == "completed" and view["is_error"] is (sc["response"].status >= 400)
        elif sc["tool"] == "execute":
            assert view["outcome"] == "canceled_while_running" and view["result"]["canceled"] is True
        else:  # another tool: its response (recorded after the cancel, as every runner finished) is the result
            assert view["outcome"] == "completed"
        # never both outcomes: every report agrees on whether the call was received
        assert len({r["received"] for r in cancel_reports}) == 1
    replayed = None
    for e in s.events:
        replayed = evolve(replayed, e)
    assert replayed == s.state
