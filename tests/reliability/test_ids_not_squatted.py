"""Ids that cannot be squatted (issue 13 point 8, the ids part), on SQLite and PostgreSQL.

Before: a ``create_chat`` with the deployment's fixed id, a future organization's id, a future model
config's id or a tool-call execution's deterministic id succeeded and then blocked that deployment,
organization, model config or execution forever (``organization_id_in_use``, ``conflict``,
``invalid_state``). Now each non-chat kind finds its stream through ``ledger.streams.locate`` (the natural
id when empty or of its kind, else a derived id), the nil UUID and the deployment id are refused as
caller-chosen ids, UUIDs must be canonical, and a ``commit_step`` message's ``model_config_id`` must be
the chat's organization's. Each squat below is made for real (through the handler, or — for the deployment
id, which the handler now refuses — written to the store the way an older version let it be), and the
squatted kind is then used through the real commands.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.catalog import claim_owner, find_catalog, find_deployment
from commands.eventlog_verify import verify
from commands.toolcalls import load_execution
from ledger.base import Emitter
from ledger.catalog.aggregate import Deployment, ModelConfigClaim, OrganizationCatalog
from ledger.catalog.state import DEPLOYMENT_ID
from ledger.chat import decide as d
from ledger.chat.aggregate import Chat
from ledger.chat.values import MessageInput, TextPart
from ledger.chat.views import tool_call_execution_ids, unresolved_rows
from ledger.errors import LedgerError
from ledger.store import ChatLedgerApp
from ledger.streams import derived_id
from tests.audit.kit import cli
from tests.catalog.kit import ALICE, BOB, ORG, ORG2, org_with, run

NIL = str(uuid.UUID(int=0))


def refused(app: Any, code: str, **command: Any) -> LedgerError:
    head = app.head()
    with pytest.raises(LedgerError) as err:
        run(app, **command)
    assert err.value.code == code, err.value
    assert app.head() == head
    return err.value


def squat_chat(app: Any, chat_id: Any, owner: str = ALICE) -> dict[str, Any]:
    """A chat of ORG taking ``chat_id`` (the squatter is an ordinary member)."""
    return run(app, type="create_chat", organization_id=ORG, owner_id=owner, chat_id=str(chat_id), text="mine now")


# -- the reserved ids -----------------------------------------------------------------------------------

@pytest.mark.parametrize("reserved", [str(DEPLOYMENT_ID), NIL])
def test_reserved_ids_are_refused_wherever_a_caller_chooses_an_id(app, reserved):
    org_with(app)
    for command in ({"type": "create_chat", "organization_id": ORG, "owner_id": ALICE, "text": "x",
                     "chat_id": reserved},
                    {"type": "conversation_start", "conversation_id": reserved},
                    {"type": "add_organization_member", "organization_id": reserved, "user_id": ALICE},
                    {"type": "create_model_config", "organization_id": ORG, "model_config_id": reserved,
                     "provider": "anthropic", "model": "claude", "context_limit": 1000}):
        error = refused(app, "invalid_command", **command)
        if command["type"] == "create_chat" and reserved == NIL:
            assert error.message == "chatstate: CreateChatWithID called with nil chat ID"  # chatd's words
        else:
            assert error.message.endswith(f"{reserved} is reserved and cannot be used")


def test_a_deployment_id_squatted_by_an_older_version_blocks_nothing(app, db_url):
    """Older versions let a chat take the deployment's id: the deployment then lives at a derived id."""
    org_with(app)
    assert app.load(DEPLOYMENT_ID) is None
    em = Emitter(DEPLOYMENT_ID, 0, datetime.now(timezone.utc))
    squatter = Chat.start(d.create_chat(
        em, chat_topic=Chat.TOPIC, organization_id=uuid.UUID(ORG), owner_id=uuid.UUID(ALICE), parent=None,
        title=None, message=MessageInput(role="user", parts=[TextPart(text="squat")]), model_config_id=None,
        hook_allowed_tools=None, dynamic_tools=[], initial_status="waiting", turn_id=None,
        models=_facts(app)))
    app.save(squatter)
    first = run(app, type="set_deployment_settings", personal_model_overrides_enabled=True)
    assert first["settings"]["personal_model_overrides_enabled"] is True and first["version"] == 2
    again = run(app, type="set_deployment_settings", advisor_enabled=True, advisor_max_uses_per_turn=2)
    assert again["version"] == 3  # found the relocated stream again
    assert isinstance(app.load(derived_id(Deployment, DEPLOYMENT_ID)), Deployment)
    deployment = find_deployment(app)
    assert deployment.personal_model_overrides_enabled and deployment.advisor_max_uses_per_turn == 2
    # a rule that reads the deployment sees the relocated settings: personal overrides are enabled
    r = run(app, type="set_user_model_override", organization_id=ORG, user_id=ALICE, context="root",
            mode="chat_default")
    assert r["recorded"] >= 1
    assert isinstance(app.load(DEPLOYMENT_ID), Chat)  # the squatter is untouched
    # the models view reads the relocated deployment too (rows re-derived at each deployment change)
    models = json.loads(cli(db_url, "models", "--org", ORG, "--user", ALICE, "--json").output)
    assert models["personal_model_overrides_enabled"] is True
    assert verify(app)["ok"]


