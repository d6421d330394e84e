"""The exclusive-tool batch rule (docs/chatd.md §5.2, chatloop TestExclusiveToolPolicy_*) with its exact texts,
and the advisor: one eligibility answer, per-turn budget, result variants."""

from __future__ import annotations

import itertools
import uuid

import msgspec
import pytest

from commands.handler import command_from_dict, execute
from ledger.chat.values import Usage
from ledger.chat.views import message_rows
from ledger.errors import LedgerError
from ledger.policy.generation import GenerationSettings, PlannedCall, next_action
from ledger.policy.tools import (
    AdvisorSettings,
    advisor_eligibility,
    advisor_question,
    advisor_result,
    advisor_result_bodies,
    advisor_status,
    advisor_tool_result,
    advisor_uses_this_turn,
    apply_exclusive_policy,
    blocking_exclusive_tool,
    exclusive_call_error,
    policy_result_messages,
    skipped_call_error,
)
from tests.chat.helpers import ORG, OWNER, chat_state
from tests.policy.history import assistant, call, history, result, tool, user

ALONE = "advisor must be called alone, without other tools in the same batch. Retry with only the advisor call."
SKIPPED = ("this tool was skipped because advisor must run alone in its batch. "
           "Retry your tool calls without advisor, or call advisor separately first.")


def calls(*names):
    return [PlannedCall(tool_call_id=f"{n}-{i}", tool_name=n, kind="local") for i, n in enumerate(names, 1)]


def outcome(batch, exclusive=("advisor",)):
    return [(r.tool_call_id, r.result, r.is_error) for r in apply_exclusive_policy(batch, exclusive)]


# -- exclusive-tool rule ----------------------------------------------------------------------------------

def test_the_texts_are_the_reference_texts():
    assert exclusive_call_error("advisor") == ALONE
    assert skipped_call_error("advisor") == SKIPPED


def test_mixed_batch_rejects_every_call_in_call_order():
    assert outcome(calls("advisor", "read_file")) == [("advisor-1", ALONE, True), ("read_file-2", SKIPPED, True)]


def test_the_exclusive_call_need_not_come_first():
    assert outcome(calls("read_file", "grep", "advisor")) == [
        ("read_file-1", SKIPPED, True), ("grep-2", SKIPPED, True), ("advisor-3", ALONE, True)]


def test_two_calls_of_the_exclusive_tool_both_get_the_first_message():
    assert outcome(calls("advisor", "advisor")) == [("advisor-1", ALONE, True), ("advisor-2", ALONE, True)]


def test_two_exclusive_tools_each_name_themselves_and_siblings_name_the_first():
    got = outcome(calls("read", "b", "a"), exclusive=("a", "b"))
    assert got == [("read-1", skipped_call_error("b"), True), ("b-2", exclusive_call_error("b"), True),
                   ("a-3", exclusive_call_error("a"), True)]


@pytest.mark.parametrize("batch,exclusive", [
    (calls("advisor"), ("advisor",)),           # a batch of one never violates
    (calls(), ("advisor",)),
    (calls("read_file", "grep"), ("advisor",)),  # no exclusive call
    (calls("advisor", "read_file"), ()),         # no exclusive tools (advisor not eligible)
])
def test_batches_that_run(batch, exclusive):
    assert apply_exclusive_policy(batch, exclusive) == []
    assert blocking_exclusive_tool(batch, exclusive) is None


def test_policy_results_commit_as_tool_rows_and_resolve_the_batch(memory_app):
    """The runner commits the synthesized results in one step; nothing is left to run afterwards."""
    def run(**c):
        return execute(memory_app, command_from_dict(c))

    chat_id = run(type="create_chat", organization_id=ORG, owner_id=OWNER, text="plan it")["chat_id"]
    run(type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "a1", "tool_name": "advisor", "args": {"question": "how?"}},
        {"type": "tool-call", "tool_call_id": "r1", "tool_name": "read_file", "args": {}}]}])
    eligible = GenerationSettings(advisor=AdvisorSettings(enabled=True, model_usable=True))
    d = next_action(chat_state(memory_app, chat_id), eligible)
    assert d.action == "execute_local_tools" and [r.result for r in d.policy_results] == [ALONE, SKIPPED]
    messages = msgspec.to_builtins(policy_result_messages(d.policy_results))
    run(type="commit_step", chat_id=chat_id, messages=messages)
    rows = message_rows(memory_app.stream(uuid.UUID(chat_id)))
    assert [(r["role"], r["parts"][0]["result"], r["parts"][0]["is_error"]) for r in rows[-2:]] == [
        ("tool", ALONE, True), ("tool", SKIPPED, True)]
    assert next_action(chat_state(memory_app, chat_id), eligible).action == "generate_assistant"


