"""Read shapes of a chat (docs/commands.md, "CLI"), computed from its state and, for message bodies, its events.

Pure functions: the projections materialize the same rows, and ``show``/``status`` by replay use them
directly, so "the view equals the fold of the stream" is checkable row for row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable
from uuid import UUID, uuid5

import msgspec

from ledger.chat import events as ev
from ledger.chat.state import ChatState, unresolved_tool_calls
from ledger.chat.values import QueuedPrompt, add_usage, message_text, usage_total

#: chattool ToolCallID namespace (docs/chatd.md §5.3, the version the issues pick)
TOOL_CALL_NAMESPACE = UUID("0af4d6d3-691c-45dd-ac54-55ea97970ebc")


#: UUID -> its string form, by the UUID's int. ``UUID.__str__`` is Python code (about 2 µs) and the view
#: rows of a chat repeat the same few ids (chat, organization, owner, model, turn) in every row.
_UUID_STRS: dict[int, str] = {}


def uuid_str(u: UUID) -> str:
    s = _UUID_STRS.get(u.int)
    if s is None:
        if len(_UUID_STRS) >= 100_000:
            _UUID_STRS.clear()
        s = _UUID_STRS[u.int] = str(u)
    return s


def _s(v: Any) -> Any:
    if v is None:
        return None
    if v.__class__ is UUID:
        return uuid_str(v)
    if isinstance(v, UUID):
        return str(v)
    if isinstance(v, datetime):
        return v.isoformat().replace("+00:00", "Z")
    return v


def to_jsonable(v: Any) -> Any:
    return msgspec.to_builtins(v)


def json_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row as JSON output shows it: UUIDs as strings, timestamps as RFC 3339 UTC strings."""
    return {k: _s(v) for k, v in row.items()}


def status_row(s: ChatState) -> dict[str, Any]:
    return json_row(status_values(s))


def status_values(s: ChatState) -> dict[str, Any]:
    """The ``status`` row with typed values (timestamps as datetimes), as the view stores it."""
    return {
        "chat_id": uuid_str(s.chat_id),
        "organization_id": uuid_str(s.organization_id),
        "owner_id": uuid_str(s.owner_id),
        "parent_chat_id": _s(s.parent_chat_id),
        "root_chat_id": uuid_str(s.root_chat_id),
        "title": s.title,
        "status": s.status,
        "execution_state": s.execution_state,
        "archived": s.archived,
        "queue_length": len(s.queue),
        "editing_queued_message_id": s.editing_queued_message_id,
        "last_error": to_jsonable(s.last_error) if s.last_error else None,
        "requires_action_deadline_at": s.requires_action_deadline_at,
        "compaction_requested_at": s.compaction_requested_at,
        "hook_allowed_tools": list(s.hook_allowed_tools) if s.hook_allowed_tools is not None else None,
        "model_config_id": _s(s.model_config_id),
        "turn_id": _s(s.turn_id),
        "generation_attempt": s.generation_attempt,
        "history_version": s.history_version,
        "worker_id": _s(s.worker_id),
        "runner_id": _s(s.runner_id),
        "message_count": len(s.messages),
        "title_source": s.title_source,
        "plan_mode": s.plan_mode,
        "pinned_at": s.pinned_at,
        "workspace_id": _s(s.workspace_id),
        "build_id": _s(s.build_id),
        "agent_id": _s(s.agent_id),
        "shared": s.shared,
        "labels": dict(s.labels),
        "version": s.version,
        "updated_at": s.updated_at,
    }


def tool_call_execution_ids(chat_id: UUID, assistant_message_id: int, provider_ids: list[str]) -> dict[str, UUID]:
    """Deterministic tool-call UUIDs (chattool ToolCallIDs): none for empty or repeated provider ids."""
    counts: dict[str, int] = {}
    for pid in provider_ids:
        counts[pid] = counts.get(pid, 0) + 1
    return {
        pid: uuid5(TOOL_CALL_NAMESPACE, f"{chat_id}/{assistant_message_id}/{pid}")
        for pid, n in counts.items() if pid and n == 1
    }


def unresolved_rows(s: ChatState) -> list[dict[str, Any]]:
    """The unresolved calls as ``show`` gives them (the view's columns less its ordering column)."""
    return [json_row({k: v for k, v in r.items() if k != "call_index"}) for r in unresolved_values(s)]


