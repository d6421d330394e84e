"""An idempotency key names one command (issue 13 point 6).

Before: a key repeated with a different command (another type, or other fields) reported the first result
and silently dropped the new command — ``set_title``, then ``commit_step`` and ``end_chat`` with the same
key: all "ok", nothing recorded. Now the key is recorded with the command's identity (its type and a
digest of its fields); a repeat with the same command returns the first result and records nothing, one
with a different command is refused with ``idempotency_key_reused`` naming the first command's type and
records nothing. Table tests per aggregate kind through the real handler (SQLite and PostgreSQL), a
hypothesis property (in memory), keys over 200 characters, and keys recorded before identities existed
(today's behaviour kept).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from commands.base import command_identity
from commands.handler import command_from_dict, execute
from ledger.base import Emitter
from ledger.chat import decide as d
from ledger.chat.aggregate import Chat
from ledger.errors import LedgerError
from ledger.store import ChatLedgerApp
from tests.chat.helpers import ORG, OWNER, run, setup_org
from tests.toolcalls.helpers import call_command, new_chat

KEY = "key-1"


def refused(app: Any, command: dict[str, Any]) -> LedgerError:
    with pytest.raises(LedgerError) as err:
        run(app, **command)
    return err.value


def _chat(app: Any) -> dict[str, Any]:
    setup_org(app)
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="hi")["chat_id"]
    return {"chat_id": chat_id}


def _org(app: Any) -> dict[str, Any]:
    setup_org(app)
    return {}


def _conversation(app: Any) -> dict[str, Any]:
    return {"conversation_id": run(app, type="conversation_start")["conversation_id"]}


def _tool_call(app: Any) -> dict[str, Any]:
    setup_org(app)
    return {"chat_id": new_chat(app)}


def _assistant(text: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "parts": [{"type": "text", "text": text}]}]


USER = str(uuid.UUID(int=0xF00D))
#: kind -> (setup returning the ids the commands need, first command, a different command of another type,
#: the same type with other fields)
KINDS: dict[str, tuple[Any, ...]] = {
    "chat": (_chat,
             lambda chat_id: {"type": "set_title", "chat_id": chat_id, "title": "first"},
             lambda chat_id: {"type": "commit_step", "chat_id": chat_id, "messages": _assistant("dropped")},
             lambda chat_id: {"type": "set_title", "chat_id": chat_id, "title": "second"}),
    "catalog": (_org,
                lambda: {"type": "add_organization_member", "organization_id": ORG, "user_id": USER},
                lambda: {"type": "set_provider", "organization_id": ORG, "provider": "openai", "enabled": False},
                lambda: {"type": "add_organization_member", "organization_id": ORG,
                         "user_id": str(uuid.UUID(int=0xBEEF))}),
    "deployment": (lambda app: {},
                   lambda: {"type": "set_deployment_settings", "advisor_enabled": True},
                   lambda: {"type": "add_organization_member", "organization_id": ORG, "user_id": USER},
                   lambda: {"type": "set_deployment_settings", "advisor_enabled": True,
                            "advisor_max_uses_per_turn": 1}),
    "conversation": (_conversation,
                     lambda conversation_id: {"type": "conversation_arrive", "conversation_id": conversation_id,
                                              "arrival": {"type": "user", "text": "first"}},
                     lambda conversation_id: {"type": "conversation_begin", "conversation_id": conversation_id},
                     lambda conversation_id: {"type": "conversation_arrive", "conversation_id": conversation_id,
                                              "arrival": {"type": "user", "text": "second"}}),
    "tool call": (_tool_call,
                  lambda chat_id: call_command("claim_tool_call", chat_id, tool_name="execute", input_sha256="a"),
                  lambda chat_id: call_command("cancel_tool_call", chat_id),
                  lambda chat_id: call_command("claim_tool_call", chat_id, tool_name="execute", input_sha256="b")),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_same_key_same_command_returns_the_first_result(kind, app):
    setup, first, _, _ = KINDS[kind]
    ids = setup(app)
    result = run(app, **first(**ids), idempotency_key=KEY)
    head = app.head()
    assert run(app, **first(**ids), idempotency_key=KEY) == result
    assert app.head() == head


@pytest.mark.parametrize("which", ["another type", "other fields"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_same_key_different_command_is_refused_and_records_nothing(kind, which, app):
    setup, first, other_type, other_fields = KINDS[kind]
    ids = setup(app)
    original = first(**ids)
    run(app, **original, idempotency_key=KEY)
    head = app.head()
    other = (other_type if which == "another type" else other_fields)(**ids)
    if kind == "deployment" and which == "another type":
        # a key lives on the stream the command writes: another kind's stream never saw it, so this is
        # simply a new command there
        run(app, **other, idempotency_key=KEY)
        return
    error = refused(app, {**other, "idempotency_key": KEY})
    assert error.code == "idempotency_key_reused"
    assert error.message == ("idempotency key was already used by a different command "
                             f"(a {original['type']} command)")
    assert app.head() == head


def test_the_reproduction_set_title_then_commit_step_and_end_chat(app):
    """The issue's reproduction: all three were "ok" and the last two recorded nothing."""
    chat_id = _chat(app)["chat_id"]
    run(app, type="set_title", chat_id=chat_id, title="t", idempotency_key="k")
    head = app.head()
    for command in ({"type": "commit_step", "chat_id": chat_id, "messages": _assistant("hello")},
                    {"type": "end_chat", "chat_id": chat_id}):
        error = refused(app, {**command, "idempotency_key": "k"})
        assert (error.code, error.message) == ("idempotency_key_reused", "idempotency key was already used by a "
                                               "different command (a set_title command)")
    assert app.head() == head
    # with keys of their own they run
    run(app, type="commit_step", chat_id=chat_id, messages=_assistant("hello"), idempotency_key="k2")
    assert run(app, type="end_chat", chat_id=chat_id, idempotency_key="k3")["execution_state"] == "XW"