def _facts(app: Any) -> Any:
    from commands.catalog import load_model_facts
    from commands.uow import UnitOfWork

    return load_model_facts(UnitOfWork(app), uuid.UUID(ORG), deployment=True)


# -- squats through the handler ----------------------------------------------------------------------------

def test_a_future_organization_id_taken_by_a_chat_blocks_nothing(app, db_url):
    org_with(app)
    future = str(uuid.uuid4())
    squat_chat(app, future)
    run(app, type="add_organization_member", organization_id=future, user_id=BOB)
    run(app, type="create_model_config", organization_id=future, provider="anthropic", model="claude",
        context_limit=100_000)
    chat = run(app, type="create_chat", organization_id=future, owner_id=BOB, text="in the new org")
    assert chat["execution_state"] == "R0" and chat["model_config_id"]
    catalog = find_catalog(app, uuid.UUID(future))
    assert catalog.members == {uuid.UUID(BOB)} and catalog.organization_id == uuid.UUID(future)
    assert isinstance(app.load(uuid.UUID(future)), Chat)  # the squatter chat is untouched
    assert isinstance(app.load(derived_id(OrganizationCatalog, uuid.UUID(future))), OrganizationCatalog)
    models = json.loads(cli(db_url, "models", "--org", future, "--json").output)
    assert models["members"] == [BOB] and len(models["configs"]) == 1
    # a deployment change re-derives every organization's row from its (relocated) catalog
    run(app, type="set_deployment_settings", personal_model_overrides_enabled=True)
    models = json.loads(cli(db_url, "models", "--org", future, "--user", BOB, "--json").output)
    assert models["members"] == [BOB] and models["personal_model_overrides_enabled"] is True
    report = verify(app)
    assert report["ok"], report["anomalies"]


def test_a_future_model_config_id_taken_by_a_chat_blocks_nothing(app):
    org_with(app)
    org_with(app, org=ORG2, members=(BOB,), configs=())
    future = str(uuid.uuid4())
    squat_chat(app, future)
    created = run(app, type="create_model_config", organization_id=ORG2, model_config_id=future,
                  provider="anthropic", model="claude", context_limit=100_000)
    assert created["model_config_id"] == future
    assert claim_owner(app, uuid.UUID(future)) == uuid.UUID(ORG2)
    assert isinstance(app.load(derived_id(ModelConfigClaim, uuid.UUID(future))), ModelConfigClaim)
    mine = run(app, type="create_chat", organization_id=ORG2, owner_id=BOB, text="x", model_config_id=future)
    assert mine["model_config_id"] == future
    # another organization's chat naming it is told it is foreign (the claim was found where it lives)
    refused(app, "model_config_foreign_org", type="create_chat", organization_id=ORG, owner_id=ALICE, text="x",
            model_config_id=future)
    refused(app, "model_config_already_exists", type="create_model_config", organization_id=ORG,
            model_config_id=future, provider="anthropic", model="claude", context_limit=100_000)


def test_an_execution_id_taken_by_a_chat_blocks_nothing(app):
    org_with(app)
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="go")["chat_id"]
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "c1", "tool_name": "execute", "args": {}}]}])
    execution_id = tool_call_execution_ids(uuid.UUID(chat_id), 2, ["c1"])["c1"]
    squat_chat(app, execution_id, owner=BOB)
    call = {"chat_id": chat_id, "assistant_message_id": 2, "tool_call_id": "c1"}
    first = run(app, type="claim_tool_call", tool_name="execute", **call)
    assert (first["outcome"], first["execution_id"]) == ("run", str(execution_id))
    run(app, type="record_tool_call_response", status=200, body='{"ok": true}', **call)
    later = run(app, type="claim_tool_call", tool_name="execute", **call)
    assert later["outcome"] == "saved" and later["response"]["body"] == '{"ok": true}'
    assert load_execution(app, execution_id).state.response is not None
    assert isinstance(app.load(execution_id), Chat)
    chat = app.load(uuid.UUID(chat_id)).state
    assert [r["execution_id"] for r in unresolved_rows(chat)] == [str(execution_id)]


# -- canonical UUIDs, the commit_step model rule ---------------------------------------------------------

