"""Issue 29, point 4: the organization's chat list filtered (status, owner, model, a tool used, time range, with an
error or unresolved calls), newest activity first, paged by cursor; a chat family shown as a tree — in Chromium
through a real server (screenshots to docs/ui/), and the listing's paging by hypothesis on both backends."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.chatlist import ChatListFilters, chat_list
from commands.handler import command_from_dict, execute
from commands.views import catch_up_views
from projections import open_backend
from tests.audit.test_audit_page_browser import browser
from tests.catalog.kit import ALICE, BOB, ORG, org_with
from tests.service.test_ui import command, signed_in_page

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"


def record_family(world: Any) -> dict[str, str]:
    """ALICE's chats: a parent with an unresolved `execute` call and a child, one that failed; BOB's one chat."""
    out = {"bobs": command(world, "bob", type="create_chat", organization_id=ORG, owner_id=BOB,
                           text="Plan the release", title="Bob's release plan")["chat_id"]}
    parent = out["parent"] = command(world, "alice", type="create_chat", organization_id=ORG, owner_id=ALICE,
                                     text="Clean the build", title="Parent: clean the build")["chat_id"]
    command(world, "alice", type="commit_step", chat_id=parent, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "call_x", "tool_name": "execute", "args": {"cmd": "make clean"}}]}])
    out["child"] = command(world, "alice", type="create_chat", organization_id=ORG, owner_id=ALICE,
                           parent_chat_id=parent, text="Read the logs", title="Child: read the logs")["chat_id"]
    failed = out["failed"] = command(world, "alice", type="create_chat", organization_id=ORG, owner_id=ALICE,
                                     text="Deploy", title="Failed deploy")["chat_id"]
    command(world, "alice", type="finish_error", chat_id=failed, error={"message": "provider unavailable",
                                                                          "kind": "provider"})
    return out


def listed(page: Any) -> set[str]:
    return set(page.eval_on_selector_all("#chats a[href^='/ui/chats/'] code", "els => els.map(e => e.title)"))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_chat_list_filters_and_the_family_tree_in_chromium(world):
    sync_playwright = browser()
    chats = record_family(world)
    base = f"{world.server.base}/ui/orgs/{ORG}/chats"
    SHOTS.mkdir(exist_ok=True)
    with signed_in_page(sync_playwright, world, "admin") as page:  # an admin sees every chat of the organization
        page.goto(base)
        everything = listed(page)
        assert {chats["parent"], chats["child"], chats["failed"], chats["bobs"]} <= everything
        # a tool used, through the form
        page.fill("#filters input[name=tool]", "execute")
        page.click("#filters button[type=submit]")
        page.wait_for_url("**tool=execute**")
        assert chats["parent"] in listed(page) and not {chats["child"], chats["failed"], chats["bobs"]} & listed(page)
        page.screenshot(path=str(SHOTS / "chats-filtered.png"), full_page=True)
        page.goto(f"{base}?has=error")
        assert chats["failed"] in listed(page) and chats["parent"] not in listed(page)
        page.goto(f"{base}?has=unresolved")
        assert chats["parent"] in listed(page) and chats["failed"] not in listed(page)
        page.goto(f"{base}?owner={BOB}")
        assert chats["bobs"] in listed(page) and not {chats["parent"], chats["failed"]} & listed(page)
        page.goto(f"{base}?status=error&owner={ALICE}")
        assert listed(page) == {chats["failed"]}
        page.goto(f"{base}?until=2000-01-01")
        assert listed(page) == set()
        # the search page: a ranked hit with its snippet, linking to the message's anchor
        page.goto(f"{world.server.base}/ui/search?q=clean&tool=execute")
        hit = page.locator(f"a[href^='/ui/chats/{chats['parent']}#msg-']").first
        assert hit.count() == 1 and "make clean" in page.inner_text("body")
        page.screenshot(path=str(SHOTS / "search.png"), full_page=True)
        # the family, from the child's page: the parent above it, each linked
        page.goto(f"{world.server.base}/ui/chats/{chats['child']}")
        tree = page.inner_text("#family")
        assert "Parent: clean the build" in tree and "Child: read the logs (this chat)" in tree
        assert page.locator(f"#family a[href='/ui/chats/{chats['parent']}']").count() == 1
        page.screenshot(path=str(SHOTS / "chat-family.png"))
    with world.client("alice") as c:  # a member's list holds only their own chats, whatever the filter
        r = c.get(f"/ui/orgs/{ORG}/chats", params={"owner": BOB})
        assert chats["bobs"] not in r.text


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 9), limit=st.integers(1, 4), failing=st.sets(st.integers(0, 8)))
def test_pages_list_each_chat_once_newest_first(app, db_url, n, limit, failing):
    """Paging by cursor through a filtered list gives each matching chat once, in order of last activity."""
    if app.load(uuid.UUID(ORG)) is None:  # (the ledger is the test's, shared by its examples)
        org_with(app)
    owner = str(uuid.uuid4())  # each example's chats are its own owner's
    execute(app, command_from_dict({"type": "add_organization_member", "organization_id": ORG, "user_id": owner}))
    scope = {"organization_id": ORG, "owner_id": owner}
    ids = []
    for i in range(n):
        cid = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": owner,
                                              "text": f"chat {i}"}))["chat_id"]
        if i in failing:
            execute(app, command_from_dict({"type": "finish_error", "chat_id": cid,
                                            "error": {"message": "boom", "kind": "provider"}}))
        ids.append(cid)
    backend = open_backend(db_url)
    try:
        catch_up_views(app, backend)
        for f in (ChatListFilters(), ChatListFilters(has="error")):
            seen, cursor = [], None
            while True:
                got = chat_list(backend, scope, f, limit, cursor)
                seen += got.rows
                cursor = got.next_cursor
                if cursor is None:
                    break
            expect = [i for n_, i in enumerate(ids) if f.has is None or n_ in failing]
            assert sorted(r["chat_id"] for r in seen) == sorted(expect) and len(seen) == got.matched
            times = [(r["updated_at"], r["chat_id"]) for r in seen]
            assert times == sorted(times, reverse=True)
        until = ChatListFilters(until=min(r["updated_at"] for r in backend.query("chat_views", "chat_status",
                                                                                 where=scope)) - timedelta(seconds=1))
        assert chat_list(backend, scope, until).rows == []
    finally:
        backend.close()
