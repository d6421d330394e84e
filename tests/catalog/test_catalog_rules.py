"""Catalog and deployment commands: every rule, result and error message (docs/commands.md, "Chat commands", docs/chatd.md §6.1, §6.4)."""

from __future__ import annotations

import uuid

import pytest

from ledger.catalog import events as cev
from ledger.catalog.values import DEFAULT_LIMITS
from tests.catalog.kit import (
    ALICE, BOB, FOREIGN, M1, M2, M3, ORG, ORG2, catalog, chat, config, default_of, org_with, refused, run,
)

INVALID = ("model_config_invalid", "Invalid model_config_id: model config not found or disabled.")
PROVIDER_OFF = ("model_config_provider_disabled", "Invalid model_config_id: provider is not enabled for this model.")
NO_CREDS = ("model_config_credentials_unavailable",
            "Invalid model_config_id: provider credentials unavailable for this model.")
FOREIGN_ORG = ("model_config_foreign_org", "Model config does not belong to the specified organization.")
NOT_MEMBER = ("not_organization_member", "You are not a member of the specified organization.")


def events(app, org=ORG):
    return app.stream(uuid.UUID(org))


def default_changes(app, org=ORG):
    return [(str(e.model_config_id) if e.model_config_id else None,
             str(e.previous_model_config_id) if e.previous_model_config_id else None, e.reason)
            for e in events(app, org) if isinstance(e, cev.DefaultModelConfigChanged)]


# -- members ---------------------------------------------------------------------------------------------

def test_members(memory_app):
    r = run(memory_app, type="add_organization_member", organization_id=ORG, user_id=ALICE)
    assert (r["organization_id"], r["version"], r["recorded"], r["user_id"]) == (ORG, 2, 2, ALICE)
    assert isinstance(events(memory_app)[0], cev.CatalogStarted)
    refused(memory_app, "already_organization_member", "user is already a member of the organization",
            type="add_organization_member", organization_id=ORG, user_id=ALICE)
    refused(memory_app, "organization_member_not_found", "user is not a member of the organization",
            type="remove_organization_member", organization_id=ORG, user_id=BOB)
    refused(memory_app, "organization_member_not_found", type="remove_organization_member",
            organization_id=ORG2, user_id=BOB)
    run(memory_app, type="remove_organization_member", organization_id=ORG, user_id=ALICE)
    assert catalog(memory_app).members == set()


def test_an_organization_id_used_by_another_stream_still_gets_its_catalog(memory_app):
    """The catalog of an organization whose id a chat took lives at a derived id (``ledger.streams``)."""
    org_with(memory_app)
    chat_id = chat(memory_app)["chat_id"]
    r = run(memory_app, type="add_organization_member", organization_id=chat_id, user_id=ALICE)
    assert (r["organization_id"], r["recorded"]) == (chat_id, 2)
    assert memory_app.load(uuid.UUID(chat_id)).state.chat_id == uuid.UUID(chat_id)  # the chat is untouched


# -- create ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    ({"context_limit": 0}, "context_limit must be greater than 0."),
    ({"context_limit": -5}, "context_limit must be greater than 0."),
    ({"compression_threshold": 101}, "compression_threshold must be between 0 and 100."),
    ({"compression_threshold": -1}, "compression_threshold must be between 0 and 100."),
    ({"provider": " "}, "provider is required."),
    ({"model": ""}, "model is required."),
    ({"reasoning_effort": {"default": "high", "max": "low"}},
     "reasoning_effort.default must not be greater than reasoning_effort.max."),
    ({"reasoning_effort": {"default": "high"}}, "invalid command: Object missing required field `max` - at `$.reasoning_effort`"),
    ({"reasoning_effort": {"default": "loud", "max": "max"}}, None),
])
def test_create_validation(memory_app, fields, message):
    command = {"type": "create_model_config", "organization_id": ORG, "provider": "anthropic", "model": "claude",
               "context_limit": 1000, **fields}
    refused(memory_app, "invalid_command", message, **command)


