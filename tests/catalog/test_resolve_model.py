"""The generation-time resolver (docs/chatd.md §6.3, §6.4): a chat's model at generation, subagent order,
overrides ignored when unusable or foreign, compaction's context limit, reasoning effort."""

from __future__ import annotations

import uuid

import pytest

from commands.catalog import deployment_of
from ledger.catalog.resolve import ChatModelFacts, resolve_model
from ledger.catalog.state import DEPLOYMENT_ID
from ledger.errors import LedgerError
from tests.catalog.kit import ALICE, BOB, FOREIGN, M1, M2, M3, ORG, ORG2, catalog, chat, org_with, run
from tests.catalog.test_chat_models import HOWS, make_unusable

U = uuid.UUID


@pytest.fixture
def orgs(memory_app):
    """ORG: M1 (anthropic, 100k, default), M2 (openai, 200k), M3 (anthropic, 300k); ORG2: FOREIGN."""
    org_with(memory_app, configs=(M1, M2, M3))
    org_with(memory_app, ORG2, members=(ALICE,), configs=(FOREIGN,))
    return memory_app


def resolve(app, context="root", model=M2, user=None, owners=None):
    facts = ChatModelFacts(organization_id=U(ORG), owner_id=U(ALICE), model_config_id=U(model) if model else None)
    dep = deployment_of(app.load(DEPLOYMENT_ID))
    r = resolve_model(context, facts, catalog(app), dep, U(user) if user else None, owners)
    return r


def brief(r):
    return (str(r.model_config_id), r.source, r.reason)


def test_the_chats_model_when_usable(orgs):
    r = resolve(orgs)
    assert brief(r) == (M2, "chat_model", None) and r.context_limit == 200_000


@pytest.mark.parametrize("how", HOWS)
def test_a_chat_whose_model_became_unusable_runs_on_the_default(orgs, how):
    make_unusable(orgs, how)
    r = resolve(orgs)
    assert brief(r) == (M1, "fallback_default", how) and str(r.requested_model_config_id) == M2


def test_a_foreign_stored_model_runs_on_the_local_default(orgs):
    r = resolve(orgs, model=FOREIGN, owners={U(FOREIGN): U(ORG2)})
    assert brief(r) == (M1, "fallback_default", "foreign_org")
    assert brief(resolve(orgs, model=FOREIGN))[2] == "missing"  # without its claim it is just unknown


def test_no_usable_default_fails(orgs):
    make_unusable(orgs, "disabled")
    for m in (M1, M3):
        run(orgs, type="update_model_config", organization_id=ORG, model_config_id=m, enabled=False)
    with pytest.raises(LedgerError) as err:
        resolve(orgs)
    assert (err.value.code, err.value.message) == ("no_default_model", "No default chat model config is configured.")


def test_resolve_for_a_real_chat_after_its_model_is_deleted(orgs):
    chat_id = chat(orgs, model_config_id=M3)["chat_id"]
    run(orgs, type="delete_model_config", organization_id=ORG, model_config_id=M3)
    state = orgs.load(U(chat_id)).state
    r = resolve_model("root", ChatModelFacts(organization_id=state.organization_id, owner_id=state.owner_id,
                                             model_config_id=state.model_config_id), catalog(orgs))
    assert brief(r) == (M1, "fallback_default", "missing")


# -- subagents -----------------------------------------------------------------------------------------------

def personal(app, context, mode, model=None, user=ALICE):
    run(app, type="set_deployment_settings", personal_model_overrides_enabled=True)
    fields = {"model_config_id": model} if model else {}
    run(app, type="set_user_model_override", organization_id=ORG, user_id=user, context=context, mode=mode, **fields)


def admin(app, context, model):
    run(app, type="set_admin_model_override", organization_id=ORG, context=context, model_config_id=model)


@pytest.mark.parametrize("context", ["general", "explore"])
def test_subagent_order(orgs, context):
    assert brief(resolve(orgs, context)) == (M2, "chat_model", None)  # type default: the parent's model
    admin(orgs, context, M3)
    assert brief(resolve(orgs, context)) == (M3, "admin_override", None)
    personal(orgs, context, "model", M1)
    assert brief(resolve(orgs, context)) == (M1, "personal_override", None)
    assert brief(resolve(orgs, context, user=BOB)) == (M3, "admin_override", None)  # bob has no override
    personal(orgs, context, "deployment_default")
    assert brief(resolve(orgs, context)) == (M3, "admin_override", None)
    personal(orgs, context, "chat_default")
    assert brief(resolve(orgs, context)) == (M2, "chat_model", None)  # stops: skips the admin override
    run(orgs, type="set_deployment_settings", personal_model_overrides_enabled=False)
    assert brief(resolve(orgs, context)) == (M3, "admin_override", None)  # personal overrides switched off