def test_the_decision_rejects_a_mixed_batch_only_when_the_advisor_is_eligible():
    s = history(user(), assistant(call("a1", "advisor"), call("r1", "read_file")))
    on = next_action(s, GenerationSettings(advisor=AdvisorSettings(enabled=True, model_usable=True)))
    assert [(r.tool_call_id, r.result) for r in on.policy_results] == [("a1", ALONE), ("r1", SKIPPED)]
    off = next_action(s, GenerationSettings(advisor=AdvisorSettings(enabled=False, model_usable=True)))
    assert off.policy_results == [] and off.action == "execute_local_tools"


# -- advisor eligibility: one answer ------------------------------------------------------------------------

@pytest.mark.parametrize("enabled,root,usable", list(itertools.product([False, True], repeat=3)))
def test_one_eligibility_answer_drives_tool_and_guidance(enabled, root, usable):
    s = history(user(), assistant(), child=not root)
    status = advisor_status(s, AdvisorSettings(enabled=enabled, model_usable=usable))
    assert status.eligible is (enabled and root and usable)
    assert status.tool_offered is status.eligible
    assert status.guidance_included is status.eligible


@pytest.mark.parametrize("enabled,root,usable,reason", [
    (False, True, True, "disabled"), (False, False, False, "disabled"), (True, False, True, "child_chat"),
    (True, False, False, "child_chat"), (True, True, False, "no_usable_model"), (True, True, True, None),
])
def test_eligibility_reason_names_the_first_failing_condition(enabled, root, usable, reason):
    assert advisor_eligibility(AdvisorSettings(enabled=enabled, model_usable=usable), root)[1] == reason


# -- advisor budget ----------------------------------------------------------------------------------------

ADVICE = {"type": "advice", "advice": "do x", "remaining_uses": 1}
LIMIT = {"type": "limit_reached", "remaining_uses": 0}
ERROR = {"type": "error", "error": "boom", "remaining_uses": 2}


def advisor_turn(*bodies, earlier=0):
    """A chat whose earlier turn used the advisor ``earlier`` times and whose current turn has one
    advisor call per body."""
    rows = [user("first")]
    for i in range(earlier):
        rows += [assistant(call(f"e{i}", "advisor")), tool(result(f"e{i}", "advisor", ADVICE))]
    rows += [assistant(), user("second")]
    for i, body in enumerate(bodies):
        rows += [assistant(call(f"c{i}", "advisor")), tool(result(f"c{i}", "advisor", body))]
    bodies_by_id = {f"c{i}": b for i, b in enumerate(bodies)} | {f"e{i}": ADVICE for i in range(earlier)}
    return history(*rows), bodies_by_id


def test_uses_count_advice_results_of_the_current_turn_only():
    s, bodies = advisor_turn(ADVICE, ERROR, ADVICE, LIMIT, earlier=2)
    assert advisor_uses_this_turn(s, bodies) == 2
    status = advisor_status(s, AdvisorSettings(enabled=True, model_usable=True, max_uses_per_turn=3), bodies)
    assert (status.uses_this_turn, status.remaining_uses, status.limit_reached) == (2, 1, False)


def test_without_result_bodies_every_non_error_advisor_result_counts():
    s, _ = advisor_turn(ADVICE, ERROR, LIMIT)
    assert advisor_uses_this_turn(s) == 3  # conservative: can only overcount


def test_error_flagged_results_are_never_uses():
    s = history(user(), assistant(call("a1", "advisor")), tool(result("a1", "advisor", ALONE, is_error=True)))
    assert advisor_uses_this_turn(s) == 0
    assert advisor_uses_this_turn(s, {"a1": ALONE}) == 0


def test_the_cap_is_reached():
    s, bodies = advisor_turn(ADVICE, ADVICE)
    status = advisor_status(s, AdvisorSettings(enabled=True, model_usable=True, max_uses_per_turn=2), bodies)
    assert (status.remaining_uses, status.limit_reached) == (0, True)
    over = advisor_status(s, AdvisorSettings(enabled=True, model_usable=True, max_uses_per_turn=1), bodies)
    assert over.remaining_uses == 0  # never negative


def test_advisor_result_bodies_come_from_message_rows():
    rows = [{"parts": [{"type": "tool-result", "tool_call_id": "a1", "tool_name": "advisor", "result": ADVICE},
                       {"type": "tool-result", "tool_call_id": "r1", "tool_name": "read", "result": "x"}]},
            {"parts": [{"type": "text", "text": "hi"}]}]
    assert advisor_result_bodies(rows) == {"a1": ADVICE}


@pytest.mark.parametrize("remaining,kw,expected", [
    (2, {"advice": "do x", "advisor_model": "m"},
     {"type": "advice", "advice": "do x", "advisor_model": "m", "remaining_uses": 1}),
    (1, {"advice": "do x"}, {"type": "advice", "advice": "do x", "remaining_uses": 0}),
    (0, {"advice": "do x"}, {"type": "limit_reached", "remaining_uses": 0}),
    (-1, {"error": "boom"}, {"type": "limit_reached", "remaining_uses": 0}),
    (2, {"error": "boom"}, {"type": "error", "error": "boom", "remaining_uses": 2}),
    (2, {"advice": "  "}, {"type": "error", "error": "advisor produced no text output", "remaining_uses": 2}),
])
def test_advisor_result_variants(remaining, kw, expected):
    assert advisor_result(remaining, **kw) == expected


