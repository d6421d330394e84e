"""``audit`` (chats, catalogs, conversations; --at, --as-of between two events, --json, --html) and
``show --as-of``, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import timedelta

from ledger.audit.timeline import iso
from tests.audit.kit import recorded_scenario, M1, M2, ORG, cli, json_lines


_recorded = recorded_scenario


def test_audit_chat_timeline_json(db_url):
    chat_id, events = _recorded(db_url)
    rows = json_lines(cli(db_url, "audit", chat_id, "--json").output)
    assert [r["version"] for r in rows] == list(range(1, 11))
    assert [r["type"] for r in rows] == [
        "ChatCreated", "PromptQueued", "StepCommitted", "StepCommitted", "TurnFinished", "QueuedPromptPromoted",
        "StepCommitted", "InterruptRequested", "ToolCallsCanceled", "InterruptionFinished"]
    assert all(r["aggregate"] == "chat" and r["stream_id"] == chat_id for r in rows)
    assert [r["state"]["execution_state"] for r in rows] == ["R0", "R1", "R1", "R1", "R1", "R0", "R0", "I0", "I0", "W"]
    assert rows[1]["state"]["queue"] == [1] and rows[5]["state"]["queue"] == []
    assert rows[0]["state"]["policy"] == ["read", "execute"] and rows[5]["state"]["policy"] == ["execute"]
    assert rows[0]["state"]["model"] == M1 and rows[5]["state"]["model"] == M1
    assert "fallback_default" in rows[5]["summary"] and M2 in rows[5]["summary"]
    assert rows[8]["summary"].startswith("tool calls canceled (Tool execution interrupted by user)")
    assert rows[0]["time"] == iso(events[0].timestamp)


def test_audit_at_and_as_of_between_two_events(db_url):
    chat_id, events = _recorded(db_url)
    # v1 and v2 come from two commands, recorded at two different times: pick a time between them
    t1, t2 = events[0].timestamp, events[1].timestamp
    assert t1 < t2
    between = iso(t1 + (t2 - t1) / 2)
    rows = json_lines(cli(db_url, "audit", chat_id, "--as-of", between, "--json").output)
    assert [r["version"] for r in rows] == [1]
    assert json_lines(cli(db_url, "audit", chat_id, "--as-of", iso(t2), "--json").output)[-1]["version"] == 2
    assert [r["version"] for r in json_lines(cli(db_url, "audit", chat_id, "--at", "6", "--json").output)] == list(range(1, 7))
    shown = json_lines(cli(db_url, "show", chat_id, "--as-of", between, "--json").output)[0]
    assert shown["chat"]["version"] == 1 and shown["queue"] == [] and shown["chat"]["execution_state"] == "R0"
    shown = json_lines(cli(db_url, "show", chat_id, "--as-of", iso(t2), "--json").output)[0]
    assert shown["chat"]["version"] == 2 and [q["queued_message_id"] for q in shown["queue"]] == [1]
    # before the chat existed; a bad time; both options
    early = iso(t1 - timedelta(seconds=1))
    r = cli(db_url, "show", chat_id, "--as-of", early, code=1)
    assert "error: stream_not_found:" in r.output
    assert "error: invalid_time:" in cli(db_url, "audit", chat_id, "--as-of", "yesterday", code=1).output
    assert cli(db_url, "audit", chat_id, "--at", "1", "--as-of", between, code=2).exit_code == 2
    assert "error: version_not_found:" in cli(db_url, "audit", chat_id, "--at", "99", code=1).output
    assert "error: stream_not_found:" in cli(db_url, "audit", str(uuid.uuid4()), code=1).output


def test_audit_text_output(db_url):
    chat_id, _ = _recorded(db_url)
    out = cli(db_url, "audit", chat_id).output
    assert out.startswith(f"chat {chat_id}: 10 events")
    assert "QueuedPromptPromoted" in out and "-> R0 status=running queue=- policy=[execute]" in out


def test_audit_catalog(db_url):
    _recorded(db_url)
    rows = json_lines(cli(db_url, "audit", ORG, "--json").output)
    assert rows[0]["aggregate"] == "catalog" and rows[0]["type"] == "CatalogStarted"
    types = [r["type"] for r in rows]
    assert "ModelConfigUpdated" in types and "MemberAdded" in types
    assert rows[-1]["state"]["configs"][M2]["enabled"] is False
    assert rows[-1]["state"]["default"] == M1


def test_audit_conversation(db_url):
    cid = json_lines(cli(db_url, "conversation", "start", "--json").output)[0]["conversation_id"]
    cli(db_url, "conversation", "arrive", cid, "--user", "hello")
    cli(db_url, "conversation", "arrive", cid, "--user", "again")
    rows = json_lines(cli(db_url, "audit", cid, "--json").output)
    assert [r["aggregate"] for r in rows] == ["conversation"] * len(rows)
    assert rows[0]["type"] == "ConversationStarted" and len(rows) >= 3
    assert rows[-1]["state"]["box_count"] == 2
    assert [r["version"] for r in json_lines(cli(db_url, "audit", cid, "--at", "2", "--json").output)] == [1, 2]




def test_audit_html_is_self_contained(db_url, tmp_path):
    chat_id, _ = _recorded(db_url)
    page = tmp_path / "audit.html"
    out = cli(db_url, "audit", chat_id, "--html", str(page)).output
    assert out.strip() == f"wrote {page} (chat {chat_id}, 10 events)"
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html
    for forbidden in ("http://", "https://", "<script", "<link", "src=", "@import", "url("):
        assert forbidden not in html
    for section in ("Execution-state path", "Turns", "Queued prompts", "Tool calls", "Errors", "Timeline"):
        assert f">{section}</h2>" in html
    assert "read <span class='bad'>(not in policy)</span>" in html
    assert "v9 canceled: Tool execution interrupted by user" in html
    assert "policy read, execute → execute" in html
    # the path of execution states, in order
    path = html.split("<h2>Execution-state path</h2>")[1].split("</div>")[0]
    assert [s.split(">")[1] for s in path.split("<span class='st ")[1:]] == ["R0</span", "R1</span", "R0</span",
                                                                            "I0</span", "W</span"]
    # a catalog page: the timeline only
    cli(db_url, "audit", ORG, "--html", str(tmp_path / "org.html"))
    assert ">Timeline</h2>" in (tmp_path / "org.html").read_text() and ">Turns</h2>" not in (tmp_path / "org.html").read_text()
