"""Build a ``ChatState`` directly from a compact history spec, for table tests of the pure policies.

Rows go through ``ledger.chat.state.message_info``, the function the chat's ``evolve`` uses, so the
message index is the one production builds.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from ledger.chat.messageinfo import message_info
from ledger.chat.state import ChatState
from ledger.chat.values import Message, TextPart, ToolCallPart, ToolResultPart, Usage

CHAT = UUID("0c4a7f52-9d1e-4b3a-8e6f-5a2b1c0d9e8f")
PARENT = UUID("1d5b8063-ae2f-4c4b-9f70-6b3c2d1e0f90")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def call(tool_call_id: str, tool_name: str, provider_executed: bool = False, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool_call_id=tool_call_id, tool_name=tool_name, args=args,
                        provider_executed=provider_executed)


def result(tool_call_id: str, tool_name: str, value: Any = "ok", is_error: bool = False) -> ToolResultPart:
    return ToolResultPart(tool_call_id=tool_call_id, tool_name=tool_name, result=value, is_error=is_error)


def user(text: str = "question", visibility: str = "both", **kw: Any) -> dict[str, Any]:
    return {"role": "user", "parts": [TextPart(text=text)], "visibility": visibility, **kw}


def assistant(*parts: Any, usage: Usage | None = None, **kw: Any) -> dict[str, Any]:
    return {"role": "assistant", "parts": list(parts) or [TextPart(text="answer")], "usage": usage, **kw}


def tool(*results: ToolResultPart, **kw: Any) -> dict[str, Any]:
    return {"role": "tool", "parts": list(results), **kw}


def summary_triplet(name: str = "chat_summarized", call_id: str = "summary-1") -> list[dict[str, Any]]:
    """The compressed boundary rows a compaction (or a clear) commits."""
    return [
        user("summary", visibility="model", compressed=True),
        assistant(call(call_id, name), visibility="user", compressed=True),
        tool(result(call_id, name, {}), compressed=True),
    ]


def used(tokens: int) -> Usage:
    return Usage(input_tokens=tokens)


def history(*rows: Any, deleted: tuple[int, ...] = (), child: bool = False, **fields: Any) -> ChatState:
    """A chat whose messages are ``rows`` (dicts from the builders; lists are flattened), ids from 1.
    ``deleted`` soft-deletes those message ids; ``child`` makes it a child chat."""
    state = ChatState(chat_id=CHAT, organization_id=UUID(int=1), owner_id=UUID(int=2),
                      parent_chat_id=PARENT if child else None, root_chat_id=PARENT if child else CHAT,
                      title="t", created_at=T0, **fields)
    flat: list[dict[str, Any]] = []
    for r in rows:
        flat.extend(r if isinstance(r, list) else [r])
    for i, spec in enumerate(flat, start=1):
        state.messages.append(message_info(Message(message_id=i, **spec), T0))
    for mid in deleted:
        state.messages[mid - 1].deleted = True
    return state