def test_create_defaults_and_first_config_becomes_default(memory_app):
    r = config(memory_app, model_config_id=M1)
    assert r["model_config_id"] == M1 and r["default_model_config_id"] == M1
    assert r["default_changes"] == [{"model_config_id": M1, "previous_model_config_id": None, "reason": "first_config"}]
    c = catalog(memory_app).configs[uuid.UUID(M1)]
    assert (c.display_name, c.compression_threshold, c.enabled, c.reasoning_effort) == ("claude", 70, True, None)
    r = config(memory_app, model_config_id=M2, reasoning_effort={"default": "low", "max": "low"})
    assert r["default_model_config_id"] == M1 and r["default_changes"] == []
    r = config(memory_app, model_config_id=M3, is_default=True)
    assert r["default_changes"] == [{"model_config_id": M3, "previous_model_config_id": M1, "reason": "set_default"}]
    assert default_of(memory_app) == M3


def test_model_config_ids_are_unique_across_organizations_and_never_reused(memory_app):
    config(memory_app, model_config_id=M1)
    refused(memory_app, "model_config_already_exists", f"model config {M1} already exists",
            type="create_model_config", organization_id=ORG, model_config_id=M1, provider="p", model="m",
            context_limit=1)
    refused(memory_app, "model_config_already_exists", type="create_model_config", organization_id=ORG2,
            model_config_id=M1, provider="p", model="m", context_limit=1)
    run(memory_app, type="delete_model_config", organization_id=ORG, model_config_id=M1)
    refused(memory_app, "model_config_already_exists", type="create_model_config", organization_id=ORG,
            model_config_id=M1, provider="p", model="m", context_limit=1)


def test_create_as_default_requires_a_usable_config(memory_app):
    config(memory_app, model_config_id=M1)
    run(memory_app, type="set_provider", organization_id=ORG, provider="openai", enabled=False)
    refused(memory_app, *PROVIDER_OFF, type="create_model_config", organization_id=ORG, model_config_id=M2,
            provider="openai", model="gpt", context_limit=1, is_default=True)
    refused(memory_app, *INVALID, type="create_model_config", organization_id=ORG, model_config_id=M2,
            provider="anthropic", model="c", context_limit=1, is_default=True, enabled=False)


def test_create_with_an_idempotency_key_derives_the_id_and_repeats(memory_app):
    first = config(memory_app, idempotency_key="k1")
    again = config(memory_app, idempotency_key="k1")
    assert first == again and len(catalog(memory_app).configs) == 1


# -- update ---------------------------------------------------------------------------------------------

def test_update_fields_and_no_op(memory_app):
    org_with(memory_app)
    r = run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, display_name="GPT",
            compression_threshold=100, reasoning_effort={"default": "none", "max": "max"})
    assert r["recorded"] == 1
    e = events(memory_app)[-1]
    assert isinstance(e, cev.ModelConfigUpdated)
    assert e.changed == ["display_name", "compression_threshold", "reasoning_effort"]
    assert run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2,
               display_name="GPT")["recorded"] == 0
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, reasoning_effort=None)
    assert catalog(memory_app).configs[uuid.UUID(M2)].reasoning_effort is None
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, display_name=None)
    assert catalog(memory_app).configs[uuid.UUID(M2)].display_name == "model-1"
    refused(memory_app, "invalid_command", "context_limit must be greater than 0.", type="update_model_config",
            organization_id=ORG, model_config_id=M2, context_limit=0)
    refused(memory_app, "model_config_not_found", "model config not found", type="update_model_config",
            organization_id=ORG, model_config_id=M3, enabled=False)
    refused(memory_app, "model_config_not_found", type="update_model_config", organization_id=ORG2,
            model_config_id=M1, enabled=False)


def test_disabling_the_default_moves_it_and_enabling_another_brings_one_back(memory_app):
    org_with(memory_app, configs=(M1, M2, M3), providers=("anthropic",))
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M1, enabled=False)
    assert default_of(memory_app) == M2
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M3, enabled=False)
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, enabled=False)
    assert default_of(memory_app) == M2  # nothing usable: the default stays where it is
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M3, enabled=True)
    assert default_of(memory_app) == M3
    assert default_changes(memory_app)[1:] == [(M2, M1, "default_disabled"), (M3, M2, "usable_config_available")]


