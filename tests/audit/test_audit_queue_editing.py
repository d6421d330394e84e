"""The audit of a chat whose queued prompt was edited: the timeline's summaries and states, ``explain
--queued-message`` (new text, overrides, editing begun and ended, the pause and its resume, the reasoning
effort carried into history) and the audit page, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from ledger.chat import events as ev
from ledger.store import open_app
from tests.audit.kit import ALICE, M1, ORG, cli, json_lines
from tests.catalog.kit import org_with, run
from tests.chat.helpers import record_raw

EDITOR = "5b1d7e9a-2c4f-4a6b-9d8e-0000000ed170"


def edited_chat(url: str) -> str:
    """v1 created; v2 prompt #1 queued; v3 prompt #2 queued; v4 editing #1 begun; v5-v6 the turn ends at
    it: paused; v7 #1's new text with reasoning effort high; v8 editing ended; v9 resumed; v10 #1
    promoted (effort high carried)."""
    app = open_app(url)
    try:
        org_with(app)
        chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="Fix the build")["chat_id"]
        run(app, type="send_message", chat_id=chat_id, text="then the docs")
        run(app, type="send_message", chat_id=chat_id, text="and the changelog")
        run(app, type="edit_queued_message", chat_id=chat_id, queued_message_id=1, editing=True, actor=EDITOR)
        run(app, type="finish_turn", chat_id=chat_id)
        run(app, type="edit_queued_message", chat_id=chat_id, queued_message_id=1, text="then the API docs",
            reasoning_effort="high", actor=EDITOR)
        run(app, type="edit_queued_message", chat_id=chat_id, queued_message_id=1, editing=False, actor=EDITOR)
    finally:
        app.close()
    return chat_id


def test_the_timeline_records_the_edit_the_pause_and_the_resume(db_url):
    chat_id = edited_chat(db_url)
    rows = json_lines(cli(db_url, "audit", chat_id, "--json").output)
    assert [r["type"] for r in rows] == [
        "ChatCreated", "PromptQueued", "PromptQueued", "QueuedPromptEditBegun", "TurnFinished", "ChatPaused",
        "QueuedPromptEdited", "QueuedPromptEditEnded", "ChatResumed", "QueuedPromptPromoted"]
    assert all(r["topic"] == f"chat-ledger:chat.{r['type']}" for r in rows)
    assert [r["state"]["execution_state"] for r in rows] == ["R0", "R1", "R1", "R1P", "R1P", "P", "P", "R1", "R1", "R1"]
    assert [r["state"]["editing"] for r in rows] == [None, None, None, 1, 1, 1, 1, None, None, None]
    summaries = [r["summary"] for r in rows]
    assert summaries[3] == "editing of queued prompt #1 begun"
    assert summaries[5] == "paused at queued prompt #1 (under edit): nothing promoted"
    assert summaries[6] == "queued prompt #1 edited: 'then the API docs'; reasoning effort high"
    assert summaries[7] == "editing of queued prompt #1 ended (ended)"
    assert summaries[8] == "resumed (edit ended #1) -> running"
    assert summaries[9].endswith("; reasoning effort high") and rows[9]["state"]["queue"] == [2]
    assert rows[6]["actor"] == EDITOR


def test_explain_the_edited_queued_prompt(db_url):
    chat_id = edited_chat(db_url)
    data = json.loads(cli(db_url, "explain", chat_id, "--queued-message", "1", "--json").output)
    assert data["text"] == "then the docs"  # as queued
    assert [(x["version"], x["what"]) for x in data["edits"]] == [
        (4, "editing begun"), (7, "content"), (8, "editing ended (ended)")]
    assert data["edits"][1]["text"] == "then the API docs" and data["edits"][1]["reasoning_effort"] == "high"
    assert all(x["actor"] == EDITOR for x in data["edits"])
    (pause,) = data["pauses"]
    assert pause["version"] == 6 and pause["resumed"]["version"] == 9 and pause["resumed"]["cause"] == "edit_ended"
    o = data["outcome"]
    assert (o["how"], o["version"], o["reasoning_effort"]) == ("promoted", 10, "high")
    assert o["why"] == "the paused chat resumed (edit ended): the ready head is promoted"
    assert o["model_resolution"]["model_config_id"] == M1
    text = cli(db_url, "explain", chat_id, "--queued-message", "1").output
    for line in ("content replaced at version 7: 'then the API docs'; reasoning effort high",
                 "the chat paused at it at version 6 (a turn ended while it was under edit); resumed at version 9 "
                 "(edit ended)",
                 "reasoning effort high carried into history"):
        assert line in text
    second: Any = json.loads(cli(db_url, "explain", chat_id, "--queued-message", "2", "--json").output)
    assert second["outcome"] is None and second["edits"] == [] and second["pauses"] == []


def test_the_audit_page_shows_the_pause_and_the_edits(db_url, tmp_path):
    chat_id = edited_chat(db_url)
    page = tmp_path / "audit.html"
    cli(db_url, "audit", chat_id, "--html", str(page))
    html = page.read_text(encoding="utf-8")
    path = html.split("<h2>Execution-state path</h2>")[1].split("</div>")[0]
    assert [s.split(">")[1] for s in path.split("<span class='st ")[1:]] == [
        "R0</span", "R1</span", "R1P</span", "P</span", "R1</span"]
    assert ".P{background:" in html
    assert ("v4 editing begun<br>v7 content: then the API docs<br>v8 editing ended (ended)<br>"
            "v6 paused → v9 resumed (edit ended)") in html
    assert "reasoning effort high" in html and "#1 (under edit)" in html


def test_events_verify_accepts_queue_editing_and_reports_an_imported_invalid_state(db_url):
    chat_id = edited_chat(db_url)
    app = open_app(db_url)
    try:
        # a second chat left paused with its head under edit: the queue view shows ``editing_since``
        other = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="second")["chat_id"]
        run(app, type="send_message", chat_id=other, text="queued")
        run(app, type="edit_queued_message", chat_id=other, queued_message_id=1, editing=True)
        run(app, type="finish_turn", chat_id=other)
    finally:
        app.close()
    cli(db_url, "projections", "catch-up")
    report = json.loads(cli(db_url, "events", "verify", "--json").stdout)
    assert report["ok"] is True and report["anomalies"] == []
    views = {p["projection"]: p for p in report["projections"]}
    assert views["chat_views"]["result"] == "equal"
    (row,) = json_lines(cli(db_url, "queue", other, "--json").output)
    assert row["editing_since"] is not None and row["queued_message_id"] == 1
    (status,) = json_lines(cli(db_url, "status", other, "--json").output)
    assert (status["status"], status["execution_state"]) == ("paused", "P")
    # an imported event that leaves a chat invalid is reported; reconcile repairs it
    app = open_app(db_url)
    try:
        record_raw(app, chat_id, ev.ArchivedSet, archived=True)  # archives a running chat
    finally:
        app.close()
    report = json.loads(cli(db_url, "events", "verify", "--json", code=1).stdout)
    (anomaly,) = report["anomalies"]
    assert anomaly["stream_id"] == chat_id and anomaly["check"] == "invariant"
    assert "invalid execution state Invalid (status running, queue 1, archived True)" in anomaly["reason"]
    app = open_app(db_url)
    try:
        assert run(app, type="reconcile_invalid_state", chat_id=chat_id)["execution_state"] == "E1"
    finally:
        app.close()
