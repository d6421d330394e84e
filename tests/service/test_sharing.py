"""Read-only sharing through the service (issue 24, point 5): a member reads another member's chat only
while its root chat is shared — the chat, its children, its events and pages — and never writes it; an
unshare ends that at the next request. A real server, on SQLite and PostgreSQL."""

from __future__ import annotations

from tests.catalog.kit import ALICE, ORG


def _code(r) -> str:
    if r.status_code == 200:
        return "ok"
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json()["error"]["code"]
    return "not_chat_owner" if r.status_code == 403 else f"status {r.status_code}"  # (a page: HTML)


def test_a_shared_root_chat_and_its_children_are_readable_by_members_and_never_writable(world):
    a = world.chat_a
    with world.client("alice") as alice, world.client("bob") as bob, world.client("carol") as carol:
        child = alice.post("/v1/commands", json={"type": "create_chat", "organization_id": ORG, "text": "sub",
                                                 "parent_chat_id": a}).json()
        assert child["ok"], child
        child_id = child["result"]["chat_id"]
        reads = [f"/v1/chats/{a}", f"/v1/chats/{a}/timeline", f"/v1/chats/{child_id}", f"/v1/chats/{a}/queue"]
        assert {_code(bob.get(p)) for p in reads} == {"not_chat_owner"}
        assert bob.get("/v1/events", params={"chat": a}).status_code == 403

        shared = alice.post("/v1/commands", json={"type": "share_chat", "chat_id": a}).json()
        assert shared["ok"], shared
        assert {_code(bob.get(p)) for p in reads} == {"ok"}
        assert bob.get("/v1/events", params={"chat": a}).status_code == 200
        listed = bob.get("/v1/chats", params={"shared": "true"}).json()["items"]
        assert [c["chat_id"] for c in listed] == [a]
        assert a not in [c["chat_id"] for c in bob.get("/v1/chats").json()["items"]]  # (their own list)
        # read-only: a write, even to a shared chat, is the owner's (or an admin's)
        title = bob.post("/v1/commands", json={"type": "set_title", "chat_id": a, "title": "mine"}).json()
        assert title["error"]["code"] == "not_chat_owner"
        unshare = bob.post("/v1/commands", json={"type": "unshare_chat", "chat_id": a}).json()
        assert unshare["error"]["code"] == "not_chat_owner"
        # another organization never reads it
        assert _code(carol.get(f"/v1/chats/{a}")) == "not_in_organization"

        assert alice.post("/v1/commands", json={"type": "unshare_chat", "chat_id": a}).json()["ok"]
        assert {_code(bob.get(p)) for p in reads} == {"not_chat_owner"}
        assert bob.get("/v1/chats", params={"shared": "true"}).json()["items"] == []
        assert alice.get(f"/v1/chats/{a}").json()["owner_id"] == ALICE