def test_a_key_of_a_child_create_is_not_a_send_on_the_parent(app):
    """``create_chat`` of a child records its key on the parent too (``ChildCreated``)."""
    parent = _chat(app)["chat_id"]
    run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="child", parent_chat_id=parent,
        idempotency_key="c")
    head = app.head()
    error = refused(app, {"type": "send_message", "chat_id": parent, "text": "x", "idempotency_key": "c"})
    assert error.code == "idempotency_key_reused" and "a create_chat command" in error.message
    assert app.head() == head


def test_a_default_given_explicitly_and_a_different_actor_are_still_the_same_command(memory_app):
    chat_id = _chat(memory_app)["chat_id"]
    first = run(memory_app, type="send_message", chat_id=chat_id, text="q", idempotency_key="s")
    head = memory_app.head()
    again = run(memory_app, type="send_message", chat_id=chat_id, text="q", busy_behavior="queue",
                prefix_messages=[], actor=str(uuid.uuid4()), idempotency_key="s")
    assert again == first and memory_app.head() == head


def test_keys_longer_than_200_characters_are_invalid(memory_app):
    chat_id = _chat(memory_app)["chat_id"]
    ok = run(memory_app, type="set_title", chat_id=chat_id, title="t", idempotency_key="k" * 200)
    head = memory_app.head()
    for command in ({"type": "set_title", "chat_id": chat_id, "title": "t"},
                    {"type": "add_organization_member", "organization_id": ORG, "user_id": USER},
                    {"type": "conversation_start"}):
        error = refused(memory_app, {**command, "idempotency_key": "k" * 201})
        assert error.code == "invalid_command" and "idempotency_key" in error.message
    assert memory_app.head() == head and ok["version"] == 2


