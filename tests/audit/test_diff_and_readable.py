"""The pure parts of the auditor's pages (issue 29), by hypothesis: what changed between two versions of a chat
(``ledger.audit.diff``) and a decision's sentences with links (``ledger.audit.readable``)."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.audit.diff import chat_diff
from ledger.audit.readable import segments

ACTIONS = st.sampled_from([
    {"type": "send_message", "text": "more"},
    {"type": "commit_step", "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "said"}]}]},
    {"type": "finish_turn"},
    {"type": "send_message", "text": "queued", "busy_behavior": "queue"},
    {"type": "edit_message", "message_id": 1, "text": "edited"},
    {"type": "set_title", "title": "renamed"},
    {"type": "delete_queued_message", "queued_message_id": 1},
])


def pages(app: Any, chat: Any) -> list[dict[str, Any]]:
    from commands.audit_page import page_data
    from commands.queries import audit_timeline, chat_events

    events = chat_events(app, chat)
    return [page_data(app, chat, events, v, audit_timeline(app, chat, events, v), evidence=None)
            for v in range(1, events[-1].originator_version + 1)]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(ACTIONS, min_size=1, max_size=8), data=st.data())
def test_a_diff_lists_exactly_what_the_later_page_adds_removes_and_changes(memory_app, steps, data) -> None:
    from commands.handler import command_from_dict, execute
    from ledger.errors import LedgerError
    from tests.catalog.kit import ALICE, ORG, org_with

    if memory_app.load(uuid.UUID(ORG)) is None:
        org_with(memory_app)
    chat = execute(memory_app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": ALICE,
                                                  "text": "first"}))["chat_id"]
    for step in steps:
        try:
            execute(memory_app, command_from_dict({"chat_id": chat, **step}))
        except LedgerError:
            pass
    seen = pages(memory_app, uuid.UUID(chat))
    a = data.draw(st.integers(1, len(seen)))
    b = data.draw(st.integers(a, len(seen)))
    diff = chat_diff(seen[a - 1], seen[b - 1])
    before = {m["message_id"]: m for m in seen[a - 1]["messages"]}
    after = seen[b - 1]["messages"]
    assert [m["message_id"] for m in diff["messages_added"]] == [m["message_id"] for m in after
                                                                  if m["message_id"] not in before]
    assert {m["message_id"] for m in diff["messages_deleted"]} == {
        m["message_id"] for m in after if m["deleted"] and m["message_id"] in before
        and not before[m["message_id"]]["deleted"]}
    assert all(a < e["version"] <= b for e in diff["edits"])
    assert chat_diff(seen[b - 1], seen[b - 1])["empty"]  # a page differs from itself in nothing
    # stepping one version at a time adds up to the whole step: the same messages added, in the same order
    stepped = [m["message_id"] for v in range(a, b) for m in chat_diff(seen[v - 1], seen[v])["messages_added"]]
    assert stepped == [m["message_id"] for m in diff["messages_added"]]
    assert sum(len(chat_diff(seen[v - 1], seen[v])["edits"]) for v in range(a, b)) == len(diff["edits"])


@settings(max_examples=300)
@given(words=st.lists(st.one_of(st.sampled_from(["version", "message", "assistant message", "at", "of", "turn"]),
                                st.integers(0, 10**6).map(str), st.text("abc ,()", max_size=6)), max_size=12))
def test_sentences_keep_their_text_and_link_each_version_and_message(words) -> None:
    sentence = " ".join(words)
    said = segments(sentence)
    assert "".join(s["text"] for s in said) == sentence
    for s in said:
        if s["kind"] == "version":
            assert s["text"] == f"version {s['ref']}"
        elif s["kind"] == "message":
            assert s["text"].endswith(f"message {s['ref']}")
        else:
            assert s["ref"] is None