@pytest.mark.parametrize("spelling", [str.upper, lambda u: u.replace("-", "")])
def test_uuids_must_be_canonical(app, spelling):
    org_with(app)
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="hi")["chat_id"]
    error = refused(app, "invalid_command", type="set_title", chat_id=spelling(chat_id), title="ABCDEF0123")
    assert "canonical" in error.message and "$.chat_id" in error.message
    error = refused(app, "invalid_command", type="commit_step", chat_id=chat_id, messages=[
        {"role": "assistant", "parts": [{"type": "text", "text": "x"}], "created_by": spelling(ALICE)}])
    assert "$.messages[0].created_by" in error.message
    # text that merely looks like hex is text
    assert run(app, type="set_title", chat_id=chat_id, title="ABCDEF0123456789ABCDEF0123456789")["version"] == 2


def test_a_commit_step_message_model_must_be_of_the_chats_organization(app):
    from tests.catalog.kit import M1, M2

    org_with(app)
    org_with(app, org=ORG2, members=(BOB,), configs=(foreign := str(uuid.uuid4()),))
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="hi")["chat_id"]

    def step(model: str) -> dict[str, Any]:
        return {"type": "commit_step", "chat_id": chat_id, "messages": [
            {"role": "assistant", "parts": [{"type": "text", "text": "a"}], "model_config_id": M1},
            {"role": "assistant", "parts": [{"type": "text", "text": "b"}], "model_config_id": model}]}

    for bad in (foreign, str(uuid.uuid4())):
        error = refused(app, "model_config_foreign_org", **step(bad))
        assert error.message == "Model config does not belong to the specified organization."
    assert run(app, **step(M2))["message_ids"] == [2, 3]
    run(app, type="delete_model_config", organization_id=ORG, model_config_id=M2)
    assert run(app, **step(M2))["message_ids"] == [4, 5]  # a deleted config of the organization is its own


def test_an_organization_id_equal_to_another_organizations_moved_catalog_id(app):
    """A caller may choose, as an organization id, the id another organization's catalog moved to."""
    org_with(app)
    squat_chat(app, BASE)
    run(app, type="add_organization_member", organization_id=str(BASE), user_id=USERS[0])
    moved = derived_id(OrganizationCatalog, BASE)
    run(app, type="add_organization_member", organization_id=str(moved), user_id=USERS[1])
    assert {str(u) for u in find_catalog(app, BASE).members} == {USERS[0]}
    assert {str(u) for u in find_catalog(app, moved).members} == {USERS[1]}
    assert find_catalog(app, moved).organization_id == moved


# -- property: interleavings of creates of different kinds with colliding ids ----------------------------

BASE = uuid.UUID(int=0x5A000)
#: a natural id, and the ids its streams move to (which callers may choose as natural ids of their own)
IDS = [BASE, derived_id(OrganizationCatalog, BASE), derived_id(ModelConfigClaim, BASE),
       derived_id(OrganizationCatalog, derived_id(OrganizationCatalog, BASE))]
USERS = [str(uuid.UUID(int=0xE000 + i)) for i in range(2)]

op = st.one_of(
    st.tuples(st.just("chat"), st.sampled_from(IDS)),
    st.tuples(st.just("conversation"), st.sampled_from(IDS)),
    st.tuples(st.just("member"), st.sampled_from(IDS), st.sampled_from(USERS)),
    st.tuples(st.just("model"), st.sampled_from(IDS)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=10))
def test_property_no_kind_can_take_another_kinds_id(ops):
    app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    try:
        org_with(app)
        members: dict[uuid.UUID, set[str]] = {}
        models: set[uuid.UUID] = set()
        for kind, sid, *rest in ops:
            occupied = app.load(sid) is not None
            if kind == "chat":
                try:
                    squat_chat(app, sid)
                    assert not occupied
                except LedgerError as e:
                    assert e.code == "chat_already_exists" and occupied
            elif kind == "conversation":
                try:
                    run(app, type="conversation_start", conversation_id=str(sid))
                    assert not occupied
                except LedgerError as e:
                    assert e.code == "conversation_exists" and occupied
            elif kind == "member":
                user = rest[0]
                try:
                    run(app, type="add_organization_member", organization_id=str(sid), user_id=user)
                    assert user not in members.get(sid, set())
                except LedgerError as e:  # the only refusal: already a member
                    assert e.code == "already_organization_member" and user in members.get(sid, set())
                members.setdefault(sid, set()).add(user)
            else:
                try:
                    run(app, type="create_model_config", organization_id=ORG2, model_config_id=str(sid),
                        provider="anthropic", model="claude", context_limit=1000)
                    assert sid not in models
                except LedgerError as e:
                    assert e.code == "model_config_already_exists" and sid in models
                models.add(sid)
        # every organization has exactly the members added; every model config is ORG2's
        for org, users in members.items():
            catalog = find_catalog(app, org)
            assert catalog is not None and catalog.organization_id == org
            assert {str(u) for u in catalog.members} == users
        for mid in models:
            assert claim_owner(app, mid) == uuid.UUID(ORG2)
            assert mid in find_catalog(app, uuid.UUID(ORG2)).configs
        report = verify(app)
        assert report["ok"], report["anomalies"]
    finally:
        app.close()
