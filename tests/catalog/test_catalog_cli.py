"""CLI: ``models --json`` (docs/commands.md, "CLI" shape) and ``resolve-model --json`` on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from click.testing import CliRunner

from commands.cli.main import main
from tests.catalog.kit import ALICE, BOB, FOREIGN, M1, M2, ORG, ORG2, W

SETUP = [
    {"type": "add_organization_member", "organization_id": ORG, "user_id": ALICE},
    {"type": "add_organization_member", "organization_id": ORG, "user_id": BOB},
    {"type": "create_model_config", "organization_id": ORG, "model_config_id": M1, "provider": "anthropic",
     "model": "claude-sonnet-4-5", "display_name": "Sonnet", "context_limit": 200000,
     "reasoning_effort": {"default": "medium", "max": "high"}},
    {"type": "create_model_config", "organization_id": ORG, "model_config_id": M2, "provider": "openai",
     "model": "gpt-5", "context_limit": 100000, "compression_threshold": 90},
    {"type": "add_organization_member", "organization_id": ORG2, "user_id": ALICE},
    {"type": "create_model_config", "organization_id": ORG2, "model_config_id": FOREIGN, "provider": "openai",
     "model": "gpt-5", "context_limit": 100000},
    {"type": "set_admin_model_override", "organization_id": ORG, "context": "compaction", "model_config_id": M2},
    {"type": "set_admin_model_override", "organization_id": ORG, "context": "title_generation",
     "model_config_id": M2},
    {"type": "set_deployment_settings", "personal_model_overrides_enabled": True},
    {"type": "set_user_model_override", "organization_id": ORG, "user_id": ALICE, "context": "explore",
     "mode": "model", "model_config_id": M2, "reasoning_effort": "low"},
    {"type": "create_chat", "chat_id": "00000000-0000-4000-8000-0000000000c1", "organization_id": ORG,
     "owner_id": ALICE, "text": "hi"},
    {"type": "acquire", "chat_id": "00000000-0000-4000-8000-0000000000c1", **W},
    {"type": "send_message", "chat_id": "00000000-0000-4000-8000-0000000000c1", "text": "more", "model_config_id": M2},
    {"type": "update_model_config", "organization_id": ORG, "model_config_id": M2, "enabled": False},
    {"type": "finish_turn", "chat_id": "00000000-0000-4000-8000-0000000000c1"},
]
CHAT = "00000000-0000-4000-8000-0000000000c1"


def cli(db_url, *args, input=None):
    result = CliRunner().invoke(main, ["--db", db_url, *args], input=input, catch_exceptions=False)
    return result


def test_models_and_resolve_model_json(db_url):
    r = cli(db_url, "apply", "-", input="\n".join(json.dumps(c) for c in SETUP))
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in r.output.splitlines()]
    assert lines[-1]["result"]["model_resolution"] == {
        "model_config_id": M1, "source": "fallback_default", "reason": "disabled", "requested_model_config_id": M2}

    r = cli(db_url, "models", "--org", ORG, "--json")
    assert r.exit_code == 0, r.output
    view = json.loads(r.output)
    assert view["organization_id"] == ORG and view["default_model_config_id"] == M1
    assert [c["model_config_id"] for c in view["configs"]] == [M1, M2]
    assert view["configs"][0] == {
        "model_config_id": M1, "provider": "anthropic", "model": "claude-sonnet-4-5", "display_name": "Sonnet",
        "enabled": True, "usable": True, "is_default": True, "context_limit": 200000, "compression_threshold": 70,
        "reasoning_effort": {"default": "medium", "max": "high"}, "unusable_reason": None}
    assert (view["configs"][1]["enabled"], view["configs"][1]["usable"], view["configs"][1]["unusable_reason"]) == (
        False, False, "disabled")
    assert view["admin_overrides"] == {
        "title_generation": {"model_config_id": M2, "usable": False, "reasoning_effort": None},
        "compaction": {"model_config_id": M2, "usable": False, "reasoning_effort": None}}
    assert view["members"] == sorted([ALICE, BOB])
    assert "effective" not in view and "personal_overrides" not in view

    r = cli(db_url, "models", "--org", ORG, "--user", ALICE, "--json")
    view = json.loads(r.output)
    assert view["personal_overrides"] == {
        "explore": {"mode": "model", "model_config_id": M2, "reasoning_effort": "low", "usable": False}}
    assert view["effective"]["root"] == {"model_config_id": M1, "source": "org_default", "reason": None}
    assert view["effective"]["explore"] == {"model_config_id": M1, "source": "chat_model", "reason": None}
    assert set(view["effective"]) == {"root", "general", "explore", "title_generation", "compaction", "advisor"}
    # the title override (M2) is disabled: that context fails hard; compaction falls back to the chat's model
    assert view["effective"]["title_generation"] == {"model_config_id": None, "source": None, "reason": None,
                                                     "error": "model_override_unusable"}
    assert view["effective"]["compaction"]["model_config_id"] == M1
    r = cli(db_url, "resolve-model", CHAT, "--context", "title_generation", "--json")
    assert r.exit_code == 1
    assert json.loads(r.output)["error"] == {  # --json: the error as JSON too
        "code": "model_override_unusable",
        "message": f"the title_generation model override {M2} is not usable: the model config is disabled (disabled)"}

    r = cli(db_url, "resolve-model", CHAT, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {
        "chat_id": CHAT, "context": "root", "model_config_id": M1, "source": "chat_model", "reason": None,
        "requested_model_config_id": None, "context_limit": 200000, "reasoning_effort": "medium", "ignored": [],
        "provider": "anthropic", "model": "claude-sonnet-4-5",
        "facts_as_of": {"chat_version": 5, "notification_id": None}}

    cli(db_url, "apply", "-", input=json.dumps(
        {"type": "update_model_config", "organization_id": ORG, "model_config_id": M2, "enabled": True}))
    r = cli(db_url, "resolve-model", CHAT, "--context", "compaction", "--json")
    row = json.loads(r.output)
    assert (row["model_config_id"], row["source"], row["context_limit"]) == (M2, "admin_override", 100000)
    r = cli(db_url, "resolve-model", CHAT, "--context", "explore", "--user", BOB, "--json")
    assert json.loads(r.output)["source"] == "chat_model"
    r = cli(db_url, "resolve-model", CHAT, "--context", "explore", "--json")
    row = json.loads(r.output)
    assert (row["model_config_id"], row["source"], row["reasoning_effort"]) == (M2, "personal_override", None)

    # records nothing
    before = cli(db_url, "show", CHAT, "--json").output
    cli(db_url, "resolve-model", CHAT)
    assert cli(db_url, "show", CHAT, "--json").output == before

    # text forms
    r = cli(db_url, "models", "--org", ORG, "--user", ALICE)
    assert r.exit_code == 0 and "effective:" in r.output and M1 in r.output
    r = cli(db_url, "resolve-model", CHAT, "--context", "title_generation")
    assert r.exit_code == 0 and r.output.startswith("title_generation: ")


def test_resolve_model_without_a_usable_default(db_url):
    setup = SETUP[:3] + [SETUP[10]]
    cli(db_url, "apply", "-", input="\n".join(json.dumps(c) for c in setup))
    cli(db_url, "apply", "-", input=json.dumps(
        {"type": "update_model_config", "organization_id": ORG, "model_config_id": M1, "enabled": False}))
    r = cli(db_url, "resolve-model", CHAT, "--json")
    assert r.exit_code == 1
    assert json.loads(r.output)["error"] == {"code": "no_default_model",
                                             "message": "No default chat model config is configured."}
    r = cli(db_url, "models", "--org", ORG, "--user", ALICE, "--json")
    assert json.loads(r.output)["effective"]["root"]["error"] == "no_default_model"


def test_catalog_human_commands(db_url):
    org = ORG
    assert cli(db_url, "catalog", "add-member", "--org", org, "--user", ALICE).exit_code == 0
    r = cli(db_url, "catalog", "create-model", "--org", org, "--provider", "openai", "--model", "gpt-5",
            "--context-limit", "1000", "--model-config", M1, "--effort-default", "low", "--effort-max", "high")
    assert r.exit_code == 0 and "(first_config)" in r.output
    r = cli(db_url, "catalog", "create-model", "--org", org, "--provider", "openai", "--model", "gpt-5-mini",
            "--context-limit", "1000", "--model-config", M2, "--default", "--json")
    assert json.loads(r.output)["default_changes"][0]["reason"] == "set_default"
    assert cli(db_url, "catalog", "update-model", "--org", org, "--model-config", M2, "--disable").exit_code == 0
    assert cli(db_url, "catalog", "admin-override", "--org", org, "--context", "advisor",
               "--model-config", M1).exit_code == 0
    assert cli(db_url, "catalog", "admin-override", "--org", org, "--context", "advisor", "--clear").exit_code == 0
    assert cli(db_url, "catalog", "admin-override", "--org", org, "--context", "advisor").exit_code == 2
    r = cli(db_url, "catalog", "user-override", "--org", org, "--user", ALICE, "--context", "root", "--mode", "model",
            "--model-config", M1)
    assert r.exit_code == 1 and "personal_model_overrides_disabled" in r.output
    assert cli(db_url, "deployment", "set", "--personal-overrides").exit_code == 0
    assert cli(db_url, "catalog", "user-override", "--org", org, "--user", ALICE, "--context", "root", "--mode",
               "model", "--model-config", M1).exit_code == 0
    assert cli(db_url, "catalog", "set-provider", "--org", org, "--provider", "openai", "--no-credentials").exit_code == 0
    assert cli(db_url, "catalog", "delete-model", "--org", org, "--model-config", M2).exit_code == 0
    assert cli(db_url, "catalog", "remove-member", "--org", org, "--user", ALICE).exit_code == 0
    view = json.loads(cli(db_url, "models", "--org", org, "--json").output)
    assert view["members"] == [] and [c["model_config_id"] for c in view["configs"]] == [M1]
    assert view["providers"] == {"openai": {"enabled": True, "credentials_available": False}}
