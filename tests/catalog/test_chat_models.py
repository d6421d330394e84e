"""Chats and the catalog: membership and model selection at create, explicit models on send/edit, the
re-resolution of a queued prompt's model at promotion, and what each event records (docs/chatd.md §6.2, §6.3)."""

from __future__ import annotations

import uuid

import pytest

from ledger.catalog.state import DEPLOYMENT_ID
from ledger.chat import events as ev
from tests.catalog.kit import (
    ALICE, BOB, FOREIGN, M1, M2, M3, ORG, ORG2, W, catalog, chat, org_with, refused, run,
)
from tests.catalog.test_catalog_rules import FOREIGN_ORG, INVALID, NO_CREDS, NOT_MEMBER, PROVIDER_OFF

NO_DEFAULT = ("no_default_model", "No default chat model config is configured.")


def recorded(app, chat_id, cls):
    return [e for e in app.stream(uuid.UUID(chat_id)) if isinstance(e, cls)]


def resolution(result):
    return result.get("model_resolution")


@pytest.fixture
def orgs(memory_app):
    """ORG: alice and bob, M1 (anthropic, default) and M2 (openai); ORG2: alice, FOREIGN."""
    org_with(memory_app)
    org_with(memory_app, ORG2, members=(ALICE,), configs=(FOREIGN,))
    return memory_app


def make_unusable(app, how, model=M2):
    provider = catalog(app).configs[uuid.UUID(model)].provider
    if how == "disabled":
        run(app, type="update_model_config", organization_id=ORG, model_config_id=model, enabled=False)
    elif how == "missing":
        run(app, type="delete_model_config", organization_id=ORG, model_config_id=model)
    elif how == "provider_disabled":
        run(app, type="set_provider", organization_id=ORG, provider=provider, enabled=False)
    elif how == "credentials_unavailable":
        run(app, type="set_provider", organization_id=ORG, provider=provider, credentials_available=False)


ERRORS = {"disabled": INVALID, "missing": INVALID, "provider_disabled": PROVIDER_OFF,
          "credentials_unavailable": NO_CREDS}
HOWS = list(ERRORS)


# -- create ---------------------------------------------------------------------------------------------

def test_create_requires_membership(orgs):
    refused(orgs, *NOT_MEMBER, type="create_chat", organization_id=ORG2, owner_id=BOB, text="hi")
    refused(orgs, *NOT_MEMBER, type="create_chat", organization_id=str(uuid.uuid4()), owner_id=BOB, text="hi")


def test_create_uses_the_organization_default(orgs):
    r = chat(orgs)
    assert r["model_config_id"] == M1
    assert resolution(r) == {"model_config_id": M1, "source": "org_default"}
    created = recorded(orgs, r["chat_id"], ev.ChatCreated)[0]
    assert str(created.model_config_id) == M1 and created.model_resolution.source == "org_default"
    assert str(created.messages[0].model_config_id) == M1


def test_create_with_an_explicit_model(orgs):
    r = chat(orgs, model_config_id=M2)
    assert resolution(r) == {"model_config_id": M2, "source": "explicit"}
    r = run(orgs, type="create_chat", organization_id=ORG, owner_id=ALICE,
            message={"role": "user", "parts": [{"type": "text", "text": "x"}], "model_config_id": M2})
    assert resolution(r)["source"] == "explicit"


def test_create_with_a_foreign_model_is_refused(orgs):
    refused(orgs, *FOREIGN_ORG, type="create_chat", organization_id=ORG, owner_id=ALICE, text="hi",
            model_config_id=FOREIGN)


@pytest.mark.parametrize("how", HOWS)
def test_create_with_an_unusable_model_is_refused(orgs, how):
    make_unusable(orgs, how)
    refused(orgs, *ERRORS[how], type="create_chat", organization_id=ORG, owner_id=ALICE, text="hi",
            model_config_id=M2)


def test_create_with_an_unknown_model_is_refused(orgs):
    refused(orgs, *INVALID, type="create_chat", organization_id=ORG, owner_id=ALICE, text="hi",
            model_config_id=M3)


def test_create_without_a_usable_default(memory_app):
    run(memory_app, type="add_organization_member", organization_id=ORG, user_id=ALICE)
    refused(memory_app, *NO_DEFAULT, type="create_chat", organization_id=ORG, owner_id=ALICE, text="hi")
    org_with(memory_app, members=(), configs=(M1,))
    run(memory_app, type="update_model_config", organization_id=ORG, model_config_id=M1, enabled=False)
    refused(memory_app, *NO_DEFAULT, type="create_chat", organization_id=ORG, owner_id=ALICE, text="hi")


def test_personal_root_override(orgs):
    run(orgs, type="set_deployment_settings", personal_model_overrides_enabled=True)
    run(orgs, type="set_user_model_override", organization_id=ORG, user_id=ALICE, context="root", mode="model",
        model_config_id=M2, reasoning_effort="high")
    assert resolution(chat(orgs)) == {"model_config_id": M2, "source": "personal_override", "reasoning_effort": "high"}
    assert resolution(chat(orgs, owner=BOB))["source"] == "org_default"  # bob has none
    assert resolution(chat(orgs, model_config_id=M1))["source"] == "explicit"  # explicit wins
    run(orgs, type="set_deployment_settings", personal_model_overrides_enabled=False)
    assert resolution(chat(orgs)) == {"model_config_id": M1, "source": "org_default"}  # switched off


