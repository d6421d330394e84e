"""``ledger.policy.settings.generation_settings``: the catalog and deployment settings of a generation."""

from __future__ import annotations

from datetime import datetime, timezone
from uuid import UUID

from ledger.catalog.state import CatalogState, DeploymentState
from ledger.catalog.values import AdminOverride, ModelConfig, ProviderState
from ledger.chat.messageinfo import MessageInfo
from ledger.chat.state import ChatState
from ledger.policy.generation import next_action
from ledger.policy.settings import generation_settings

ORG = UUID(int=1)
OTHER_ORG = UUID(int=2)
OWNER = UUID(int=3)
MAIN, SMALL, GATED = UUID(int=10), UUID(int=11), UUID(int=12)


def catalog(**kw) -> CatalogState:
    configs = {
        MAIN: ModelConfig(model_config_id=MAIN, provider="anthropic", model="sonnet", display_name="s",
                          context_limit=200_000, compression_threshold=80),
        SMALL: ModelConfig(model_config_id=SMALL, provider="openai", model="mini", display_name="m",
                           context_limit=10_000, compression_threshold=50),
        GATED: ModelConfig(model_config_id=GATED, provider="google", model="g", display_name="g",
                           context_limit=1_000_000),
    }
    return CatalogState(organization_id=ORG, members={OWNER}, configs=configs, default_model_config_id=MAIN,
                        providers={"google": ProviderState(enabled=False)}, **kw)


def chat(model: UUID | None = MAIN, parent: UUID | None = None, context_limit: int | None = None) -> ChatState:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    s = ChatState(chat_id=UUID(int=99), organization_id=ORG, owner_id=OWNER, parent_chat_id=parent,
                  root_chat_id=parent or UUID(int=99), title="t", created_at=at, model_config_id=model)
    s.messages.append(MessageInfo(1, "user", "both", None, model, False, False, (), (), False, at, None,
                                  context_limit))
    return s


def test_the_chat_model_gives_threshold_and_limit():
    r = generation_settings(chat(MAIN), catalog(), DeploymentState())
    assert r.source == "catalog" and r.note is None
    s = r.settings
    assert (s.threshold_percent, s.context_limit, s.compaction_context_limit) == (80, 200_000, 200_000)
    assert r.model["source"] == "chat_model" and r.model["model_config_id"] == str(MAIN)
    assert (s.advisor.enabled, s.advisor.model_usable, s.advisor.max_uses_per_turn) == (False, True, 3)


def test_an_unusable_chat_model_falls_back_to_the_default():
    r = generation_settings(chat(GATED), catalog(), None)
    assert r.model["source"] == "fallback_default" and r.model["reason"] == "provider_disabled"
    assert (r.settings.threshold_percent, r.settings.context_limit) == (80, 200_000)


def test_the_compaction_override_lowers_only_the_trigger_limit():
    r = generation_settings(chat(MAIN), catalog(admin_overrides={"compaction": AdminOverride(model_config_id=SMALL)}),
                            None)
    assert (r.settings.context_limit, r.settings.compaction_context_limit) == (200_000, 10_000)
    assert r.compaction_model["source"] == "admin_override"
    # an unusable override is ignored
    r = generation_settings(chat(MAIN), catalog(admin_overrides={"compaction": AdminOverride(model_config_id=GATED)}),
                            None)
    assert r.settings.compaction_context_limit == 200_000 and r.compaction_model["source"] == "chat_model"


def test_the_advisor_follows_the_deployment_and_the_chat():
    dep = DeploymentState(advisor_enabled=True, advisor_max_uses_per_turn=5)
    r = generation_settings(chat(MAIN), catalog(), dep)
    assert (r.settings.advisor.enabled, r.settings.advisor.model_usable, r.settings.advisor.max_uses_per_turn) == (
        True, True, 5)
    assert next_action(chat(MAIN), r.settings).advisor.eligible
    child = chat(MAIN, parent=UUID(int=98))
    assert next_action(child, generation_settings(child, catalog(), dep).settings).advisor.reason == "child_chat"
    assert next_action(chat(MAIN), generation_settings(chat(MAIN), catalog(), None).settings).advisor.reason == "disabled"


def test_defaults_without_a_usable_model():
    dep = DeploymentState(advisor_enabled=True)
    no_default = catalog()
    no_default.default_model_config_id = None
    r = generation_settings(chat(GATED, context_limit=4000), no_default, dep)
    assert r.source == "defaults" and "no_default_model" in r.note
    assert (r.settings.threshold_percent, r.settings.context_limit) == (70, 4000)
    assert r.context_limit_source == "latest_message"
    assert next_action(chat(GATED), r.settings).advisor.reason == "no_usable_model"
    # a catalog of another organization is no catalog for this chat
    other = catalog()
    other.organization_id = OTHER_ORG
    r = generation_settings(chat(MAIN), other, None)
    assert r.source == "defaults" and r.context_limit_source == "none" and r.settings.context_limit == 0