@pytest.mark.parametrize("how", HOWS)
def test_unusable_overrides_are_ignored(orgs, how):
    personal(orgs, "explore", "model", M3)
    admin(orgs, "explore", M3)
    make_unusable(orgs, how, model=M3)
    r = resolve(orgs, "explore")
    assert brief(r) == (M2, "chat_model", None)
    assert [(i.source, str(i.model_config_id), i.reason) for i in r.ignored] == [
        ("personal_override", M3, how), ("admin_override", M3, how)]


def test_an_unusable_chat_model_under_a_subagent_falls_back(orgs):
    make_unusable(orgs, "disabled")
    assert brief(resolve(orgs, "general")) == (M1, "fallback_default", "disabled")


# -- title generation, advisor, compaction ---------------------------------------------------------------------

@pytest.mark.parametrize("context", ["title_generation", "advisor", "compaction"])
def test_admin_only_contexts(orgs, context):
    personal(orgs, "general", "model", M1)  # personal overrides never apply here
    assert brief(resolve(orgs, context)) == (M2, "chat_model", None)
    admin(orgs, context, M3)
    assert brief(resolve(orgs, context))[:2] == (M3, "admin_override")


@pytest.mark.parametrize("context", ["advisor", "compaction"])
def test_an_unusable_advisor_or_compaction_override_falls_back_to_the_chat_model(orgs, context):
    admin(orgs, context, M3)
    run(orgs, type="update_model_config", organization_id=ORG, model_config_id=M3, enabled=False)
    r = resolve(orgs, context)
    assert brief(r) == (M2, "chat_model", None) and r.ignored[0].reason == "disabled"


#: requirements 001: a configured but unusable title_generation override is a hard failure of the context
TITLE_FAILURES = {
    "disabled": "the model config is disabled (disabled)",
    "missing": "the model config does not exist (missing)",
    "provider_disabled": "its provider is not enabled (provider_disabled)",
    "credentials_unavailable": "its provider's credentials are unavailable (credentials_unavailable)",
}


@pytest.mark.parametrize("how", HOWS)
def test_an_unusable_title_generation_override_fails_hard(orgs, how):
    admin(orgs, "title_generation", M3)
    make_unusable(orgs, how, model=M3)
    with pytest.raises(LedgerError) as err:
        resolve(orgs, "title_generation")
    assert (err.value.code, err.value.message) == (
        "model_override_unusable", f"the title_generation model override {M3} is not usable: {TITLE_FAILURES[how]}")
    # the other contexts are unaffected, and without the override the chat's model is used
    assert brief(resolve(orgs, "advisor")) == (M2, "chat_model", None)
    admin(orgs, "title_generation", None)
    assert brief(resolve(orgs, "title_generation")) == (M2, "chat_model", None)


def test_compaction_uses_the_smaller_context_limit(orgs):
    admin(orgs, "compaction", M3)  # 300k, chat model M2 200k
    r = resolve(orgs, "compaction")
    assert (str(r.model_config_id), r.context_limit) == (M3, 200_000)
    admin(orgs, "compaction", M1)  # 100k
    assert resolve(orgs, "compaction").context_limit == 100_000
    assert resolve(orgs, "compaction", model=M3).context_limit == 100_000
    # the chat model falls back (M2 disabled): the limit is the default's
    make_unusable(orgs, "disabled")
    admin(orgs, "compaction", M3)
    assert resolve(orgs, "compaction").context_limit == 100_000


def test_reasoning_effort(orgs):
    run(orgs, type="update_model_config", organization_id=ORG, model_config_id=M2,
        reasoning_effort={"default": "low", "max": "high"})
    assert resolve(orgs).reasoning_effort == "low"
    run(orgs, type="set_admin_model_override", organization_id=ORG, context="advisor", model_config_id=M2,
        reasoning_effort="max")
    assert resolve(orgs, "advisor").reasoning_effort == "high"  # clamped to the config's max
    personal(orgs, "explore", "model", M2)
    run(orgs, type="set_user_model_override", organization_id=ORG, user_id=ALICE, context="explore", mode="model",
        model_config_id=M2, reasoning_effort="minimal")
    assert resolve(orgs, "explore").reasoning_effort == "minimal"
    assert resolve(orgs, model=M1).reasoning_effort is None  # the config has no reasoning effort