@pytest.mark.parametrize("how", HOWS)
def test_an_unusable_personal_override_falls_back_to_the_default(orgs, how):
    run(orgs, type="set_deployment_settings", personal_model_overrides_enabled=True)
    run(orgs, type="set_user_model_override", organization_id=ORG, user_id=ALICE, context="root", mode="model",
        model_config_id=M2)
    make_unusable(orgs, how)
    assert resolution(chat(orgs)) == {"model_config_id": M1, "source": "fallback_default", "reason": how,
                                      "requested_model_config_id": M2}


def test_chat_default_mode_uses_the_organization_default(orgs):
    run(orgs, type="set_deployment_settings", personal_model_overrides_enabled=True)
    run(orgs, type="set_user_model_override", organization_id=ORG, user_id=ALICE, context="root",
        mode="chat_default")
    assert resolution(chat(orgs))["source"] == "org_default"


def test_a_child_chat_runs_on_its_parents_model(orgs):
    parent = chat(orgs, model_config_id=M2)["chat_id"]
    assert resolution(chat(orgs, parent_chat_id=parent)) == {"model_config_id": M2, "source": "chat_model"}
    make_unusable(orgs, "disabled")
    assert resolution(chat(orgs, parent_chat_id=parent)) == {
        "model_config_id": M1, "source": "fallback_default", "reason": "disabled", "requested_model_config_id": M2}
    refused(orgs, *NOT_MEMBER, type="create_chat", organization_id=ORG, owner_id="0b000000-0000-4000-8000-0000000000cc",
            text="hi", parent_chat_id=parent)


# -- send, edit -----------------------------------------------------------------------------------------------

def test_send_keeps_the_chats_model_or_takes_a_valid_explicit_one(orgs):
    chat_id = chat(orgs, initial_status="waiting")["chat_id"]
    r = run(orgs, type="send_message", chat_id=chat_id, text="again")
    assert resolution(r) == {"model_config_id": M1, "source": "chat_model"}
    run(orgs, type="finish_turn", chat_id=chat_id)
    r = run(orgs, type="send_message", chat_id=chat_id, text="on gpt", model_config_id=M2)
    assert resolution(r) == {"model_config_id": M2, "source": "explicit"} and r["model_config_id"] == M2
    turn = recorded(orgs, chat_id, ev.TurnStarted)[-1]
    assert str(turn.messages[-1].model_config_id) == M2
    # a send without a model keeps the chat's even when it became unusable: generation falls back
    run(orgs, type="finish_turn", chat_id=chat_id)
    make_unusable(orgs, "disabled")
    r = run(orgs, type="send_message", chat_id=chat_id, text="still gpt")
    assert resolution(r) == {"model_config_id": M2, "source": "chat_model"}


@pytest.mark.parametrize("how", HOWS + ["foreign"])
@pytest.mark.parametrize("state", ["W", "R0"])
def test_send_validates_an_explicit_model(orgs, how, state):
    chat_id = chat(orgs, initial_status="waiting" if state == "W" else "running")["chat_id"]
    target = FOREIGN if how == "foreign" else M2
    if how != "foreign":
        make_unusable(orgs, how)
    error = FOREIGN_ORG if how == "foreign" else ERRORS[how]
    refused(orgs, *error, type="send_message", chat_id=chat_id, text="x", model_config_id=target)


def test_a_queued_send_stores_its_validated_model(orgs):
    chat_id = chat(orgs)["chat_id"]
    r = run(orgs, type="send_message", chat_id=chat_id, text="later", model_config_id=M2)
    assert r["queued_message_id"] == 1 and "model_resolution" not in r
    assert str(recorded(orgs, chat_id, ev.PromptQueued)[0].prompt.model_config_id) == M2


@pytest.mark.parametrize("how", HOWS + ["foreign"])
def test_edit_validates_an_explicit_model(orgs, how):
    chat_id = chat(orgs)["chat_id"]
    if how != "foreign":
        make_unusable(orgs, how)
    target = FOREIGN if how == "foreign" else M2
    error = FOREIGN_ORG if how == "foreign" else ERRORS[how]
    refused(orgs, *error, type="edit_message", chat_id=chat_id, message_id=1, text="y", model_config_id=target)


def test_edit_keeps_the_chats_model_or_takes_an_explicit_one(orgs):
    chat_id = chat(orgs)["chat_id"]
    r = run(orgs, type="edit_message", chat_id=chat_id, message_id=1, text="y")
    assert resolution(r) == {"model_config_id": M1, "source": "chat_model"}
    r = run(orgs, type="edit_message", chat_id=chat_id, message_id=2, text="z", model_config_id=M2)
    assert resolution(r) == {"model_config_id": M2, "source": "explicit"} and r["model_config_id"] == M2


