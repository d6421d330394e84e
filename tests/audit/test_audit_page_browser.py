"""Issue 16 point 4: the audit page, rendered in headless Chromium (Debian's ``chromium``, driven by
Playwright with ``executable_path``; skipped with a message where either is missing), checked for its
structure: every in-page link points at an element that exists, ids are unique, each event, message, tool
call, result and execution record has its anchor, and what an auditor reads is there as text."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from commands.cli.main import main
from tests.cli.test_cli import jsonl

CHROMIUM = os.environ.get("CHAT_LEDGER_CHROMIUM", "/usr/bin/chromium")
ORG, ME = "8a6f4d2e-1b3c-4d5e-8f70-00000000a0d1", "5b1d7e9a-2c4f-4a6b-9d8e-00000000a0d1"
CHAT, CHILD = "c0ffee00-0000-4000-8000-000000000001", "c0ffee01-0000-4000-8000-000000000002"


def browser() -> Any:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; CHAT_LEDGER_CHROMIUM names another)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (pip install -e '.[test]')")
    return sync_playwright


def record(url: str) -> None:
    call = {"type": "tool-call", "tool_call_id": "call_a", "tool_name": "read", "args": {"path": "<b>README</b>"}}
    other = {"type": "tool-call", "tool_call_id": "call_b", "tool_name": "execute", "args": {"cmd": "make"}}
    lines = jsonl(
        {"type": "add_organization_member", "organization_id": ORG, "user_id": ME},
        {"type": "create_model_config", "organization_id": ORG, "provider": "anthropic", "model": "claude-sonnet-4-5",
         "display_name": "Sonnet", "context_limit": 200000, "is_default": True},
        {"type": "create_chat", "chat_id": CHAT, "organization_id": ORG, "owner_id": ME, "text": "Fix the build",
         "title": "Build", "actor": ME},
        {"type": "commit_step", "chat_id": CHAT, "messages": [{"role": "assistant", "parts": [
            {"type": "text", "text": "Let me look."}, call, other]}]},
        {"type": "claim_tool_call", "chat_id": CHAT, "tool_call_id": "call_b", "tool_name": "execute",
         "assistant_message_id": 2},
        {"type": "commit_step", "chat_id": CHAT, "messages": [{"role": "tool", "parts": [
            {"type": "tool-result", "tool_call_id": "call_a", "tool_name": "read", "result": {"text": "all good"}},
            {"type": "tool-result", "tool_call_id": "call_b", "tool_name": "execute", "result": "exit 2",
             "is_error": True}]}]},
        {"type": "commit_step", "chat_id": CHAT, "messages": [{"role": "assistant", "parts": [
            {"type": "text", "text": "Fixed."}]}]},
        {"type": "finish_turn", "chat_id": CHAT},
        {"type": "edit_message", "chat_id": CHAT, "message_id": 1, "text": "Fix the build, then the docs"},
        {"type": "create_chat", "chat_id": CHILD, "organization_id": ORG, "owner_id": ME, "text": "sub task",
         "parent_chat_id": CHAT},
    )
    out = CliRunner().invoke(main, ["--db", url, "apply", "-"], input=lines)
    refused = [r for r in map(json.loads, out.stdout.splitlines()) if not r["ok"]]
    assert not refused, refused


def test_the_audit_page_in_chromium(sqlite_url: str, tmp_path: Path) -> None:
    sync_playwright = browser()
    record(sqlite_url)
    page_file = tmp_path / f"{CHAT}.html"
    done = CliRunner().invoke(main, ["--db", sqlite_url, "audit", CHAT[:10], "--html", str(page_file)])
    assert done.exit_code == 0, done.output
    CliRunner().invoke(main, ["--db", sqlite_url, "audit", CHILD, "--html", str(tmp_path / f"{CHILD}.html")])
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = b.new_page(viewport={"width": 1280, "height": 900})
            page.goto(page_file.as_uri())
            ids = page.eval_on_selector_all("[id]", "els => els.map(e => e.id)")
            hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
            text = page.inner_text("body")
            page.screenshot(path=str(tmp_path / "audit.png"), full_page=True)
            # the parent link leads to the child's page and back
            page.goto((tmp_path / f"{CHILD}.html").as_uri())
            parent = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
            scripts = page.eval_on_selector_all("script, link, img", "els => els.length")
        finally:
            b.close()
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    anchors = [h[1:] for h in hrefs if h.startswith("#")]
    assert anchors and not set(anchors) - set(ids)  # every in-page link resolves
    files = [h for h in hrefs if not h.startswith("#")]
    assert files == [f"{CHILD}.html"]  # the child chat, a page beside this one
    assert f"{CHAT}.html" in parent and scripts == 0
    versions = [i for i in ids if i.startswith("ev-")]
    assert versions == [f"ev-{v}" for v in range(1, len(versions) + 1)] and len(versions) >= 8
    assert {"msg-1", "msg-2", "msg-3", "call-call_a", "call-call_b", "result-call_a", "result-call_b"} <= set(ids)
    assert any(i.startswith("exec-") for i in ids)  # the claimed call's execution record
    assert "#result-call_a" in hrefs and "#call-call_a" in hrefs and any(h.startswith("#exec-") for h in hrefs)
    for said in ("Fix the build", "Let me look.", '"path": "<b>README</b>"', '"text": "all good"', "exit 2",
                 "“Fix the build” → “Fix the build, then the docs”", "anthropic/claude-sonnet-4-5 (Sonnet)",
                 "Legend", "running, queue empty", "child chats", "Execution-state path", "Timeline", "ToolCallClaimed: claim 1: run"):
        assert said in text, said
    assert "<b>README</b>" not in page_file.read_text(encoding="utf-8")  # escaped, never markup
    assert ME[:8] in text  # the actor, at its short id


def test_catalog_and_conversation_pages_are_readable(sqlite_url: str, tmp_path: Path) -> None:
    record(sqlite_url)
    runner = CliRunner()
    conv = json.loads(runner.invoke(main, ["--db", sqlite_url, "conversation", "start", "--json"]).stdout)
    for stream, kind in ((ORG, "catalog"), (conv["conversation_id"], "conversation")):
        out = runner.invoke(main, ["--db", sqlite_url, "audit", stream, "--html", "-"])
        assert out.exit_code == 0, out.output
        html = out.stdout
        assert f"<h1>Audit of {kind} <code>{stream}</code></h1>" in html and "<h2>Now</h2>" in html
        assert ">Timeline</h2>" in html and ">Turns</h2>" not in html
        assert "None" not in html and "{'" not in html
