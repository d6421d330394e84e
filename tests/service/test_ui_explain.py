"""Issue 29, point 2, in Chromium through a real server: "why" as sentences with links — the model a turn ran on
and why (the organization's default, since the catalog version that made it so), its steps' settings, the tool
policy — "as it was then" beside "with today's settings" once the deployment's limits changed, the links to the
chat as it was at a version, and the report's JSON one click away. Screenshot to docs/ui/."""

from __future__ import annotations

import re
from pathlib import Path
import pytest

from ledger.audit.readable import segments
from tests.audit.test_audit_page_browser import browser
from tests.catalog.kit import ALICE, ORG
from tests.service.test_ui import command, signed_in_page

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"


def test_sentences_link_versions_and_messages() -> None:
    said = segments("tool call c1 was made in assistant message 2 at version 3, closed at version 14")
    assert [s.get("kind") for s in said] == [None, "message", None, "version", None, "version"]
    assert [s["ref"] for s in said if s["kind"]] == [2, 3, 14]
    assert "".join(s["text"] for s in said) == "tool call c1 was made in assistant message 2 at version 3, closed at version 14"
    assert segments("no links here") == [{"text": "no links here", "kind": None, "ref": None}]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_why_of_a_turn_in_sentences_in_chromium(world):
    sync_playwright = browser()
    chat = command(world, "alice", type="create_chat", organization_id=ORG, owner_id=ALICE, text="Check the disk",
                title="Why chat")["chat_id"]
    command(world, "alice", type="commit_step", chat_id=chat, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "call_d", "tool_name": "execute", "args": {"cmd": "df -h"}}]}])
    command(world, "deployer", type="set_deployment_settings", limits={"max_tool_output_bytes": 4096})  # today's differ
    SHOTS.mkdir(exist_ok=True)
    with signed_in_page(sync_playwright, world, "alice") as page:
        page.goto(f"{world.server.base}/ui/chats/{chat}")
        turn = re.search(r"/explain\?turn=([0-9a-f-]+)", page.content()).group(1)
        page.goto(f"{world.server.base}/ui/chats/{chat}/explain?turn={turn}")
        why = page.inner_text("#why")
        assert "It ran on " in why and "the organization's default, since v" in why
        assert "of the organization's catalog" in why and "compaction at 70%" in why
        assert "started at version 1" in page.inner_text("#headline")
        then_now = page.inner_text("#differences")
        assert "max_tool_output_bytes" in then_now and "4096" in then_now and "1048576" in then_now
        assert not page.locator("#explain").is_visible()  # the JSON: one click away
        page.screenshot(path=str(SHOTS / "explain-turn.png"), full_page=True)
        page.click("#json summary")
        assert page.locator("#explain").is_visible() and "model_resolution" in page.inner_text("#explain")
        page.click("#headline a:has-text('version 1')")  # the chat as it was then
        page.wait_for_url(f"**/ui/chats/{chat}?at=1")
        assert "as it was at version 1" in page.inner_text("#versions")
        # a tool call's why: its message linked to the chat's anchor
        page.goto(f"{world.server.base}/ui/chats/{chat}/explain?tool_call=call_d")
        assert page.locator("#why a[href$='#msg-2']").count() + page.locator("#headline a[href$='#msg-2']").count() >= 1