def test_a_key_recorded_before_identities_keeps_todays_behaviour(memory_app):
    """Ledgers written before this change hold keys without an identity: a repeat of such a key still
    returns the first result (whatever the command), as it always did, and records nothing."""
    chat_id = uuid.UUID(_chat(memory_app)["chat_id"])
    chat = memory_app.load(chat_id)
    assert isinstance(chat, Chat)
    old = Emitter(chat_id, chat.version, datetime.now(timezone.utc), "legacy")  # no identity, as before
    chat.record(d.set_title(chat.state, old, title="old"))
    memory_app.save(chat)
    assert memory_app.stream(chat_id)[-1].idempotency_command is None
    head = memory_app.head()
    first = run(memory_app, type="set_title", chat_id=str(chat_id), title="old", idempotency_key="legacy")
    other = run(memory_app, type="set_title", chat_id=str(chat_id), title="new", idempotency_key="legacy")
    assert first == other and first["version"] == chat.version
    assert memory_app.head() == head


# -- property ------------------------------------------------------------------------------------------

def _pool(ids: dict[str, str]) -> list[dict[str, Any]]:
    chat, conv = ids["chat_id"], ids["conversation_id"]
    return [
        {"type": "set_title", "chat_id": chat, "title": "a"},
        {"type": "set_title", "chat_id": chat, "title": "b"},
        {"type": "send_message", "chat_id": chat, "text": "a"},
        {"type": "send_message", "chat_id": chat, "text": "a", "busy_behavior": "interrupt"},
        {"type": "commit_step", "chat_id": chat, "messages": _assistant("a")},
        {"type": "interrupt", "chat_id": chat},
        {"type": "interrupt", "chat_id": chat, "reason": "r"},
        {"type": "end_chat", "chat_id": chat},
        {"type": "add_organization_member", "organization_id": ORG, "user_id": USER},
        {"type": "add_organization_member", "organization_id": ORG, "user_id": str(uuid.UUID(int=7))},
        {"type": "set_provider", "organization_id": ORG, "provider": "openai", "credentials_available": True},
        {"type": "set_deployment_settings", "advisor_enabled": True},
        {"type": "set_deployment_settings", "advisor_enabled": False},
        {"type": "conversation_arrive", "conversation_id": conv, "arrival": {"type": "user", "text": "a"}},
        {"type": "conversation_arrive", "conversation_id": conv, "arrival": {"type": "user", "text": "b"}},
        {"type": "conversation_begin", "conversation_id": conv},
    ]


def _attempt(app: Any, command: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", execute(app, command_from_dict(command))
    except LedgerError as e:
        return "refused", e


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.integers(min_value=0, max_value=15), second=st.integers(min_value=0, max_value=15),
       key=st.text(min_size=1, max_size=200))
def test_property_a_key_answers_only_its_own_command(first, second, key):
    app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    try:
        setup_org(app)
        ids = {"chat_id": run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="hi")["chat_id"],
               "conversation_id": run(app, type="conversation_start")["conversation_id"]}
        pool = _pool(ids)
        outcome, result = _attempt(app, {**pool[first], "idempotency_key": key})
        recorded = app.stream(_stream_of(pool[first], ids))
        assume(outcome == "ok" and recorded and recorded[-1].idempotency_key == key)  # it recorded its key
        head = app.head()
        again, answer = _attempt(app, {**pool[second], "idempotency_key": key})
        same_stream = _stream_of(pool[second], ids) == _stream_of(pool[first], ids)
        same_command = command_identity(command_from_dict({**pool[first], "idempotency_key": key})) == \
            command_identity(command_from_dict({**pool[second], "idempotency_key": key}))
        if same_command:
            assert (again, answer) == ("ok", result)
            assert app.head() == head
        elif same_stream:
            assert again == "refused" and answer.code == "idempotency_key_reused", answer
            assert f"(a {pool[first]['type']} command)" in answer.message
            assert app.head() == head
        else:  # the key was never recorded on the stream this command writes: a new command there
            assert again == "ok" or answer.code != "idempotency_key_reused"
    finally:
        app.close()


def _stream_of(command: dict[str, Any], ids: dict[str, str]) -> uuid.UUID:
    from ledger.catalog.state import DEPLOYMENT_ID

    if "chat_id" in command:
        return uuid.UUID(command["chat_id"])
    if "conversation_id" in command:
        return uuid.UUID(command["conversation_id"])
    if "organization_id" in command:
        return uuid.UUID(command["organization_id"])
    return DEPLOYMENT_ID
