"""The authorization rules (``commands.access.may``, pure) and the token decider, as properties."""

from __future__ import annotations

import re
import typing
from typing import Any
from uuid import UUID, uuid4

import msgspec

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commands.access import REFUSALS, Principal, Resource, as_caller, may
from commands.chat import CreateChat, SendMessage
from commands.uow import utcnow
from ledger.access import decide
from ledger.access.state import evolve
from ledger.base import Emitter
from ledger.errors import LedgerError

ORGS = [UUID(int=1), UUID(int=2)]
USERS = [UUID(int=10), UUID(int=11)]

principals = st.builds(Principal, user=st.sampled_from(USERS), org=st.sampled_from([None, *ORGS]),
                       role=st.sampled_from(["member", "admin", "auditor"]), deployment_admin=st.booleans())
resources = st.one_of(
    st.builds(Resource, kind=st.just("chat"), org=st.sampled_from(ORGS), owner=st.sampled_from(USERS)),
    st.builds(Resource, kind=st.just("catalog"), org=st.sampled_from(ORGS), owner=st.sampled_from([None, *USERS])),
    st.just(Resource("deployment")),
)
actions = st.sampled_from(["read", "write"])


@given(principals, actions, resources)
def test_every_refusal_has_a_documented_403_code(p, action, r):
    code = may(p, action, r)
    assert code is None or REFUSALS[code][0] == 403


@given(principals, actions, resources)
def test_nothing_of_another_organization(p, action, r):
    if r.kind != "deployment" and r.org != p.org:
        assert may(p, action, r) == "not_in_organization"


@given(principals, resources)
def test_an_auditor_writes_nothing_and_reads_the_whole_organization(p, r):
    p = Principal(p.user, p.org, "auditor", False)
    assert may(p, "write", r) is not None
    if r.kind != "deployment" and r.org == p.org:
        assert may(p, "read", r) is None


@given(principals, actions, resources)
def test_a_member_only_touches_own_chats_and_reads_the_catalog(p, action, r):
    p = Principal(p.user, p.org, "member", p.deployment_admin)
    allowed = may(p, action, r) is None
    if r.kind == "chat" and r.org == p.org:
        assert allowed == (r.owner == p.user)
    if r.kind == "catalog" and r.org == p.org:
        assert allowed == (r.owner == p.user or (r.owner is None and action == "read"))


@given(principals, actions, resources)
def test_an_admin_may_do_everything_of_its_organization_only(p, action, r):
    p = Principal(p.user, p.org, "admin", p.deployment_admin)
    if r.kind != "deployment":
        assert (may(p, action, r) is None) == (r.org == p.org)


@given(principals, actions)
def test_the_deployment_needs_a_deployment_admin(p, action):
    assert (may(p, action, Resource("deployment")) is None) == p.deployment_admin


@given(st.sampled_from(USERS), st.sampled_from([None, *USERS]), st.sampled_from([None, *USERS]))
def test_the_caller_is_the_actor_and_the_creator(user, actor, created_by):
    p = Principal(user, ORGS[0], "member")
    cmd = SendMessage(chat_id=uuid4(), text="hi", actor=actor, created_by=created_by)
    if actor not in (None, user) or created_by not in (None, user):
        with pytest.raises(LedgerError) as e:
            as_caller(p, cmd)
        assert e.value.code == "actor_mismatch"
    else:
        run = as_caller(p, cmd)
        assert run.actor == user and run.created_by == user


def test_a_chat_owned_by_someone_else_is_refused():
    p = Principal(USERS[0], ORGS[0], "admin")
    with pytest.raises(LedgerError) as e:
        as_caller(p, CreateChat(organization_id=ORGS[0], owner_id=USERS[1], text="hi"))
    assert e.value.code == "actor_mismatch"


@given(st.sampled_from([None, *ORGS]), st.sampled_from([None, "member", "admin", "auditor", "owner"]),
       st.booleans())
def test_a_token_grants_a_role_in_an_organization_or_the_deployment(org, role, deployment_admin):
    now = utcnow()
    em = Emitter(uuid4(), 0, now)
    ok = (org is None) == (role is None) and role != "owner" and (org is not None or deployment_admin)
    try:
        events = decide.issue(None, em, hash="0" * 64, user=USERS[0], org=org, role=role,
                              deployment_admin=deployment_admin, issued_by=None, at=now)
    except LedgerError as e:
        assert not ok and e.code == "invalid_command"
        return
    assert ok
    state = evolve(None, events[0])
    assert (state.org, state.role, state.deployment_admin, state.revoked) == (org, role, deployment_admin, False)
    revoked = decide.revoke(state, Emitter(state.token_id, 1, now), revoked_by=None, at=now)
    state = evolve(state, revoked[0])
    assert state.revoked and decide.revoke(state, Emitter(state.token_id, 2, now), revoked_by=None, at=now) == []


