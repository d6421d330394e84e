"""Issue 29, points 3 and 5, in Chromium through a real server: a chat as it was at a version (``?at=N``, and
``?as_of=TIME``), stepped through with its links and its version slider; what one step changed (``/diff``: a
message edited old → new, the one it replaced soft-deleted, the queue, the title); and the chat's evidence bundle
downloaded from its page (a zip of the page, the events as stored, their inclusion proofs and the checkpoint). The
screenshots are written to docs/ui/, which docs/ui.md shows."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.audit.test_audit_page_browser import browser
from tests.catalog.kit import ALICE, ORG
from tests.service.test_ui import command, error_code, signed_in, signed_in_page

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"


def record_edited_chat(world: Any) -> str:
    """ALICE's chat: a prompt, an answer, the prompt edited (the old one and the answer soft-deleted), a
    queued prompt, a new title."""
    chat_id = command(world, "alice", type="create_chat", organization_id=ORG, owner_id=ALICE,
                      text="Summarize the incident report", title="Incident review")["chat_id"]  # v1
    command(world, "alice", type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "text", "text": "The outage lasted 40 minutes."}]}])  # v2
    command(world, "alice", type="edit_message", chat_id=chat_id, message_id=1,
            text="Summarize the incident report for executives")
    command(world, "alice", type="send_message", chat_id=chat_id, text="Then list the follow-ups",
            busy_behavior="queue")
    command(world, "alice", type="set_title", chat_id=chat_id, title="Incident review (executive)")
    return chat_id


def version_of(url: str) -> int | None:
    at = parse_qs(urlparse(url).query).get("at")
    return int(at[0]) if at else None


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_chat_as_it_was_what_changed_and_its_evidence_in_chromium(world, tmp_path):
    sync_playwright = browser()
    chat_id = record_edited_chat(world)
    with signed_in(world, "alice") as c:  # the pages without a browser first: the server's own answers
        latest = int(c.get(f"/ui/chats/{chat_id}").text.split('data-version="')[1].split('"')[0])
        assert c.get(f"/ui/chats/{chat_id}", params={"at": latest + 1}).status_code == 404  # version_not_found
        assert c.get(f"/ui/chats/{chat_id}/diff", params={"from": 3, "to": 2}).status_code == 400
    SHOTS.mkdir(exist_ok=True)
    with signed_in_page(sync_playwright, world, "alice", accept_downloads=True) as page:
        # the chat as it was at version 2: the first prompt and its answer, not yet edited; not live
        page.goto(f"{world.server.base}/ui/chats/{chat_id}?at=2")
        body = page.inner_text("body")
        assert "as it was at version 2" in body and "The outage lasted 40 minutes." in body
        assert "for executives" not in body and page.locator("script[src*='live.js']").count() == 0
        assert page.locator("#page").get_attribute("data-version") == "2"
        page.screenshot(path=str(SHOTS / "chat-at-version.png"), full_page=True)
        # one step on: the edit (recorded as the old prompt and its answer soft-deleted, then the new prompt)
        page.click("#next")
        page.wait_for_url("**at=3")
        assert page.locator(".msg.deleted").count() == 2 and "for executives" not in page.inner_text("#page")
        page.click("#changed")  # what version 3 changed
        page.wait_for_url("**/diff?from=2&to=3")
        assert "Soft-deleted" in page.inner_text("body")
        assert "The outage lasted 40 minutes." in " ".join(page.locator(".msg.deleted").all_inner_texts())
        page.goto(f"{world.server.base}/ui/chats/{chat_id}?at=4")
        assert "for executives" in page.inner_text("#page")
        # what the edit changed, old -> new
        page.goto(f"{world.server.base}/ui/chats/{chat_id}/diff?from=2&to=4")
        assert "Summarize the incident report" in page.inner_text(".edited .was")
        assert "for executives" in page.inner_text(".edited .now")
        assert "for executives" in page.inner_text(".msg.added")
        page.screenshot(path=str(SHOTS / "chat-diff.png"), full_page=True)
        # since version 4, to the latest: the queued prompt and the new title
        page.goto(f"{world.server.base}/ui/chats/{chat_id}/diff?from=4")
        since = page.inner_text("body")
        assert "Then list the follow-ups" in page.inner_text("#diff-queue")
        assert "Incident review (executive)" in page.inner_text("#diff-state")
        # the slider: version 1
        page.goto(f"{world.server.base}/ui/chats/{chat_id}?at=4")
        page.locator("input[name=at]").fill("1")
        page.click("#versions button[type=submit]")
        page.wait_for_url("**at=1")
        assert version_of(page.url) == 1 and "The outage" not in page.inner_text("#page")
        # as of a time before the chat: refused, and a page says why
        page.goto(f"{world.server.base}/ui/chats/{chat_id}?as_of=2000-01-01T00:00:00Z")
        assert "stream_not_found" in page.inner_text("body") or "had no events" in page.inner_text("body")
        # the latest version, with the evidence bundle of a chat the published checkpoint covers
        page.goto(f"{world.server.base}/ui/chats/{world.chat_a}")
        assert "the latest (live)" in page.inner_text("#versions")
        with page.expect_download() as got:
            page.click("#bundle")
        path = tmp_path / "bundle.zip"
        got.value.save_as(path)
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as z:
        names = z.namelist()
        root = f"chat-{world.chat_a}/"
        manifest = json.loads(z.read(root + "bundle.json"))
        assert {root + n for n in ("checkpoint.json", "events.jsonl", "page.html", "bundle.json")} <= set(names)
        assert manifest["versions"] >= 1 and manifest["stream_id"] == str(world.chat_a)
        assert sum(n.startswith(root + "proofs/v") for n in names) == manifest["versions"]
    assert since  # (read above)


@pytest.fixture
def long_chats(monkeypatch):
    """Chats of more than 8 events count as long for the server the test starts (it inherits the environment)."""
    monkeypatch.setenv("CHAT_LEDGER_UI_LONG_CHAT", "8")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_long_chat_opens_on_its_latest_events_in_chromium(long_chats, world):
    """Issue 29, point 3: a long chat's page opens on a window of its latest events and the messages they recorded
    (read from the end of its stream, not the whole chat), with the earlier windows, any version and the whole page
    a click away."""
    sync_playwright = browser()
    chat_id = command(world, "alice", type="create_chat", organization_id=ORG, owner_id=ALICE,
                      text="question 0")["chat_id"]
    for i in range(1, 7):  # 3 events a round
        command(world, "alice", type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
            {"type": "text", "text": f"answer {i}"}]}])
        command(world, "alice", type="finish_turn", chat_id=chat_id)
        command(world, "alice", type="send_message", chat_id=chat_id, text=f"question {i}")
    with signed_in_page(sync_playwright, world, "alice") as page:
        page.goto(f"{world.server.base}/ui/chats/{chat_id}")
        window = page.inner_text("#window")
        latest = int(window.split(" of ")[1].split(",")[0])
        assert f"events {latest - 7}–{latest} of {latest}" in window
        shown = " ".join(page.locator(".msg").all_inner_texts())  # (the title is the first prompt's: not a message)
        assert "question 6" in shown and "answer 6" in shown and "question 0" not in shown
        assert page.locator("#events tr").count() == 1 + 8
        page.screenshot(path=str(SHOTS / "chat-long-window.png"), full_page=True)
        page.click("#earlier")
        page.wait_for_url(f"**before={latest - 8}")
        assert f"events {latest - 15}–{latest - 8} of {latest}" in page.inner_text("#window")
        page.click("#full")
        page.wait_for_url("**full=true")
        assert "question 0" in page.inner_text("#page")  # the whole page, every event


def test_the_new_chat_pages_refuse_whoever_may_not_read_the_chat(world):
    """The pages this issue adds read a chat like its page does (``Scopes.check_read``): another member's chat is
    ``not_chat_owner``, another organization's ``not_in_organization`` — as it was, what changed, its evidence,
    a long chat's window — and a refused page says so without the chat's content."""
    paths = ["", "?at=1", "?before=1", "?full=true", "/diff?from=1", "/bundle"]
    for who, chat, code in (("alice", world.chat_b, "not_chat_owner"), ("alice", world.chat_c, "not_in_organization")):
        with signed_in(world, who) as c:
            for path in paths:
                r = c.get(f"/ui/chats/{chat}{path}")
                assert r.status_code == 403 and error_code(r) == code, (who, path, r.status_code)
    with signed_in(world, "bob") as c:  # the owner reads them
        assert c.get(f"/ui/chats/{world.chat_b}?at=1").status_code == 200
        assert c.get(f"/ui/chats/{world.chat_b}/diff", params={"from": 0}).status_code == 200
