"""Time-aligned replay: a chat recorded under settings S1 (the catalog and the deployment), which then change
to S2. Every ``--at`` / ``--as-of`` answer of ``next-action``, ``resolve-model``, ``explain`` and ``show`` uses
S1 — the other streams folded to the log position of the chat's event at that version — and
``--with-current-settings`` shows what S2 decides instead, with the differences. On SQLite and PostgreSQL,
through the CLI.

S1: model M (1,000-token context, compaction at 70%), the advisor enabled and usable. The chat's context is
at 600 tokens (60%): the decision is ``generate_assistant`` with the advisor eligible. S2: the advisor
disabled, M's threshold lowered to 50% and its context to 800 tokens: today the same chat state would be
compacted (75% >= 50%) and the advisor is not eligible (disabled). Before time alignment, ``--at`` answered
with S2 — the issue's two reproductions.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from commands.cli.main import main
from ledger import positions
from ledger.store import open_app
from tests.chat.helpers import RUNNER, WORKER, run

ORG = "8a6f4d2e-1b3c-4d5e-8f70-0000000000a1"
OWNER = "5b1d7e9a-2c4f-4a6b-9d8e-0000000000a2"
M = "3e8b6a1c-9d2f-4e7a-8b5c-0000000000a3"
CALL = {"type": "tool-call", "tool_call_id": "call_1", "tool_name": "read_file", "args": {"path": "a.py"}}


def cli(url: str, *args: str) -> Any:
    out = CliRunner().invoke(main, ["--db", url, *args])
    assert out.exit_code == 0, out.output
    return out


def as_json(url: str, *args: str) -> dict[str, Any]:
    return json.loads(cli(url, *args, "--json").output)


@pytest.fixture
def recorded(db_url: str) -> dict[str, Any]:
    """The chat recorded under S1, then S1 changed to S2. Returns the ids, versions and positions."""
    app = open_app(db_url)
    try:
        run(app, type="add_organization_member", organization_id=ORG, user_id=OWNER)
        run(app, type="create_model_config", organization_id=ORG, model_config_id=M, provider="anthropic",
            model="claude-sonnet-4-5", context_limit=1000, compression_threshold=70, is_default=True)
        run(app, type="set_admin_model_override", organization_id=ORG, context="advisor", model_config_id=M)
        run(app, type="set_deployment_settings", advisor_enabled=True, advisor_max_uses_per_turn=2)
        created = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="fix the build")
        chat_id = created["chat_id"]
        run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
        run(app, type="record_generation_attempt", chat_id=chat_id)  # the ledger resolves S1 and records it
        step = run(app, type="commit_step", chat_id=chat_id, messages=[{
            "role": "assistant", "parts": [{"type": "text", "text": "reading"}, CALL],
            "usage": {"input_tokens": 600}, "context_limit": 1000}])
        ids = dict(chat_id=chat_id, assistant_message_id=step["message_ids"][0], tool_call_id="call_1")
        run(app, type="claim_tool_call", **ids, tool_name="read_file")
        run(app, type="record_tool_call_response", **ids, status=200, body='{"ok": true}')
        # the call still open in the chat, its execution claimed and done (claim epoch 1)
        unresolved_at = run(app, type="set_title", chat_id=chat_id, title="Build fix")["version"]
        v = run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "tool", "parts": [
            {"type": "tool-result", "tool_call_id": "call_1", "tool_name": "read_file", "result": {"ok": True}}]}])
        version = v["version"]  # the decision point: generate_assistant with the advisor, under S1
        attempt = run(app, type="record_generation_attempt", chat_id=chat_id)  # what the attempt ran with
        # S2
        run(app, type="set_deployment_settings", advisor_enabled=False)
        run(app, type="update_model_config", organization_id=ORG, model_config_id=M, compression_threshold=50,
            context_limit=800)
        run(app, type="claim_tool_call", **ids, tool_name="read_file")  # a late re-claim: epoch 2, saved
        cid = uuid.UUID(chat_id)
        events = app.stream(cid)
        return {"url": db_url, "chat_id": chat_id, "turn_id": created["turn_id"], "version": version,
                "unresolved_at": unresolved_at, "step_version": step["version"], "attempt_version": attempt["version"],
                "attempt_settings": attempt["settings"],
                "position": positions.notification_id(app.recorder, cid, version),
                "time": events[version - 1].timestamp.isoformat()}
    finally:
        app.close()


def test_next_action_at_a_past_version_decides_with_the_settings_of_then(recorded):
    url, chat, v = recorded["url"], recorded["chat_id"], str(recorded["version"])
    for how in (["--at", v], ["--as-of", recorded["time"]]):
        then = as_json(url, "next-action", chat, *how)
        assert then["version"] == recorded["version"]
        assert then["action"] == "generate_assistant"  # (S2 would compact)
        assert then["advisor"]["eligible"] is True and then["advisor"]["reason"] is None
        assert (then["settings"]["threshold_percent"], then["settings"]["context_limit"]) == (70, 1000)
        assert then["compaction"]["usage_percent"] == 60.0
        assert then["facts_as_of"] == {"chat_version": recorded["version"], "notification_id": recorded["position"]}
        assert then["calls"] == []
    text = cli(url, "next-action", chat, "--at", v).output
    assert "advisor: eligible" in text and "next action: generate_assistant" in text
    assert f"facts: as of version {v} (log position {recorded['position']})" in text

    # the tool-call execution as of each version: not yet claimed at the step that made the call, claimed
    # once and done by the time of the title change (today it has a second claim)
    for version, execution in ((recorded["step_version"], {"status": "unclaimed", "claim_epoch": 0}),
                               (recorded["unresolved_at"], {"status": "done", "claim_epoch": 1})):
        (call,) = as_json(url, "next-action", chat, "--at", str(version))["calls"]
        assert (call["tool_call_id"], call["execution"]) == ("call_1", execution)

    now = as_json(url, "next-action", chat)  # the chat as it is, with today's settings: S2
    assert (now["action"], now["advisor"]["reason"], now["settings"]["threshold_percent"]) == ("compact", "disabled", 50)
    assert now["facts_as_of"]["notification_id"] is None


def test_with_current_settings_shows_what_today_would_decide_and_the_differences(recorded):
    url, chat, v = recorded["url"], recorded["chat_id"], str(recorded["version"])
    r = as_json(url, "next-action", chat, "--at", v, "--with-current-settings")
    assert r["action"] == "generate_assistant" and r["current_settings"]["action"] == "compact"
    diffs = {d["field"]: (d["as_of"], d["current"]) for d in r["differences"]}
    assert diffs["action"] == ("generate_assistant", "compact")
    assert diffs["advisor.eligible"] == (True, False) and diffs["advisor.reason"] == (None, "disabled")
    assert diffs["settings.threshold_percent"] == (70, 50)
    assert diffs["settings.context_limit"] == (1000, 800)
    assert diffs["compaction.status"] == ("not_needed", "needed")
    assert diffs["exclusive_tools"] == (["advisor"], [])
    text = cli(url, "next-action", chat, "--as-of", recorded["time"], "--with-current-settings").output
    assert "with today's settings: compact" in text
    assert 'action: then "generate_assistant", today "compact"' in text
    # without a past version there is nothing to compare with
    out = CliRunner().invoke(main, ["--db", url, "next-action", chat, "--with-current-settings"])
    assert out.exit_code == 2 and "give --at or --as-of" in out.output


def test_resolve_model_at_a_past_version_uses_the_catalog_of_then(recorded):
    url, chat, v = recorded["url"], recorded["chat_id"], str(recorded["version"])
    for how in (["--at", v], ["--as-of", recorded["time"]]):
        then = as_json(url, "resolve-model", chat, *how)
        assert (then["model_config_id"], then["context_limit"], then["provider"]) == (M, 1000, "anthropic")
        assert then["facts_as_of"]["notification_id"] == recorded["position"]
    assert as_json(url, "resolve-model", chat)["context_limit"] == 800
    r = as_json(url, "resolve-model", chat, "--at", v, "--with-current-settings")
    assert [(d["field"], d["as_of"], d["current"]) for d in r["differences"]] == [("context_limit", 1000, 800)]
    text = cli(url, "resolve-model", chat, "--at", v, "--with-current-settings").output
    assert "context_limit: then 1000, today 800" in text


def test_show_at_a_past_version_folds_the_model_and_the_executions_to_then(recorded):
    url, chat = recorded["url"], recorded["chat_id"]
    for how in (["--at", str(recorded["unresolved_at"])], ["--as-of", _time_of(recorded, recorded["unresolved_at"])]):
        then = as_json(url, "show", chat, *how)
        assert then["model"]["context_limit"] == 1000
        (call,) = then["unresolved"]
        # the execution as of then: claimed once; today it has a second (saved) claim
        assert call["execution"] == {"status": "done", "claim_epoch": 1}
    assert as_json(url, "show", chat)["model"]["context_limit"] == 800
    # at the step that made the call, nothing had claimed it yet
    (call,) = as_json(url, "show", chat, "--at", str(recorded["step_version"]))["unresolved"]
    assert call["execution"] == {"status": "unclaimed", "claim_epoch": 0}


def test_explain_at_a_past_version_shows_each_steps_settings_of_then_and_the_fence(recorded):
    url, chat, turn = recorded["url"], recorded["chat_id"], recorded["turn_id"]
    at = str(recorded["attempt_version"])
    t = as_json(url, "explain", chat, "--turn", turn, "--at", at)
    first, second = t["step_details"]
    # the model step: what its attempt recorded (resolved by the ledger under S1)
    assert first["settings_from"] == "recorded" and first["settings"]["source"] == "ledger"
    assert (first["settings"]["compaction_threshold"], first["settings"]["context_limit"]) == (70, 1000)
    assert first["settings"]["model"]["model"] == "claude-sonnet-4-5" and first["settings"]["advisor_eligible"]
    assert (first["generation_attempt"], first["runner_id"], first["fence"]) == (1, RUNNER, None)
    # the tool-result step had no attempt: its settings resolved as of its own position — S1 as well
    assert second["settings_from"] == "resolved"
    assert (second["settings"]["compaction_threshold"], second["settings"]["advisor_eligible"]) == (70, True)
    assert t["attempts"][-1]["settings"] == recorded["attempt_settings"]

    c = as_json(url, "explain", chat, "--turn", turn, "--as-of", _time_of(recorded, recorded["attempt_version"]),
                "--with-current-settings")
    diffs = {d["field"]: (d["as_of"], d["current"]) for d in c["step_details"][1]["differences"]}
    assert diffs["compaction_threshold"] == (70, 50) and diffs["advisor_eligible"] == (True, False)
    text = cli(url, "explain", chat, "--turn", turn, "--at", at).output
    assert "(attempt 1, runner " + RUNNER + ", no fence): model anthropic/claude-sonnet-4-5" in text
    assert "compaction at 70% of 1000" in text

    ex = as_json(url, "explain", chat, "--tool-call", "call_1", "--at", str(recorded["unresolved_at"]),
                 "--with-current-settings")
    assert ex["execution"]["claims"] == 1 and ex["current_settings"]["execution"]["claims"] == 2
    assert any(d["field"] == "execution.claims" for d in ex["differences"])


def test_the_recorded_attempt_is_re_decided_equal_with_the_facts_of_its_position(recorded):
    out = CliRunner().invoke(main, ["--db", recorded["url"], "events", "verify", "--no-projections", "--decisions",
                                    "--json"])
    report = json.loads(out.stdout)
    assert out.exit_code == 0 and report["ok"], report["anomalies"]
    # the two attempts (one before the tool call, one at the decision point) and the creation's model
    assert report["decisions"]["checked"]["attempt_settings"] == 2
    assert report["decisions"]["checked"]["claim"] == 2 and report["decisions"]["disagreements"] == 0


def _time_of(recorded: dict[str, Any], version: int) -> str:
    app = open_app(recorded["url"])
    try:
        return app.stream(uuid.UUID(recorded["chat_id"]))[version - 1].timestamp.isoformat()
    finally:
        app.close()
