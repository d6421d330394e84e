"""``chat-ledger next-action CHAT [--json]`` through click's CliRunner on SQLite."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from commands.cli.main import main
from ledger.store import open_app
from tests.chat.helpers import MODEL, ORG, OWNER, run, setup_org

ALONE = "advisor must be called alone, without other tools in the same batch. Retry with only the advisor call."


@pytest.fixture
def ledger(sqlite_url: str) -> Any:
    app = open_app(sqlite_url)
    setup_org(app)
    yield sqlite_url, app
    app.close()


def next_action(url: str, chat_id: str, *args: str) -> Any:
    result = CliRunner().invoke(main, ["--db", url, "next-action", chat_id, *args])
    assert result.exit_code == 0, result.output
    return result.output


def as_json(url: str, chat_id: str, *args: str) -> dict[str, Any]:
    return json.loads(next_action(url, chat_id, "--json", *args))


def new_chat(app: Any, *parts: dict[str, Any], **assistant: Any) -> str:
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="hello",
                  dynamic_tools=["ask_user"])["chat_id"]
    if parts:
        run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": list(parts), **assistant}])
    return chat_id


def tc(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "tool-call", "tool_call_id": call_id, "tool_name": name, "args": {}}


def test_json_shape_and_defaults(ledger):
    url, app = ledger
    chat_id = new_chat(app)
    out = as_json(url, chat_id)
    assert (out["action"], out["finish_reason"], out["runnable"], out["execution_state"]) == (
        "generate_assistant", None, True, "R0")
    for key in ("chat_id", "status", "calls", "pending_dynamic", "policy_results", "error", "allowed_tools",
                "exclusive_tools", "step_count", "max_steps", "advisor", "compaction", "retry",
                "settings_source", "settings", "settings_note"):
        assert key in out
    assert out["settings_source"] == "catalog"  # setup_org: one usable model, 200k tokens, threshold 70%
    assert out["settings"]["threshold_percent"] == 70 and out["settings"]["context_limit"] == 200_000
    assert out["settings"]["context_limit_source"] == "catalog"
    assert out["settings"]["model"]["source"] == "chat_model"
    assert out["advisor"]["eligible"] is False and out["advisor"]["reason"] == "disabled"
    assert out["retry"] is None  # no generation attempt recorded yet


def test_calls_show_their_executions_and_the_retry_decision(ledger):
    url, app = ledger
    chat_id = new_chat(app, tc("r1", "read_file"), tc("d1", "ask_user"),
                       usage={"input_tokens": 900}, context_limit=1000)
    run(app, type="claim_tool_call", chat_id=chat_id, assistant_message_id=2, tool_call_id="r1", tool_name="read_file")
    for _ in range(3):
        run(app, type="record_generation_attempt", chat_id=chat_id)
    out = as_json(url, chat_id, "--retry-after", "30", "--context-limit", "1000")
    assert out["action"] == "execute_local_tools"
    assert [(c["tool_call_id"], c["execution"]["status"]) for c in out["calls"]] == [("r1", "running")]
    assert [(c["tool_call_id"], c["kind"], c["execution"]["status"]) for c in out["pending_dynamic"]] == [
        ("d1", "dynamic", "unclaimed")]
    assert out["retry"] == {"attempt": 3, "retry": True, "delay": 30.0}
    assert as_json(url, chat_id)["retry"]["delay"] == 4.0
    assert as_json(url, chat_id)["compaction"]["status"] == "not_needed"  # 900 of the catalog's 200k
    assert out["compaction"] == {"status": "needed", "needed": True, "context_tokens": 900, "usage_percent": 90.0,
                                 "threshold_percent": 70, "context_limit": 1000}
    assert out["settings"]["context_limit_source"] == "option"
    assert out["settings_source"] == "catalog+options"


def test_options_override_the_defaults(ledger):
    url, app = ledger
    chat_id = new_chat(app, tc("p1", "propose_plan"))
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "tool", "parts": [
        {"type": "tool-result", "tool_call_id": "p1", "tool_name": "propose_plan", "result": "ok"}]}])
    assert as_json(url, chat_id)["action"] == "generate_assistant"
    out = as_json(url, chat_id, "--stop-after", "propose_plan")
    assert (out["action"], out["finish_reason"], out["settings_source"]) == (
        "finish_turn", "stop_after_tool", "catalog+options")
    assert as_json(url, chat_id, "--max-steps", "1")["finish_reason"] == "max_steps"


def test_text_output(ledger):
    url, app = ledger
    chat_id = new_chat(app, tc("a1", "advisor"), tc("r1", "read_file"))
    text = next_action(url, chat_id)
    assert "next action: execute_local_tools" in text
    assert "call a1 advisor (local) [unclaimed, claim epoch 0]" in text
    assert "advisor: not eligible (disabled)" in text and "settings: catalog" in text
    assert ALONE not in text  # the advisor is not eligible, so it is not exclusive: the batch runs


def test_unknown_chat(ledger):
    url, _ = ledger
    result = CliRunner().invoke(main, ["--db", url, "next-action", "00000000-0000-4000-8000-000000000000"])
    assert result.exit_code == 1 and "chat_not_found" in result.output


def test_settings_come_from_the_catalog_and_the_deployment(ledger):
    url, app = ledger
    small = "3e8b6a1c-9d2f-4e7a-8b5c-0000000000a2"
    run(app, type="create_model_config", organization_id=ORG, model_config_id=small, provider="openai",
        model="gpt-5-mini", context_limit=1000, compression_threshold=50)
    run(app, type="set_admin_model_override", organization_id=ORG, context="compaction", model_config_id=small)
    chat_id = new_chat(app, tc("a1", "advisor"), tc("r1", "read_file"), usage={"input_tokens": 600})
    out = as_json(url, chat_id)
    # the chat's model (200k, 70%) with the compaction override's smaller limit as the trigger's
    assert (out["settings"]["context_limit"], out["settings"]["compaction_context_limit"]) == (200_000, 1000)
    assert out["compaction"]["context_limit"] == 1000 and out["compaction"]["needed"] is False  # 60% < 70%
    assert out["advisor"]["reason"] == "disabled" and out["policy_results"] == []
    run(app, type="set_deployment_settings", advisor_enabled=True, advisor_max_uses_per_turn=2)
    out = as_json(url, chat_id)
    assert out["advisor"]["eligible"] and out["advisor"]["max_uses_per_turn"] == 2
    assert out["settings"]["advisor_model"]["source"] == "chat_model"
    assert [p["result"] for p in out["policy_results"]][0] == ALONE  # the advisor is now exclusive
    # the chat's model disabled: generation falls back to the default (the small config is not the default)
    run(app, type="update_model_config", organization_id=ORG, model_config_id=MODEL, enabled=False)
    out = as_json(url, chat_id)
    assert out["settings"]["model"]["source"] == "fallback_default"
    assert out["settings"]["model"]["reason"] == "disabled"
    assert (out["settings"]["threshold_percent"], out["settings"]["context_limit"]) == (50, 1000)
    assert out["compaction"]["needed"] is True  # 600 of 1000 >= 50%


def test_defaults_without_a_usable_model(sqlite_url):
    app = open_app(sqlite_url)
    try:
        setup_org(app)
        chat_id = new_chat(app)
        run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "context_limit": 5000,
                                                                 "parts": [{"type": "text", "text": "hi"}]}])
        run(app, type="update_model_config", organization_id=ORG, model_config_id=MODEL, enabled=False)
        out = as_json(sqlite_url, chat_id)
        assert out["settings_source"] == "defaults" and "no_default_model" in out["settings_note"]
        assert out["settings"]["context_limit"] == 5000 and out["settings"]["context_limit_source"] == "latest_message"
    finally:
        app.close()


def test_at_version(ledger):
    url, app = ledger
    chat_id = new_chat(app, tc("r1", "read_file"))
    assert as_json(url, chat_id, "--at", "1")["action"] == "generate_assistant"
    assert as_json(url, chat_id, "--at", "2")["action"] == "execute_local_tools"