def test_demoting_the_default(memory_app):
    org_with(memory_app, configs=(M1, M2))
    r = run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M1, is_default=False)
    assert r["default_changes"] == [{"model_config_id": M2, "previous_model_config_id": M1, "reason": "default_demoted"}]
    assert run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M1,
               is_default=False)["recorded"] == 0  # not the default: nothing to do
    run(memory_app, type="delete_model_config", organization_id=ORG, model_config_id=M1)
    r = run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, is_default=False)
    assert r["recorded"] == 0 and default_of(memory_app) == M2  # the only config stays the default


def test_update_is_default_true_requires_usable(memory_app):
    org_with(memory_app)
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, enabled=False)
    refused(memory_app, *INVALID, type="update_model_config", organization_id=ORG, model_config_id=M2,
            is_default=True)
    r = run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, enabled=True,
            is_default=True)
    assert r["default_model_config_id"] == M2


def test_moving_a_config_to_a_disabled_provider_moves_the_default(memory_app):
    org_with(memory_app)
    run(memory_app, type="set_provider", organization_id=ORG, provider="vertex", enabled=False)
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M1, provider="vertex")
    assert default_changes(memory_app)[-1] == (M2, M1, "default_provider_disabled")


# -- delete, set default ---------------------------------------------------------------------------------------

def test_delete(memory_app):
    org_with(memory_app, configs=(M1, M2))
    r = run(memory_app, type="delete_model_config", organization_id=ORG, model_config_id=M1)
    assert r["default_changes"] == [{"model_config_id": M2, "previous_model_config_id": M1, "reason": "default_deleted"}]
    r = run(memory_app, type="delete_model_config", organization_id=ORG, model_config_id=M2)
    assert r["default_changes"] == [{"model_config_id": None, "previous_model_config_id": M2, "reason": "default_deleted"}]
    assert r["default_model_config_id"] is None
    refused(memory_app, "model_config_not_found", type="delete_model_config", organization_id=ORG, model_config_id=M2)
    r = config(memory_app, model_config_id=M3)
    assert r["default_changes"][0]["reason"] == "first_config"


def test_deleting_a_non_default_keeps_the_default(memory_app):
    org_with(memory_app, configs=(M1, M2))
    assert run(memory_app, type="delete_model_config", organization_id=ORG, model_config_id=M2)["default_changes"] == []


def test_set_default(memory_app):
    org_with(memory_app, configs=(M1, M2, M3), providers=("anthropic", "openai", "vertex"))
    r = run(memory_app, type="set_default_model_config", organization_id=ORG, model_config_id=M2)
    assert r["default_changes"] == [{"model_config_id": M2, "previous_model_config_id": M1, "reason": "set_default"}]
    assert run(memory_app, type="set_default_model_config", organization_id=ORG, model_config_id=M2)["recorded"] == 0
    refused(memory_app, "model_config_not_found", type="set_default_model_config", organization_id=ORG,
            model_config_id=FOREIGN)
    run(memory_app, type="set_provider", organization_id=ORG, provider="vertex", credentials_available=False)
    refused(memory_app, *NO_CREDS, type="set_default_model_config", organization_id=ORG, model_config_id=M3)
    run(memory_app, type="set_provider", organization_id=ORG, provider="vertex", credentials_available=True,
        enabled=False)
    refused(memory_app, *PROVIDER_OFF, type="set_default_model_config", organization_id=ORG, model_config_id=M3)
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M1, enabled=False)
    refused(memory_app, *INVALID, type="set_default_model_config", organization_id=ORG, model_config_id=M1)


# -- providers ----------------------------------------------------------------------------------------------

