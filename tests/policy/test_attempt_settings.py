"""``record_generation_attempt`` records what the generation ran with: passed by the runner (validated, kept
as given, ``source: runner``) or resolved by the ledger at that position (``source: ledger``) — the model
(config id, provider, model, source, reason), the context limit, the compaction threshold and trigger limit,
the advisor's eligibility and remaining uses, the offered tools after the hook policy and the exclusive-tool
rule, and the action."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from commands.cli.main import main
from ledger.errors import LedgerError
from ledger.store import open_app
from tests.chat.helpers import MODEL, ORG, OWNER, RUNNER, WORKER, run, setup_org

COMPACTION = "3e8b6a1c-9d2f-4e7a-8b5c-0000000000c0"


def chat(app: Any, **fields: Any) -> str:
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="go", **fields)["chat_id"]
    run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
    return chat_id


def advisor_call(call_id: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "tool-call", "tool_call_id": call_id, "tool_name": "advisor",
                                            "args": {"question": "which file?"}}]}


def advisor_result(call_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": call_id, "tool_name": "advisor",
                                       "result": body}]}


def test_the_ledger_resolves_and_records_what_the_attempt_runs_with(memory_app):
    app = memory_app
    run(app, type="create_model_config", organization_id=ORG, model_config_id=COMPACTION, provider="anthropic",
        model="claude-haiku-4-5", context_limit=120_000)
    run(app, type="set_admin_model_override", organization_id=ORG, context="compaction", model_config_id=COMPACTION)
    run(app, type="set_admin_model_override", organization_id=ORG, context="advisor", model_config_id=MODEL)
    run(app, type="set_deployment_settings", advisor_enabled=True, advisor_max_uses_per_turn=3)
    chat_id = chat(app, dynamic_tools=["ask_user", "pick"], hook_allowed_tools=["read_file", "ask_user", "advisor"])
    # one advice (a use) and one failed advisor call (not a use) in the current turn
    for call_id, body in (("a1", {"type": "advice", "advice": "x", "remaining_uses": 2}),
                          ("a2", {"type": "error", "error": "timeout", "remaining_uses": 2})):
        run(app, type="commit_step", chat_id=chat_id, messages=[advisor_call(call_id)])
        run(app, type="commit_step", chat_id=chat_id, messages=[advisor_result(call_id, body)])
    r = run(app, type="record_generation_attempt", chat_id=chat_id)
    assert r["settings"] == {
        "action": "generate_assistant",
        "model": {"model_config_id": MODEL, "provider": "openai", "model": "gpt-5", "source": "chat_model"},
        "context_limit": 200_000, "compaction_threshold": 70, "compaction_trigger_limit": 120_000,
        "advisor_eligible": True, "advisor_reason": None, "advisor_remaining_uses": 2,
        "tools": {"allowed_tools": ["read_file", "ask_user", "advisor"], "dynamic_tools": ["ask_user"],
                  "advisor": True, "exclusive_tools": ["advisor"]},
        "max_steps_per_turn": 1200, "max_generation_retries": 25, "max_tool_output_bytes": 1024 * 1024,
        "source": "ledger"}
    (attempt,) = [e for e in app.stream(uuid.UUID(chat_id)) if type(e).__name__ == "GenerationAttemptRecorded"]
    assert attempt.settings.source == "ledger" and str(attempt.runner_id) == RUNNER


def test_without_a_usable_model_the_defaults_are_recorded(memory_app):
    chat_id = chat(memory_app)
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=MODEL, enabled=False)
    s = run(memory_app, type="record_generation_attempt", chat_id=chat_id)["settings"]
    assert s["model"] is None and s["compaction_threshold"] == 70 and s["advisor_reason"] == "disabled"


def test_a_runners_settings_are_recorded_as_given(memory_app):
    chat_id = chat(memory_app)
    given = {"action": "compact", "context_limit": 64_000, "compaction_threshold": 85, "compaction_trigger_limit": 32_000,
             "advisor_eligible": False, "advisor_reason": "disabled", "advisor_remaining_uses": 0,
             "model": {"model_config_id": MODEL, "provider": "openai", "model": "gpt-5-custom", "source": "explicit"},
             "tools": {"allowed_tools": None, "dynamic_tools": [], "advisor": False, "exclusive_tools": []}}
    r = run(memory_app, type="record_generation_attempt", chat_id=chat_id, settings=given)
    unreported = {"max_steps_per_turn": None, "max_generation_retries": None, "max_tool_output_bytes": None}
    assert r["settings"] == {**given, **unreported, "source": "runner"}
    limits = {"max_steps_per_turn": 40, "max_generation_retries": 3, "max_tool_output_bytes": 1000}
    r = run(memory_app, type="record_generation_attempt", chat_id=chat_id, settings={**given, **limits})
    assert r["settings"] == {**given, **limits, "source": "runner"}


@pytest.mark.parametrize("change, words", [
    ({"compaction_threshold": 101}, "Expected `int` <= 100"),
    ({"context_limit": -1}, "Expected `int` >= 0"),
    ({"advisor_remaining_uses": -2}, "Expected `int` >= 0"),
    ({"source": "ledger"}, "unknown field `source`"),
    ({"model": {"model_config_id": MODEL, "provider": "", "model": "m", "source": "explicit"}}, "length >= 1"),
    ({"model": {"model_config_id": MODEL, "provider": "p", "model": "m", "source": "guess"}}, "Invalid enum value"),
    ({"tools": {"allowed_tools": None}}, "missing required field"),
])
def test_a_malformed_settings_shape_is_refused_and_records_nothing(memory_app, change, words):
    chat_id = chat(memory_app)
    base = {"context_limit": 1, "compaction_threshold": 70, "compaction_trigger_limit": 1, "advisor_eligible": False,
            "advisor_remaining_uses": 0, "tools": {"allowed_tools": None, "dynamic_tools": [], "advisor": False,
                                                   "exclusive_tools": []}}
    before = len(memory_app.stream(uuid.UUID(chat_id)))
    with pytest.raises(LedgerError) as e:
        run(memory_app, type="record_generation_attempt", chat_id=chat_id, settings={**base, **change})
    assert e.value.code == "invalid_command" and words in e.value.message, e.value.message
    assert len(memory_app.stream(uuid.UUID(chat_id))) == before


def test_next_action_gives_the_settings_a_runner_passes(sqlite_url):
    app = open_app(sqlite_url)
    try:
        setup_org(app)
        chat_id = chat(app)
    finally:
        app.close()
    out = CliRunner().invoke(main, ["--db", sqlite_url, "next-action", chat_id, "--json"])
    ran = json.loads(out.output)["attempt_settings"]
    app = open_app(sqlite_url)
    try:
        recorded = run(app, type="record_generation_attempt", chat_id=chat_id, settings=ran)["settings"]
        assert recorded == {**ran, "source": "runner"}
        again = run(app, type="record_generation_attempt", chat_id=chat_id)["settings"]  # the ledger's own answer
        assert again == {**ran, "source": "ledger"}
    finally:
        app.close()
