"""What changed in a chat between two versions (issue 29, point 3: ``/ui/chats/ID/diff?from=A&to=B``): pure, over
the audit page's data at each version (``ledger.audit.page.chat_page``: its messages, edits, queued prompts, state
and metadata), so the page shows exactly what the two pages of the chat as it was would show, side by side.

* messages added (recorded after A, up to B), soft-deleted (shown at A, deleted at B) and edited (old → new: an
  edit recorded after A);
* queued prompts: queued after A, and those whose outcome changed (promoted, deleted, edited, still queued);
* the state (status, execution state, tool policy, model, queue, error…), the title and the metadata (plan mode,
  pin, workspace, sharing, labels): each value that differs, before → after.
"""

from __future__ import annotations

from typing import Any


def _text(message: dict[str, Any]) -> str:
    parts = message.get("shown_parts") or []
    return " ".join(p.get("text") or f"[{p.get('tool_name') or p['kind']}]" for p in parts) or "(no text)"


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"field": k, "before": before.get(k), "after": after.get(k)}
            for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]


def chat_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The changes from page data ``before`` (version A) to ``after`` (version B > A)."""
    a, b = before["version"], after["version"]
    old = {m["message_id"]: m for m in before["messages"]}
    added = [{"message_id": m["message_id"], "role": m["role"], "version": m.get("version"), "text": _text(m),
              "by": m.get("created_by")} for m in after["messages"] if m["message_id"] not in old]
    deleted = [{"message_id": m["message_id"], "role": m["role"], "text": _text(m)} for m in after["messages"]
               if m["deleted"] and m["message_id"] in old and not old[m["message_id"]]["deleted"]]
    edits = [e for e in after["edits"] if a < e["version"] <= b]
    queued_before = {q["queued_message_id"]: q for q in before["queued"]}
    queue = []
    for q in after["queued"]:
        was = queued_before.get(q["queued_message_id"])
        if was is None:
            queue.append({"queued_message_id": q["queued_message_id"], "change": "queued", "text": q["text"],
                          "was": None, "outcome": q["outcome"]})
        elif was["outcome"] != q["outcome"] or was["text"] != q["text"]:
            queue.append({"queued_message_id": q["queued_message_id"], "change": "changed", "text": q["text"],
                          "was": was["outcome"], "outcome": q["outcome"]})
    state = _changed({**before["now"], "title": before["title"], "policy": before["now_policy"]},
                     {**after["now"], "title": after["title"], "policy": after["now_policy"]})
    return {"from": a, "to": b, "messages_added": added, "messages_deleted": deleted, "edits": edits,
            "queue": queue, "state": state, "metadata": _changed(before["metadata"], after["metadata"]),
            "empty": not (added or deleted or edits or queue or state)}