# -- the advisor's question and usage (requirements 001: "validate Question is non-empty and bounded";
#    the result carries usage) --------------------------------------------------------------------------

LONGEST = "q" * 2000


@pytest.mark.parametrize("args,expected", [
    ({"question": "Which migration order is safer?"}, (False, "advice")),
    ({"question": "  padded  "}, (False, "advice")),
    ({"question": LONGEST}, (False, "advice")),
    ({"question": " " + LONGEST + "\n"}, (False, "advice")),  # bounded after trimming
    ({"question": ""}, (True, "question is required")),
    ({"question": " \n\t "}, (True, "question is required")),
    ({}, (True, "question is required")),
    ({"question": None}, (True, "question is required")),
    ({"question": 42}, (True, "question is required")),
    ({"question": LONGEST + "q"}, (True, "question must be at most 2000 characters, got 2001")),
])
def test_advisor_question_is_validated_before_any_nested_call(args, expected):
    out = advisor_tool_result(args, 2, advice="do x", usage=Usage(input_tokens=10, output_tokens=3, total_tokens=13))
    is_error, what = expected
    assert out.is_error is is_error
    if is_error:
        assert out.result == what  # the error result's text; no nested call, no use spent
        with pytest.raises(LedgerError) as err:
            advisor_question(args.get("question"))
        assert (err.value.code, err.value.message) == ("advisor_question_invalid", what)
    else:
        assert out.result == {"type": "advice", "advice": "do x", "remaining_uses": 1,
                              "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}}
        assert advisor_question(args["question"]) == args["question"].strip()


def test_usage_rides_on_advice_and_error_bodies_never_on_limit_reached():
    usage = Usage(input_tokens=7, cache_read_tokens=2, output_tokens=1, total_tokens=10)
    as_json = {"input_tokens": 7, "output_tokens": 1, "cache_read_tokens": 2, "total_tokens": 10}
    assert advisor_result(1, error="timeout", usage=usage) == {
        "type": "error", "error": "timeout", "remaining_uses": 1, "usage": as_json}
    assert advisor_result(0, advice="x", usage=usage) == {"type": "limit_reached", "remaining_uses": 0}
    assert "usage" not in advisor_result(1, advice="x")


def test_advisor_results_recorded_through_the_handler_count_only_valid_advice(app):
    """On SQLite and PostgreSQL: a turn with three advisor calls — a valid question (advice with usage),
    an empty question (an error result), a question too long (an error result) — committed as a runner
    would; read back, only the first is a use and it carries its usage."""
    chat_id = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                              "text": "plan the migration"}))["chat_id"]
    questions = {"a1": "Which order is safer?", "a2": "   ", "a3": LONGEST + "!"}
    settings = AdvisorSettings(enabled=True, model_usable=True, max_uses_per_turn=2)
    usage = Usage(input_tokens=120, output_tokens=30, total_tokens=150)
    for cid, question in questions.items():
        execute(app, command_from_dict({"type": "commit_step", "chat_id": chat_id, "messages": [
            {"role": "assistant", "parts": [{"type": "tool-call", "tool_call_id": cid, "tool_name": "advisor",
                                             "args": {"question": question}}]}]}))
        remaining = advisor_status(chat_state(app, chat_id), settings,
                                   advisor_result_bodies(message_rows(app.stream(uuid.UUID(chat_id))))).remaining_uses
        out = advisor_tool_result({"question": question}, remaining, advice="Migrate the schema first.",
                                  advisor_model="openai/gpt-5", usage=usage)
        execute(app, command_from_dict({"type": "commit_step", "chat_id": chat_id, "messages": [
            {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": cid, "tool_name": "advisor",
                                        "result": out.result, "is_error": out.is_error}]}]}))
    rows = message_rows(app.stream(uuid.UUID(chat_id)))
    recorded = {p["tool_call_id"]: p for r in rows for p in r["parts"] if p["type"] == "tool-result"}
    assert recorded["a1"]["result"] == {"type": "advice", "advice": "Migrate the schema first.",
                                        "advisor_model": "openai/gpt-5", "remaining_uses": 1,
                                        "usage": {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}}
    assert (recorded["a2"]["result"], recorded["a2"]["is_error"]) == ("question is required", True)
    assert (recorded["a3"]["result"], recorded["a3"]["is_error"]) == (
        "question must be at most 2000 characters, got 2001", True)
    status = advisor_status(chat_state(app, chat_id), settings, advisor_result_bodies(rows))
    assert (status.uses_this_turn, status.remaining_uses) == (1, 1)
