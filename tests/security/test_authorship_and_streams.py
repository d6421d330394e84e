"""Issue 23, points 3 and 4, through a real ``serve``: a nested author naming someone else is refused
``actor_mismatch`` and records nothing (the audit page never says the admin wrote it); a member cannot record
on another member's chat by naming it as a new chat's parent; an admin may, in their organization only."""

from __future__ import annotations

from tests.catalog.kit import ALICE, BOB

ADMIN_USER = "0b000000-0000-4000-8000-0000000000ad"


def version_of(world, chat: str) -> int:
    with world.client("admin") as c:
        return c.get(f"/v1/chats/{chat}").json()["version"]


def post(world, who: str, body: dict) -> tuple[int, dict]:
    with world.client(who) as c:
        r = c.post("/v1/commands", json=body)
        return r.status_code, r.json()


def message(author: str | None, text: str = "forged") -> dict:
    return {"role": "user", "parts": [{"type": "text", "text": text}], **({"created_by": author} if author else {})}


def test_a_nested_author_naming_someone_else_is_refused_and_records_nothing(world):
    before = version_of(world, world.chat_a)
    forged = [
        {"type": "send_message", "chat_id": world.chat_a, "message": message(ADMIN_USER)},
        {"type": "send_message", "chat_id": world.chat_a, "text": "hi", "prefix_messages": [message(BOB)]},
        {"type": "commit_step", "chat_id": world.chat_a, "messages": [message(ADMIN_USER)]},
        {"type": "create_chat", "organization_id": "0a000000-0000-4000-8000-000000000001", "owner_id": ALICE,
         "message": message(ADMIN_USER)},
    ]
    for body in forged:
        status, answer = post(world, "alice", body)
        assert status == 403 and answer["error"]["code"] == "actor_mismatch", (body, answer)
    assert version_of(world, world.chat_a) == before
    # the caller's own name, or none, is recorded
    status, answer = post(world, "alice", {"type": "send_message", "chat_id": world.chat_a, "message": message(ALICE, "mine")})
    assert status == 200, answer


def test_a_member_cannot_record_on_another_members_chat_through_a_child(world):
    org = "0a000000-0000-4000-8000-000000000001"
    before = version_of(world, world.chat_b)
    status, answer = post(world, "alice", {"type": "create_chat", "organization_id": org, "owner_id": ALICE,
                                           "text": "child", "parent_chat_id": world.chat_b})
    assert status == 403 and answer["error"]["code"] == "not_chat_owner", answer
    assert version_of(world, world.chat_b) == before  # no ChildChatCreated on bob's chat
    status, answer = post(world, "alice", {"type": "create_chat", "organization_id": org, "owner_id": ALICE,
                                           "text": "child", "parent_chat_id": world.chat_a})
    assert status == 200, answer  # under her own chat
    status, answer = post(world, "admin", {"type": "create_chat", "organization_id": org, "owner_id": ADMIN_USER,
                                           "text": "child", "parent_chat_id": world.chat_b})
    # an admin of the organization passes the rule (the catalog then refuses an owner who is no member of it)
    assert status == 403 and answer["error"]["code"] == "not_organization_member", answer
    assert version_of(world, world.chat_b) == before
    status, answer = post(world, "carol", {"type": "create_chat", "organization_id": "0a000000-0000-4000-8000-000000000002",
                                           "owner_id": "0b000000-0000-4000-8000-0000000000c0", "text": "child",
                                           "parent_chat_id": world.chat_a})
    assert status == 403 and answer["error"]["code"] == "not_in_organization", answer
