"""Table tests of the generation decision (docs/chatd.md §7): one case per branch and per rule of its helpers,
including the cases of chatd's own tests (TestDecisionForcedCompaction, TestCompactionStatusFromHistory,
TestDecisionDetectsStopAfterToolFromCommittedHistory, TestDecisionDetectsCurrentHistoryCompletion)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.chat.values import TextPart, Usage
from ledger.chat.views import tool_call_execution_ids
from ledger.policy.generation import (
    STILL_OVER_LIMIT_MESSAGE,
    GenerationSettings,
    compaction_status,
    context_tokens,
    latest_prompt_usage,
    next_action,
    prompt_rows,
    usage_empty,
    should_compact,
    step_count,
)
from ledger.policy.tools import AdvisorSettings
from tests.policy.history import (
    CHAT, T0, assistant, call, history, result, summary_triplet, tool, used, user,
)

LIMIT100 = GenerationSettings(context_limit=100)
DYNAMIC = {"dynamic_tools": ["ask_user"]}


def decide(state, settings=LIMIT100, **kw):
    return next_action(state, settings, **kw)


def ids(calls):
    return [c.tool_call_id for c in calls]


# -- the decision, branch by branch ----------------------------------------------------------------------

CASES = [
    # (name, history, settings, action, finish_reason)
    ("local calls run", history(user(), assistant(call("r1", "read_file"))), LIMIT100,
     "execute_local_tools", None),
    ("dynamic calls wait for the client", history(user(), assistant(call("d1", "ask_user")), **DYNAMIC),
     LIMIT100, "enter_requires_action", None),
    ("provider-executed calls are not unresolved", history(user(), assistant(call("w1", "web", True))),
     LIMIT100, "finish_turn", "complete"),
    ("a result in a later tool row resolves a call",
     history(user(), assistant(call("r1", "read_file")), tool(result("r1", "read_file"))), LIMIT100,
     "generate_assistant", None),
    ("a result inside the assistant message does not (GEN's rule)",
     history(user(), assistant(call("r1", "read_file"), result("r1", "read_file"))), LIMIT100,
     "execute_local_tools", None),
    ("a result in a deleted tool row does not",
     history(user(), assistant(call("r1", "read_file")), tool(result("r1", "read_file")), deleted=(3,)),
     LIMIT100, "execute_local_tools", None),
    ("stop-after tool result ends the turn",
     history(user(), assistant(call("p1", "propose_plan")), tool(result("p1", "propose_plan"))),
     GenerationSettings(context_limit=100, stop_after_tools=["propose_plan"]), "finish_turn", "stop_after_tool"),
    ("an error result of a stop-after tool does not",
     history(user(), assistant(call("p1", "propose_plan")), tool(result("p1", "propose_plan", is_error=True))),
     GenerationSettings(context_limit=100, stop_after_tools=["propose_plan"]), "generate_assistant", None),
    ("a stop-after result of an earlier turn does not",
     history(user(), assistant(call("p1", "propose_plan")), tool(result("p1", "propose_plan")),
             assistant(), user("next")),
     GenerationSettings(context_limit=100, stop_after_tools=["propose_plan"]), "generate_assistant", None),
    ("a hook model-context user row does not start a turn",
     history(user(), assistant(call("p1", "propose_plan")), tool(result("p1", "propose_plan")),
             user("hook context", visibility="model")),
     GenerationSettings(context_limit=100, stop_after_tools=["propose_plan"]), "finish_turn", "stop_after_tool"),
    ("a last assistant message without calls completes the turn", history(user(), assistant()), LIMIT100,
     "finish_turn", "complete"),
    ("a last assistant message with only provider-executed calls completes it",
     history(user(), assistant(TextPart(text="done"), call("w1", "web", True), result("w1", "web"))),
     LIMIT100, "finish_turn", "complete"),
    ("the last active row decides completion: a deleted trailing user row is skipped",
     history(user(), assistant(), user("edited away"), deleted=(3,)), LIMIT100, "finish_turn", "complete"),
    ("a trailing user row means generate", history(user(), assistant(), user("more")), LIMIT100,
     "generate_assistant", None),
    ("max steps: assistant rows of the current turn",
     history(user(), assistant(call("r1", "read")), tool(result("r1", "read")),
             assistant(call("r2", "read")), tool(result("r2", "read"))),
     GenerationSettings(context_limit=100, max_steps=2), "finish_turn", "max_steps"),
    ("max steps not reached", history(user(), assistant(call("r1", "read")), tool(result("r1", "read"))),
     GenerationSettings(context_limit=100, max_steps=2), "generate_assistant", None),
    ("max steps 0 means no limit", history(user(), assistant(call("r1", "read")), tool(result("r1", "read"))),
     GenerationSettings(context_limit=100, max_steps=0), "generate_assistant", None),
    ("compaction needed without a boundary",
     history(user(), assistant(call("r1", "read"), usage=used(80)), tool(result("r1", "read"))), LIMIT100,
     "compact", None),
    ("compaction off: threshold 100",
     history(user(), assistant(call("r1", "read"), usage=used(99)), tool(result("r1", "read"))),
     GenerationSettings(context_limit=100, threshold_percent=100), "generate_assistant", None),
    ("compaction off: limit unknown",
     history(user(), assistant(call("r1", "read"), usage=used(99)), tool(result("r1", "read"))),
     GenerationSettings(context_limit=0), "generate_assistant", None),
    ("compaction disabled",
     history(user(), assistant(call("r1", "read"), usage=used(99)), tool(result("r1", "read"))),
     GenerationSettings(context_limit=100, compaction_enabled=False), "generate_assistant", None),
    ("under the threshold",
     history(user(), assistant(call("r1", "read"), usage=used(69)), tool(result("r1", "read"))), LIMIT100,
     "generate_assistant", None),
    ("after compaction with only the boundary: generate",
     history(summary_triplet()), LIMIT100, "generate_assistant", None),
    ("still over the limit after compaction is a terminal error",
     history(summary_triplet(), user("again"), assistant(call("r1", "read"), usage=used(80)),
             tool(result("r1", "read"))), LIMIT100, "error", None),
]


@pytest.mark.parametrize("name,state,settings,action,reason", CASES, ids=[c[0] for c in CASES])
def test_decision_table(name, state, settings, action, reason):
    d = decide(state, settings)
    assert (d.action, d.finish_reason) == (action, reason)
    assert d.forced is False
    if action != "error":
        assert d.error is None


def test_local_calls_are_the_batch_and_dynamic_calls_stay_pending():
    s = history(user(), assistant(call("r1", "read_file"), call("d1", "ask_user"), call("r2", "grep")), **DYNAMIC)
    d = decide(s)
    assert d.action == "execute_local_tools"
    assert ids(d.calls) == ["r1", "r2"] and [c.kind for c in d.calls] == ["local", "local"]
    assert ids(d.pending_dynamic) == ["d1"] and d.pending_dynamic[0].kind == "dynamic"
    assert d.policy_results == []


def test_enter_requires_action_lists_the_pending_dynamic_calls():
    s = history(user(), assistant(call("d1", "ask_user", q="which?")), **DYNAMIC)
    d = decide(s)
    assert d.action == "enter_requires_action" and d.calls == []
    assert ids(d.pending_dynamic) == ["d1"] and d.pending_dynamic[0].args == {"q": "which?"}


def test_an_exclusive_call_folds_dynamic_calls_into_the_local_batch():
    s = history(user(), assistant(call("a1", "advisor"), call("d1", "ask_user")), **DYNAMIC)
    d = decide(s, GenerationSettings(context_limit=100, exclusive_tools=["advisor"]))
    assert d.action == "execute_local_tools"
    assert ids(d.calls) == ["a1", "d1"] and d.pending_dynamic == []
    assert d.calls[1].kind == "dynamic"  # still declared dynamic, but it is answered by the policy
    assert [(r.tool_call_id, r.is_error) for r in d.policy_results] == [("a1", True), ("d1", True)]


def test_without_an_exclusive_call_dynamic_calls_are_not_folded():
    s = history(user(), assistant(call("r1", "read"), call("d1", "ask_user")), **DYNAMIC)
    d = decide(s, GenerationSettings(context_limit=100, exclusive_tools=["advisor"]))
    assert ids(d.calls) == ["r1"] and ids(d.pending_dynamic) == ["d1"] and d.policy_results == []


def test_an_exclusive_dynamic_call_alone_is_not_folded():
    """Folding only happens when a *local* call is exclusive; dynamic calls alone wait for the client."""
    s = history(user(), assistant(call("a1", "advisor"), call("d1", "ask_user")),
                dynamic_tools=["ask_user", "advisor"])
    d = decide(s, GenerationSettings(context_limit=100, exclusive_tools=["advisor"]))
    assert d.action == "enter_requires_action" and ids(d.pending_dynamic) == ["a1", "d1"]


def test_calls_carry_deterministic_execution_ids():
    s = history(user(), assistant(call("r1", "read"), call("dup", "a"), call("dup", "b"), call("", "c")))
    d = decide(s)
    expected = tool_call_execution_ids(CHAT, 2, ["r1", "dup", "dup", ""])
    assert [c.execution_id for c in d.calls] == [expected["r1"], None, None, None]


def test_unresolved_calls_come_from_the_latest_active_assistant_message():
    s = history(user(), assistant(call("old", "read")), user("again"), assistant(call("new", "grep")))
    assert ids(decide(s).calls) == ["new"]
    deleted_latest = history(user(), assistant(call("old", "read")), assistant(call("new", "grep")), deleted=(3,))
    assert ids(decide(deleted_latest).calls) == ["old"]


# -- manual compaction (TestDecisionForcedCompaction) -------------------------------------------------------

REQUESTED = {"compaction_requested_at": T0}


def test_manual_compaction_beats_history_complete():
    d = decide(history(user(), assistant(), **REQUESTED))
    assert (d.action, d.forced) == ("compact", True)


def test_manual_compaction_loses_to_unresolved_tool_calls():
    d = decide(history(user(), assistant(call("r1", "read_file")), **REQUESTED))
    assert (d.action, d.forced) == ("execute_local_tools", False)


def test_manual_compaction_loses_to_dynamic_calls():
    d = decide(history(user(), assistant(call("d1", "ask_user")), **REQUESTED, **DYNAMIC))
    assert d.action == "enter_requires_action"


def test_manual_compaction_beats_stop_after():
    s = history(user(), assistant(call("p1", "propose_plan")), tool(result("p1", "propose_plan")), **REQUESTED)
    d = decide(s, GenerationSettings(context_limit=100, stop_after_tools=["propose_plan"]))
    assert (d.action, d.forced) == ("compact", True)


def test_manual_compaction_is_skipped_when_nothing_is_compactable():
    rows = [summary_triplet(), user("follow-up question"), assistant(TextPart(text="follow-up answer"))]
    requested = decide(history(rows[0], **REQUESTED))
    unrequested = decide(history(rows[0]))
    assert requested.action == unrequested.action == "generate_assistant"
    assert requested.forced is False
    again = decide(history(*rows, **REQUESTED))
    assert (again.action, again.forced) == ("compact", True)


def test_manual_compaction_does_not_reach_across_a_clear_boundary():
    s = history(user(), assistant(), summary_triplet("chat_cleared", "chat_cleared_1"), user("new start"),
                **REQUESTED)
    assert decide(s).action == "generate_assistant"


# -- compaction status (TestCompactionStatusFromHistory) -----------------------------------------------------

def test_compaction_status_needed_without_boundary():
    s = history(user("start"), assistant(call("read-1", "read_file")))
    assert compaction_status(s, True, 70, 100) == "needed"


def test_compaction_status_after_compaction_without_post_boundary_history():
    assert compaction_status(history(summary_triplet()), True, 70, 100) == "after_compaction"


def test_compaction_status_needed_after_an_under_limit_post_compaction_assistant():
    s = history(summary_triplet(), assistant(TextPart(text="continued"), usage=used(20)), user("next"))
    assert compaction_status(s, True, 70, 100) == "needed"


@pytest.mark.parametrize("usage", [Usage(input_tokens=80), Usage(cache_read_tokens=80), Usage(input_tokens=70)],
                         ids=["input", "prompt-cache-tokens", "exact-threshold"])
def test_compaction_status_still_over_limit_from_the_first_post_compaction_assistant(usage):
    s = history(summary_triplet(), assistant(call("read-1", "read_file"), usage=usage))
    assert compaction_status(s, True, 70, 100) == "still_over_limit"


def test_compaction_status_still_over_limit_uses_the_configured_context_limit():
    s = history(summary_triplet(), assistant(call("read-1", "read_file"), usage=used(80)))
    assert compaction_status(s, True, 70, 100) == "still_over_limit"
    assert compaction_status(s, True, 70, 200) == "needed"


def test_compaction_status_without_requirement():
    assert compaction_status(history(user(), assistant()), False, 70, 100) == "not_needed"
    assert compaction_status(history(summary_triplet()), False, 70, 100) == "after_compaction"
    assert compaction_status(history(summary_triplet(), user("more")), False, 70, 100) == "not_needed"


def test_decision_compacts_again_after_a_completed_compaction_when_needed():
    """chatd's decision test: a boundary, a post-compaction answer under the limit, a new request, and
    compaction needed again -> compact (the first post-compaction answer decides "still over")."""
    s = history(user("old"), summary_triplet(), assistant(TextPart(text="continued after compaction")),
                user("next request"), assistant(call("r1", "read")), tool(result("r1", "read")))
    s.messages[0].usage = used(90)  # before the boundary: outside the prompt window, so not needed
    assert decide(s).action == "generate_assistant"
    s.messages[4].usage = used(20)
    s.messages[6].usage = used(90)  # inside the window: needed; the first answer (20%) was under
    assert decide(s).action == "compact"
    s.messages[4].usage = used(75)  # the first answer after compaction was still over: terminal
    assert decide(s).action == "error"


def test_still_over_limit_error_has_the_exact_text_and_kind():
    s = history(summary_triplet(), assistant(call("r1", "read"), usage=used(80)), tool(result("r1", "read")))
    d = decide(s)
    assert d.action == "error"
    assert d.error.message == STILL_OVER_LIMIT_MESSAGE == (
        "Conversation compaction could not reduce the history below the configured limit. "
        "Raise the compaction limit in settings, or start a new conversation.")
    assert d.error.kind == "config"


def test_the_trigger_uses_the_stricter_compaction_limit_and_the_still_over_check_the_model_limit():
    s = history(user(), assistant(call("r1", "read"), usage=used(80)), tool(result("r1", "read")))
    assert decide(s, GenerationSettings(context_limit=200)).action == "generate_assistant"
    d = decide(s, GenerationSettings(context_limit=200, compaction_context_limit=100))
    assert d.action == "compact" and d.compaction.context_limit == 100
    after = history(summary_triplet(), assistant(call("r1", "read"), usage=used(80)), tool(result("r1", "read")))
    # triggered by the 100-token limit; 80/200 is under 70% of the model's limit, so not still over
    assert decide(after, GenerationSettings(context_limit=200, compaction_context_limit=100)).action == "compact"


# -- usage arithmetic (shouldCompactPromptUsage) -----------------------------------------------------------

@pytest.mark.parametrize("usage,tokens", [
    (Usage(input_tokens=10, cache_read_tokens=20, cache_creation_tokens=30, total_tokens=999), 60),
    (Usage(output_tokens=50, total_tokens=70), 70),
    (Usage(cache_creation_tokens=5, total_tokens=70), 5),
    (Usage(output_tokens=50), 0),
    (None, 0),
])
def test_context_tokens(usage, tokens):
    assert context_tokens(usage) == tokens


@pytest.mark.parametrize("tokens,limit,threshold,expected", [
    (70, 100, 70, True), (69, 100, 70, False), (7, 10, 70, True), (699, 1000, 70, False),
    (100, 100, 100, False), (1000, 100, 101, False), (50, 0, 70, False), (50, -1, 70, False),
    (0, 100, 0, False), (1, 100, 0, True),
])
def test_should_compact(tokens, limit, threshold, expected):
    assert should_compact(Usage(input_tokens=tokens), limit, threshold) is expected


def test_latest_prompt_usage_is_the_latest_non_empty_usage_in_the_prompt_window():
    s = history(user(), assistant(usage=used(10)), user("a"), assistant(usage=used(20)), user("b"),
                assistant(usage=Usage()))
    assert latest_prompt_usage(s) == used(20)
    s.messages[3].deleted = True
    assert latest_prompt_usage(s) == used(10)
    user_only = history(user(), assistant(usage=used(10), visibility="user"))
    assert latest_prompt_usage(user_only) is None
    compacted = history(user(), assistant(usage=used(90)), summary_triplet(), user("replayed", visibility="model"))
    assert latest_prompt_usage(compacted) is None


_ROWS = st.tuples(st.sampled_from(["user", "assistant", "system", "tool"]), st.sampled_from(["both", "model", "user"]),
                  st.booleans(), st.booleans(), st.one_of(st.none(), st.integers(0, 50)))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_ROWS, max_size=14))
def test_latest_prompt_usage_read_from_the_end_equals_the_window_read_whole(rows):
    """The early-stopping reverse read says what the prompt window (``prompt_rows``), built whole, says."""
    made = []
    for role, visibility, compressed, deleted, tokens in rows:
        usage = None if tokens is None else (Usage() if tokens == 0 else used(tokens))
        fields = {"role": role, "parts": [TextPart(text="x")], "visibility": visibility, "compressed": compressed,
                  "usage": usage}
        made.append(fields)
    s = history(*made, deleted=tuple(i + 1 for i, r in enumerate(rows) if r[3]))
    whole = next((m.usage for m in reversed(prompt_rows(s)) if not usage_empty(m.usage)), None)
    assert latest_prompt_usage(s) == whole


def test_step_count_counts_active_assistant_rows_of_the_current_turn():
    s = history(user(), assistant(), user("hook", visibility="model"), assistant(), assistant(), deleted=(5,))
    assert step_count(s) == 2
    assert step_count(history(assistant(), assistant())) == 2  # no user row: the whole history


# -- what the result carries -----------------------------------------------------------------------------

def test_allowed_tools_is_the_hook_tool_policy():
    assert decide(history(user(), assistant())).allowed_tools is None
    assert decide(history(user(), assistant(), hook_allowed_tools=["read", "grep"])).allowed_tools == ["read", "grep"]
    assert decide(history(user(), assistant(), hook_allowed_tools=[])).allowed_tools == []


def test_compaction_info_is_reported():
    s = history(user(), assistant(usage=Usage(input_tokens=40, cache_read_tokens=10)), user("more"))
    info = decide(s).compaction
    assert (info.status, info.needed, info.context_tokens, info.usage_percent, info.threshold_percent,
            info.context_limit) == ("not_needed", False, 50, 50.0, 70, 100)


def test_exclusive_tools_follow_advisor_eligibility_unless_given():
    s = history(user(), assistant())
    assert decide(s).exclusive_tools == []
    eligible = GenerationSettings(advisor=AdvisorSettings(enabled=True, model_usable=True))
    assert decide(s, eligible).exclusive_tools == ["advisor"]
    assert decide(history(user(), assistant(), child=True), eligible).exclusive_tools == []
    assert decide(s, GenerationSettings(exclusive_tools=["x"])).exclusive_tools == ["x"]