def test_provider_changes_move_the_default(memory_app):
    org_with(memory_app, configs=(M1, M2))  # M1 anthropic (default), M2 openai
    r = run(memory_app, type="set_provider", organization_id=ORG, provider="anthropic", credentials_available=False)
    assert r["default_changes"] == [{"model_config_id": M2, "previous_model_config_id": M1,
                                     "reason": "default_credentials_unavailable"}]
    r = run(memory_app, type="set_provider", organization_id=ORG, provider="openai", enabled=False)
    assert r["default_changes"] == [] and default_of(memory_app) == M2  # nothing usable left
    r = run(memory_app, type="set_provider", organization_id=ORG, provider="anthropic", credentials_available=True)
    assert r["default_changes"] == [{"model_config_id": M1, "previous_model_config_id": M2,
                                     "reason": "usable_config_available"}]
    assert run(memory_app, type="set_provider", organization_id=ORG, provider="anthropic")["recorded"] == 0
    r = run(memory_app, type="set_provider", organization_id=ORG, provider="anthropic", enabled=False)
    assert r["default_changes"] == []  # M1 unusable, M2's provider is off too: stays
    run(memory_app, type="set_provider", organization_id=ORG, provider="openai", enabled=True)
    assert default_changes(memory_app)[-1] == (M2, M1, "usable_config_available")
    refused(memory_app, "invalid_command", "provider is required.", type="set_provider", organization_id=ORG,
            provider="")


# -- admin overrides ------------------------------------------------------------------------------------------

def test_admin_overrides(memory_app):
    org_with(memory_app)
    org_with(memory_app, ORG2, configs=(FOREIGN,))
    r = run(memory_app, type="set_admin_model_override", organization_id=ORG, context="compaction",
            model_config_id=M2, reasoning_effort="high")
    assert (r["recorded"], r["context"]) == (1, "compaction")
    assert run(memory_app, type="set_admin_model_override", organization_id=ORG, context="compaction",
               model_config_id=M2, reasoning_effort="high")["recorded"] == 0
    refused(memory_app, *FOREIGN_ORG, type="set_admin_model_override", organization_id=ORG, context="general",
            model_config_id=FOREIGN)
    refused(memory_app, "model_config_not_found", "model config not found", type="set_admin_model_override",
            organization_id=ORG, context="general", model_config_id=M3)
    refused(memory_app, "invalid_command", "reasoning_effort requires a model_config_id.",
            type="set_admin_model_override", organization_id=ORG, context="general", model_config_id=None,
            reasoning_effort="low")
    refused(memory_app, "invalid_command", type="set_admin_model_override", organization_id=ORG, context="root",
            model_config_id=M1)
    refused(memory_app, "invalid_command", type="set_admin_model_override", organization_id=ORG, context="general")
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, enabled=False)
    run(memory_app, type="set_admin_model_override", organization_id=ORG, context="advisor", model_config_id=M2)
    run(memory_app, type="set_admin_model_override", organization_id=ORG, context="compaction", model_config_id=None)
    assert set(catalog(memory_app).admin_overrides) == {"advisor"}
    assert run(memory_app, type="set_admin_model_override", organization_id=ORG, context="compaction",
               model_config_id=None)["recorded"] == 0


# -- personal overrides ---------------------------------------------------------------------------------------

def test_personal_overrides_are_gated_by_the_deployment(memory_app):
    org_with(memory_app)
    refused(memory_app, "personal_model_overrides_disabled",
            "An administrator has not enabled user personal model overrides.", type="set_user_model_override",
            organization_id=ORG, user_id=ALICE, context="root", mode="model", model_config_id=M1)


@pytest.mark.parametrize("fields, error", [
    ({"context": "root", "mode": "deployment_default"},
     ("invalid_command", "deployment_default is not supported for root personal model overrides.")),
    ({"context": "general", "mode": "chat_default", "model_config_id": M1},
     ("invalid_command", "model_config_id must be empty unless mode is model.")),
    ({"context": "explore", "mode": "deployment_default", "reasoning_effort": "low"},
     ("invalid_command", "reasoning_effort requires mode model.")),
    ({"context": "root", "mode": "model"}, ("invalid_command", "model_config_id is required when mode is model.")),
    ({"context": "root", "mode": "model", "model_config_id": FOREIGN}, FOREIGN_ORG),
    ({"context": "root", "mode": "model", "model_config_id": M3}, INVALID),
    ({"context": "root", "mode": "model", "model_config_id": M2}, INVALID),  # disabled below
    ({"context": "root", "mode": "model", "model_config_id": M1, "user_id": "0b000000-0000-4000-8000-0000000000cc"},
     NOT_MEMBER),
])
def test_personal_override_validation(memory_app, fields, error):
    org_with(memory_app)
    org_with(memory_app, ORG2, configs=(FOREIGN,))
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M2, enabled=False)
    run(memory_app, type="set_deployment_settings", personal_model_overrides_enabled=True)
    command = {"type": "set_user_model_override", "organization_id": ORG, "user_id": ALICE, **fields}
    refused(memory_app, *error, **command)


