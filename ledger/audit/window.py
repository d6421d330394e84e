"""The first screen of a long chat (issue 29, point 3): its latest events and messages, not the whole chat.

The full audit page folds and explains every event of a chat; for a chat of tens of thousands of events that takes
a minute. A long chat's page therefore opens on a window — the chat's facts as its view row holds them, and its last
``size`` events with the messages they recorded — read from the end of its stream; earlier windows, the chat as it
was at any version and the whole page are links. Pure: from the view row and the window's events.
"""

from __future__ import annotations

from typing import Any

from ledger.chat.values import TextPart, ToolCallPart, ToolResultPart

#: events a window shows
WINDOW = 200


def _said(parts: Any) -> str:
    out = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append(p.text)
        elif isinstance(p, ToolCallPart):
            out.append(f"[call {p.tool_name}]")
        elif isinstance(p, ToolResultPart):
            out.append(f"[result {p.tool_name}]")
    return " ".join(out)


def window_page(row: dict[str, Any], events: list[Any], latest: int) -> dict[str, Any]:
    """The window of ``events`` (consecutive, the newest last) of a chat whose view row is ``row`` and whose last
    version is ``latest``: ``{chat, first, last, latest, before, events, messages}`` (``before``: where the previous
    window ends, None at the chat's start)."""
    first = events[0].originator_version if events else latest + 1
    last = events[-1].originator_version if events else latest
    rows = [{"version": e.originator_version, "time": e.timestamp.isoformat(), "type": type(e).__name__,
             "actor": str(e.actor) if getattr(e, "actor", None) else None} for e in reversed(events)]
    messages = [{"message_id": m.message_id, "role": m.role, "version": e.originator_version,
                 "text": _said(m.parts)}
                for e in reversed(events) for m in reversed(getattr(e, "messages", None) or ())]
    return {"chat": row, "first": first, "last": last, "latest": latest, "before": first - 1 if first > 1 else None,
            "events": rows, "messages": messages}