# -- promotion ------------------------------------------------------------------------------------------------

def queued_chat(app, model=M2):
    """R1: owned, one prompt queued with ``model`` (None: the chat's)."""
    chat_id = chat(app)["chat_id"]
    run(app, type="acquire", chat_id=chat_id, **W)
    fields = {"model_config_id": model} if model else {}
    run(app, type="send_message", chat_id=chat_id, text="queued", **fields)
    return chat_id


def test_promotion_keeps_a_usable_queued_model(orgs):
    chat_id = queued_chat(orgs)
    r = run(orgs, type="finish_turn", chat_id=chat_id)
    assert r["promoted_queued_message_id"] == 1 and r["model_config_id"] == M2
    assert resolution(r) == {"model_config_id": M2, "source": "explicit"}
    promoted = recorded(orgs, chat_id, ev.QueuedPromptPromoted)[0]
    assert str(promoted.model_config_id) == M2 and str(promoted.messages[-1].model_config_id) == M2


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("via", ["finish_turn", "promote", "finish_interruption", "send_from_E1"])
def test_promotion_falls_back_when_the_queued_model_became_unusable(orgs, how, via):
    chat_id = queued_chat(orgs)
    make_unusable(orgs, how)
    if via == "finish_turn":
        r = run(orgs, type="finish_turn", chat_id=chat_id)
    elif via == "promote":
        run(orgs, type="finish_error", chat_id=chat_id, error={"message": "boom"})
        r = run(orgs, type="promote_queued_message", chat_id=chat_id, queued_message_id=1)
    elif via == "finish_interruption":
        run(orgs, type="interrupt", chat_id=chat_id)
        r = run(orgs, type="finish_interruption", chat_id=chat_id)
    else:
        run(orgs, type="finish_error", chat_id=chat_id, error={"message": "boom"})
        r = run(orgs, type="send_message", chat_id=chat_id, text="another")
    assert r["promoted_queued_message_id"] == 1
    assert resolution(r) == {"model_config_id": M1, "source": "fallback_default", "reason": how,
                             "requested_model_config_id": M2}
    assert r["model_config_id"] == M1
    promoted = recorded(orgs, chat_id, ev.QueuedPromptPromoted)[0]
    assert str(promoted.messages[-1].model_config_id) == M1


def test_a_prompt_queued_without_a_model_is_resolved_against_the_chats(orgs):
    chat_id = chat(orgs, model_config_id=M2)["chat_id"]
    run(orgs, type="acquire", chat_id=chat_id, **W)
    run(orgs, type="send_message", chat_id=chat_id, text="queued")
    make_unusable(orgs, "credentials_unavailable")
    r = run(orgs, type="finish_turn", chat_id=chat_id)
    assert resolution(r) == {"model_config_id": M1, "source": "fallback_default",
                             "reason": "credentials_unavailable", "requested_model_config_id": M2}


def test_promotion_without_a_usable_default_is_refused(orgs):
    chat_id = queued_chat(orgs)
    make_unusable(orgs, "disabled")
    make_unusable(orgs, "provider_disabled", model=M1)
    refused(orgs, *NO_DEFAULT, type="finish_turn", chat_id=chat_id)
    run(orgs, type="set_provider", organization_id=ORG, provider="anthropic", enabled=True)
    assert resolution(run(orgs, type="finish_turn", chat_id=chat_id))["source"] == "fallback_default"


def test_commands_that_resolve_nothing_do_not_read_the_catalog(orgs):
    chat_id = chat(orgs)["chat_id"]
    loads = []
    original, peek = orgs.load_cached, orgs.peek_cached
    orgs.load_cached = lambda *a, **k: loads.append(a) or original(*a, **k)

    def peeked(aggregate_id):  # an optimistic read of the cache (commands.uow): a read too, unless it missed
        hit, aggregate = peek(aggregate_id)
        if hit:
            loads.append((aggregate_id,))
        return hit, aggregate

    orgs.peek_cached = peeked
    run(orgs, type="acquire", chat_id=chat_id, **W)
    run(orgs, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [{"type": "text", "text": "a"}]}])
    run(orgs, type="send_message", chat_id=chat_id, text="queued")
    ran = run(orgs, type="record_generation_attempt", chat_id=chat_id)["settings"]  # resolved by the ledger
    # (the step and the send read the deployment's limits, not the catalog; the attempt reads both)
    assert [a[0] for a in loads] == [DEPLOYMENT_ID, DEPLOYMENT_ID, uuid.UUID(ORG), DEPLOYMENT_ID]
    assert ran["source"] == "ledger"
    loads.clear()
    ran.pop("source")  # what a runner passes: recorded as given, nothing read
    assert run(orgs, type="record_generation_attempt", chat_id=chat_id, settings=ran)["settings"]["source"] == "runner"
    assert loads == []
    run(orgs, type="finish_turn", chat_id=chat_id)  # promotes: reads the catalog
    assert [a[0] for a in loads] == [uuid.UUID(ORG)]