def unresolved_values(s: ChatState) -> list[dict[str, Any]]:
    """Unresolved tool calls of the latest assistant message (docs/chatd.md §5.1, GEN's rule)."""
    assistant, calls = unresolved_tool_calls(s)
    if not calls:
        return []
    ids = tool_call_execution_ids(s.chat_id, assistant.message_id, [c.tool_call_id for c in assistant.calls])
    dynamic = set(s.dynamic_tools)
    index = {c.tool_call_id: i for i, c in enumerate(assistant.calls)}
    return [
        {
            "chat_id": uuid_str(s.chat_id),
            "assistant_message_id": assistant.message_id,
            "tool_call_id": c.tool_call_id,
            "tool_name": c.tool_name,
            "kind": "dynamic" if c.tool_name in dynamic else "local",
            "execution_id": _s(ids.get(c.tool_call_id)),
            "args": to_jsonable(c.args),
            "since": assistant.created_at,
            "call_index": index.get(c.tool_call_id, 0),  # the call's place in the message (the view's order)
        }
        for c in calls
    ]


def queue_row(chat_id: UUID, q: QueuedPrompt) -> dict[str, Any]:
    """One queued prompt (typed values, as the view stores it). ``editing_since``: when the owner began
    editing it (null: not under edit); ``reasoning_effort``: the effort it carries into history (an
    edit's override; null: the chat's)."""
    return {
        "chat_id": uuid_str(chat_id),
        "queued_message_id": q.queued_message_id,
        "position": q.position,
        "created_by": uuid_str(q.created_by),
        "text": message_text(q.parts),
        "turn_id": uuid_str(q.turn_id),
        "hook_prefix": to_jsonable(q.hook_prefix),
        "hook_allowed_tools": list(q.hook_allowed_tools) if q.hook_allowed_tools is not None else None,
        "model_config_id": _s(q.model_config_id),
        "reasoning_effort": q.reasoning_effort,
        "editing_since": q.editing_since,
    }


def queue_rows(s: ChatState) -> list[dict[str, Any]]:
    """Queued prompts head first. ``position`` orders the queue (lowest first; promote-to-head gives
    the old lowest minus one), as chatd's ``chat_queued_messages.position``."""
    return [json_row(queue_row(s.chat_id, q)) for q in s.queue]


def message_rows(events: Iterable[Any]) -> list[dict[str, Any]]:
    """Every message of a chat (deleted ones included, in id order) from its events."""
    rows: dict[int, dict[str, Any]] = {}
    for e in events:
        if isinstance(e, ev.MessageEdited):
            for mid in e.deleted_message_ids:
                rows[mid]["deleted"] = True
            continue
        for m in getattr(e, "messages", ()) or ():
            rows[m.message_id] = {
                "message_id": m.message_id,
                "role": m.role,
                "parts": to_jsonable(m.parts),
                "visibility": m.visibility,
                "turn_id": _s(m.turn_id),
                "created_by": _s(m.created_by),
                "model_config_id": _s(m.model_config_id),
                "deleted": False,
                "compressed": m.compressed,
                "created_at": _s(e.timestamp),
                "usage": to_jsonable(m.usage) if m.usage is not None else None,
            }
    return [rows[k] for k in sorted(rows)]


def usage_summary(events: Iterable[Any]) -> dict[str, Any]:
    """What the chat's messages cost, as their usage reports it: the whole chat (``total``) and each turn
    (``by_turn``, in the order the turns began), deleted messages included (what was spent was spent)."""
    total: dict[str, int] | None = None
    by_turn: dict[str, dict[str, int] | None] = {}
    for e in events:
        for m in getattr(e, "messages", ()) or ():
            one = usage_total([m])
            if one is None:
                continue
            total = add_usage(total, one)
            turn = _s(m.turn_id) or "-"
            by_turn[turn] = add_usage(by_turn.get(turn), one)
    return {"total": total, "by_turn": [{"turn_id": t, **u} for t, u in by_turn.items() if u]}


def show(s: ChatState, events: Iterable[Any]) -> dict[str, Any]:
    events = list(events)
    return {
        "chat": status_row(s),
        "messages": message_rows(events),
        "queue": queue_rows(s),
        "unresolved": unresolved_rows(s),
        "usage": usage_summary(events),
    }