def test_personal_override_is_recorded(memory_app):
    org_with(memory_app)
    run(memory_app, type="set_deployment_settings", personal_model_overrides_enabled=True)
    r = run(memory_app, type="set_user_model_override", organization_id=ORG, user_id=ALICE, context="explore",
            mode="model", model_config_id=M2, reasoning_effort="low")
    assert (r["recorded"], r["user_id"], r["context"]) == (1, ALICE, "explore")
    assert run(memory_app, type="set_user_model_override", organization_id=ORG, user_id=ALICE, context="explore",
               mode="model", model_config_id=M2, reasoning_effort="low")["recorded"] == 0
    run(memory_app, type="set_user_model_override", organization_id=ORG, user_id=ALICE, context="explore",
        mode="chat_default")
    o = catalog(memory_app).user_overrides[uuid.UUID(ALICE)]["explore"]
    assert (o.mode, o.model_config_id, o.reasoning_effort) == ("chat_default", None, None)


# -- deployment -----------------------------------------------------------------------------------------------

def test_deployment_settings(memory_app):
    r = run(memory_app, type="set_deployment_settings", advisor_enabled=True, advisor_max_uses_per_turn=5)
    assert r == {"version": 2, "recorded": 2, "settings": {
        "personal_model_overrides_enabled": False, "advisor_enabled": True, "advisor_max_uses_per_turn": 5,
        "advisor_max_output_tokens": 4096, "limits": DEFAULT_LIMITS}}
    assert run(memory_app, type="set_deployment_settings", advisor_enabled=True)["recorded"] == 0
    refused(memory_app, "invalid_command", "advisor_max_uses_per_turn must be at least 1.",
            type="set_deployment_settings", advisor_max_uses_per_turn=0)
    refused(memory_app, "invalid_command", "advisor_max_output_tokens must be at least 1.",
            type="set_deployment_settings", advisor_max_output_tokens=0)
    first = run(memory_app, type="set_deployment_settings", advisor_max_output_tokens=100, idempotency_key="d1")
    assert run(memory_app, type="set_deployment_settings", advisor_max_output_tokens=100,
               idempotency_key="d1") == first
    assert run(memory_app, type="set_deployment_settings", advisor_enabled=False)["settings"]["advisor_enabled"] is False


def test_deployment_limits_replace_as_a_whole_and_zero_is_the_default(memory_app):
    r = run(memory_app, type="set_deployment_settings", limits={"max_queued_messages_per_chat": 3,
                                                                "max_prompt_bytes": 10})
    assert r["settings"]["limits"] == {**DEFAULT_LIMITS, "max_queued_messages_per_chat": 3, "max_prompt_bytes": 10}
    r = run(memory_app, type="set_deployment_settings", limits={"max_prompt_bytes": 0, "max_steps_per_turn": 7})
    assert r["settings"]["limits"] == {**DEFAULT_LIMITS, "max_steps_per_turn": 7}
    assert run(memory_app, type="set_deployment_settings", limits={"max_steps_per_turn": 7})["recorded"] == 0
    refused(memory_app, "invalid_command", "limits.max_steps_per_turn must be 0 (the default) or positive.",
            type="set_deployment_settings", limits={"max_steps_per_turn": -1})
    refused(memory_app, "invalid_command", None, type="set_deployment_settings", limits={"max_bogus": 1})


def test_catalog_commands_are_idempotent_with_a_key(memory_app):
    first = run(memory_app, type="add_organization_member", organization_id=ORG, user_id=ALICE, idempotency_key="a")
    head = memory_app.head()
    assert run(memory_app, type="add_organization_member", organization_id=ORG, user_id=ALICE,
               idempotency_key="a") == first
    first = config(memory_app, model_config_id=M1, idempotency_key="c")
    head = memory_app.head()
    assert config(memory_app, model_config_id=M1, idempotency_key="c") == first
    assert memory_app.head() == head
