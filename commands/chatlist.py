"""An organization's chats, filtered, newest activity first, in pages (issue 29, point 4: the page
``/ui/orgs/ORG/chats``), and a chat's family as a tree.

Filters: status, owner, model (config id), a tool the chat used (a call or result naming it: the search view's
``tools``), last activity since / until, and "has an error" (its last error is set) or "has unresolved calls" (the
unresolved view has a row of it). The caller's scope (``commands.access.chats_filter``: the organization, a
member's own chats) is part of ``where``. Pages are keyset pages on (last activity, chat id), descending: a cursor
is the last row's pair, so a page costs the same wherever it is and a chat that moves up does not repeat.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import msgspec

from ledger.chat.searchdocs import tool_filter
from ledger.chat.views import json_row
from ledger.errors import LedgerError


class ChatListFilters(msgspec.Struct, frozen=True, kw_only=True):
    status: str | None = None
    owner: UUID | None = None
    model: UUID | None = None
    tool: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    has: Literal["error", "unresolved"] | None = None


class ChatListPage(msgspec.Struct, frozen=True):
    rows: list[dict[str, Any]]
    next_cursor: str | None
    matched: int  # rows matching the filters, every page


def chat_list(backend: Any, where: dict[str, Any], f: ChatListFilters, limit: int = 100,
              cursor: str | None = None) -> ChatListPage:
    """The page after ``cursor`` of the chats matching ``where`` and ``f`` (views caught up by the caller)."""
    where = dict(where)
    for column, value in (("status", f.status), ("owner_id", f.owner), ("model_config_id", f.model)):
        if value is not None:
            where[column] = str(value)
    rows = backend.query("chat_views", "chat_status", where=where)
    if f.since is not None:
        rows = [r for r in rows if r["updated_at"] >= f.since]
    if f.until is not None:
        rows = [r for r in rows if r["updated_at"] <= f.until]
    if f.has == "error":
        rows = [r for r in rows if r["last_error"]]
    elif f.has == "unresolved":
        with backend.reading("chat_views") as r:
            open_calls = r.distinct("unresolved_tool_calls", "chat_id")
        rows = [r for r in rows if r["chat_id"] in open_calls]
    if f.tool:
        scope = {k: v for k, v in where.items() if k in ("organization_id", "owner_id")}
        with backend.reading("search") as r:
            used = r.distinct("search_docs", "chat_id", where=scope, contains=tool_filter(f.tool))
        rows = [r for r in rows if r["chat_id"] in used]
    rows.sort(key=lambda r: (r["updated_at"], r["chat_id"]), reverse=True)
    matched = len(rows)
    if cursor is not None:
        after = _decode(cursor)
        rows = [r for r in rows if (r["updated_at"], r["chat_id"]) < after]
    page = rows[:limit]
    more = len(rows) > limit
    return ChatListPage([json_row(r) for r in page], _encode(page[-1]) if more else None, matched)


def _encode(row: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([row["updated_at"].isoformat(), row["chat_id"]])).decode()


def _decode(cursor: str) -> tuple[datetime, str]:
    try:
        at, chat = msgspec.json.decode(base64.urlsafe_b64decode(cursor.encode()))
        return datetime.fromisoformat(at), str(UUID(chat))
    except (ValueError, TypeError, msgspec.DecodeError) as e:
        raise LedgerError("invalid_request", f"cursor is not one of this listing: {cursor!r}") from e


def family(backend: Any, root_chat_id: str) -> list[dict[str, Any]]:
    """The chats of a family (a root and its descendants), each with its ``depth``, in tree order (a parent
    before its children; siblings in chat id order)."""
    rows = backend.query("chat_views", "chat_status", where={"root_chat_id": root_chat_id})
    children: dict[str | None, list[dict[str, Any]]] = {}
    for r in rows:
        children.setdefault(r["parent_chat_id"], []).append(r)
    out: list[dict[str, Any]] = []

    def walk(parent: str | None, depth: int) -> None:
        for r in sorted(children.get(parent, []), key=lambda r: r["chat_id"]):
            out.append({**json_row(r), "depth": depth})
            walk(r["chat_id"], depth + 1)

    walk(None, 0)
    return out