# -- authorship: every field that names a user, nested ones too ------------------------------------------------

def uuid_fields(tp: Any, path: str = "", seen: frozenset = frozenset()) -> list[str]:
    """The paths of every UUID field reachable from type ``tp`` (``message.created_by``, ``messages[].created_by``)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is UUID:
        return [path]
    if origin is typing.Annotated:
        return uuid_fields(args[0], path, seen)
    if origin in (list, tuple, set, frozenset):
        return [p for a in args if a is not Ellipsis for p in uuid_fields(a, path + "[]", seen)]
    if origin is dict:
        return uuid_fields(args[1], path + "{}", seen)
    if origin is not None and args:  # unions
        return [p for a in args for p in uuid_fields(a, path, seen)]
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct) and tp not in seen:
        hints = typing.get_type_hints(tp, include_extras=True)
        return [p for f in tp.__struct_fields__ for p in uuid_fields(hints[f], f"{path}.{f}" if path else f, seen | {tp})]
    return []


def test_every_uuid_field_of_every_command_has_its_rule():
    """A new command field that names a user or another stream cannot arrive without its row in the rules."""
    import commands.handler  # noqa: F401 - registers every command type
    from commands.access import FIELD_RULES
    from commands.base import HANDLERS

    found = {(cls.__name__, path) for cls in HANDLERS for path in uuid_fields(cls)}
    assert len(found) > 80  # (the walk reaches nested messages: it is not vacuous)
    assert ("CommitStep", "messages[].created_by") in found and ("CreateChat", "message.created_by") in found
    missing = sorted((c, p) for c, p in found if re.split(r"[.\[\]{}]+", p.strip("[]{}"))[-1] not in FIELD_RULES)
    assert not missing, f"UUID fields without a rule in commands.access.FIELD_RULES: {missing}"


def _message(author: UUID | None) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "text": "x"}], **({"created_by": str(author)} if author else {})}


authors = st.sampled_from([None, *USERS])


@given(st.sampled_from(USERS), st.sampled_from(["create_chat", "send_message", "edit_message", "commit_step",
                                                 "end_chat", "complete_requires_action", "finish_interruption",
                                                 "finish_turn", "finish_error"]),
       st.lists(authors, min_size=1, max_size=4))
def test_no_nested_author_but_the_caller(user, kind, nested):
    """Whatever a command nests (its message, prefix and suffix messages, a step's messages), a message that
    names an author names the caller, or the command is refused ``actor_mismatch`` — never recorded as given."""
    from commands.handler import command_from_dict

    chat = str(uuid4())
    body: dict[str, Any] = {"type": kind}
    first, rest = nested[0], [_message(a) for a in nested[1:]]
    if kind == "create_chat":  # (one message only)
        body.update(organization_id=str(ORGS[0]), owner_id=str(user), message=_message(first))
        nested = nested[:1]
    elif kind in ("send_message", "edit_message"):
        body.update(chat_id=chat, message=_message(first), prefix_messages=rest, **(
            {"message_id": 1} if kind == "edit_message" else {}))
    elif kind == "commit_step":
        body.update(chat_id=chat, messages=[_message(first), *rest])
    elif kind == "end_chat":
        body.update(chat_id=chat, prefix_messages=[_message(first), *rest])
    elif kind == "complete_requires_action":
        body.update(chat_id=chat, results=[], suffix_messages=[_message(first), *rest])
    elif kind in ("finish_turn", "finish_error"):  # (terminal receipts name their author too)
        body.update(chat_id=chat, terminal_messages=[_message(first), *rest],
                    **({"error": {"message": "x"}} if kind == "finish_error" else {}))
    else:
        body.update(chat_id=chat, partial_messages=[_message(first), *rest], terminal_messages=rest)
    cmd = command_from_dict(body)
    p = Principal(user, ORGS[0], "admin")
    if any(a not in (None, user) for a in nested):
        with pytest.raises(LedgerError) as e:
            as_caller(p, cmd)
        assert e.value.code == "actor_mismatch"
    else:
        run = as_caller(p, cmd)
        from commands.access import _nested_callers

        assert all(getattr(s, f) in (None, user) for s, f in _nested_callers(run))
        assert run.actor == user
