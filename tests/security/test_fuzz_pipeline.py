"""Issue 23, point 8: a hypothesis fuzz of the whole write path a request takes — decode the line, authorize it
for the token's principal (``commands.access.authorize``), decide and record (``commands.handler``) — on a real
ledger with two organizations. Every id in a command is drawn from both organizations' users, chats, model
configs and organizations (and ids nobody has), nested authors included. Whatever is drawn and whatever was
recorded before, no command that gets through writes a stream of another organization, or another member's
chat for a member, and every author the recorded events name is the caller."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Iterator
from uuid import UUID, uuid4

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.access import Principal, Scopes, authorize
from commands.handler import apply_lines
from ledger.store import open_app
from tests.catalog.kit import ALICE, BOB, M1, M2, M3, ORG, ORG2
from tests.service.conftest import ADMIN, AUDITOR, CAROL, seed

PRINCIPALS = {
    "alice": Principal(UUID(ALICE), UUID(ORG), "member"),
    "bob": Principal(UUID(BOB), UUID(ORG), "member"),
    "admin": Principal(UUID(ADMIN), UUID(ORG), "admin"),
    "auditor": Principal(UUID(AUDITOR), UUID(ORG), "auditor"),
    "carol": Principal(UUID(CAROL), UUID(ORG2), "member"),
}

#: commands with placeholders: each USER, CHAT, ORG, MODEL is drawn on its own from both organizations' ids
TEMPLATES: list[dict[str, Any]] = [
    {"type": "create_chat", "organization_id": "ORG", "owner_id": "USER", "text": "t", "model_config_id": "MODEL"},
    {"type": "create_chat", "organization_id": "ORG", "owner_id": "USER", "parent_chat_id": "CHAT",
     "message": {"role": "user", "parts": [{"type": "text", "text": "x"}], "created_by": "USER"}},
    {"type": "send_message", "chat_id": "CHAT", "text": "t", "created_by": "USER", "model_config_id": "MODEL"},
    {"type": "send_message", "chat_id": "CHAT", "created_by": "USER",
     "message": {"role": "user", "parts": [{"type": "text", "text": "x"}], "created_by": "USER"},
     "prefix_messages": [{"role": "user", "parts": [{"type": "text", "text": "p"}], "created_by": "USER"}]},
    {"type": "edit_message", "chat_id": "CHAT", "message_id": 1, "created_by": "USER",
     "message": {"role": "user", "parts": [{"type": "text", "text": "e"}], "created_by": "USER"}},
    {"type": "set_title", "chat_id": "CHAT", "title": "t"},
    {"type": "set_archived", "chat_id": "CHAT", "archived": True},
    {"type": "commit_step", "chat_id": "CHAT",
     "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "a"}], "created_by": "USER"}]},
    {"type": "interrupt", "chat_id": "CHAT"},
    {"type": "finish_turn", "chat_id": "CHAT"},
    {"type": "set_user_model_override", "organization_id": "ORG", "user_id": "USER", "model_config_id": "MODEL"},
    {"type": "update_model_config", "organization_id": "ORG", "model_config_id": "MODEL", "enabled": True},
    {"type": "add_organization_member", "organization_id": "ORG", "user_id": "USER"},
]
#: event fields that say who wrote something: always the caller (``user_id`` may name a member added by an admin)
AUTHOR_FIELDS = {"created_by", "actor", "owner_id"}


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> Iterator[tuple[Any, dict[str, list[str]]]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'ledger.db'}"
    chats = seed(url)
    app = open_app(url)
    pools = {"USER": [ALICE, BOB, CAROL, ADMIN, AUDITOR], "CHAT": list(chats), "ORG": [ORG, ORG2],
             "MODEL": [M1, M2, M3]}
    try:
        yield app, pools
    finally:
        app.close()


def fill(draw: Any, value: Any, pools: dict[str, list[str]], mine: dict[str, list[str]]) -> Any:
    """``value`` with each placeholder drawn from every id of its kind, or about half the time from the caller's
    own (its user, organization, chats), so that commands get past the rules often enough to reach the next."""
    if isinstance(value, str) and value in pools:
        options = [*mine.get(value, ()), *pools[value], str(uuid4())]
        return options[draw(st.integers(0, 2**16)) % len(options)]  # (the pools grow: same draw, any size)
    if isinstance(value, dict):
        return {k: fill(draw, v, pools, mine) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(draw, v, pools, mine) for v in value]
    return value


def authors(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k in AUTHOR_FIELDS and v is not None:
                yield str(v)
            yield from authors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from authors(v)


def as_data(event: Any) -> Any:
    return msgspec.to_builtins({k: v for k, v in event.__dict__.items() if not k.startswith("_")},
                               builtin_types=(UUID,), str_keys=True, enc_hook=str)


def test_no_command_crosses_an_organization_or_forges_an_author(ledger):
    app, pools = ledger
    chats = dict(zip(pools["CHAT"], [(ORG, ALICE), (ORG, BOB), (ORG2, CAROL)]))
    seen: dict[UUID, set[str]] = defaultdict(set)  # stream -> every author its events named
    for n in app.notifications(0, 100_000):
        seen[n.originator_id] |= set(authors(as_data(app.mapper.to_domain_event(n))))
    tally = {"recorded": 0, "refused": 0, "authored": 0}

    @given(st.sampled_from(sorted(PRINCIPALS)), st.sampled_from(range(len(TEMPLATES))), st.data())
    @settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def one(who: str, template: int, data: Any) -> None:
        p = PRINCIPALS[who]
        own = [c for c, (org, owner) in chats.items()
               if org == str(p.org) and (owner == str(p.user) or p.role != "member")]
        mine = {"USER": [str(p.user)] * 5, "ORG": [str(p.org)] * 2, "CHAT": own * 2}
        body = fill(data.draw, TEMPLATES[template], pools, mine)
        head = app.head()
        rows: list[dict[str, Any]] = []
        apply_lines(app, [json.dumps(body)], out=rows.append, prepare=lambda cmd: authorize(p, Scopes(app), cmd))
        (row,) = rows
        new = app.notifications(head, 1000)
        if not row["ok"]:
            tally["refused"] += 1
            assert new == [] or all(n.id <= head for n in new), (who, body, row)  # a refusal records nothing
            return
        tally["recorded"] += bool(new)
        if body["type"] == "create_chat":  # later examples may act on it
            chats[row["result"]["chat_id"]] = (body["organization_id"], body["owner_id"])
            pools["CHAT"].append(row["result"]["chat_id"])
        scopes = Scopes(app)
        for n in new:
            event = app.mapper.to_domain_event(n)
            resource = scopes.of(event.originator_id)
            assert resource is not None and resource.org == p.org, (who, body, type(event).__name__, resource)
            if resource.kind == "chat" and p.role == "member":
                assert resource.owner == p.user, (who, body, type(event).__name__)
            fields = as_data(event)
            named = set(authors(fields))
            tally["authored"] += bool(named)
            # the caller, or an author this stream recorded before (a promoted queued prompt keeps its author)
            assert named <= {str(p.user)} | seen[event.originator_id], (who, body, type(event).__name__, fields)
            seen[event.originator_id] |= named

    one()
    assert tally["recorded"] >= 15 and tally["refused"] >= 30 and tally["authored"] >= 15, tally  # both sides of the rules were reached
