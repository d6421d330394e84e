"""One row of a chat's message index (``ledger.chat.index``): what decisions need of a message, not its body.

Kept apart from ``ledger.chat.state`` so that the index (which stores these rows) and the state (which holds
an index) import in one direction only: ``index`` and ``state`` both import this module, never each other.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from ledger.chat.values import Message, ToolCallPart, ToolResultPart, Usage, is_receipt

#: tool names whose call/result marks a context boundary (compaction summary, cleared context)
BOUNDARY_TOOLS = frozenset({"chat_summarized", "chat_cleared"})


class ToolCall(msgspec.Struct, gc=False, frozen=True, array_like=True):
    tool_call_id: str
    tool_name: str
    provider_executed: bool
    args: dict[str, Any] = {}


class ToolResultInfo(msgspec.Struct, gc=False, frozen=True, array_like=True):
    tool_call_id: str
    tool_name: str
    is_error: bool


class MessageInfo(msgspec.Struct, gc=False, array_like=True):
    """What decisions need of one message (its body stays in the event that inserted it).

    A chat's state holds one per message for as long as the chat is in memory (a projection's fold
    holds a thousand chats), so it is kept cheap for the cyclic garbage collector: untracked structs
    (``gc=False``: no cycles are possible), tuples of them (untracked once the collector has seen them
    hold only untracked values), and the turn's and model's UUID objects shared with the previous
    message when equal.
    """

    message_id: int
    role: str
    visibility: str
    turn_id: UUID | None
    model_config_id: UUID | None
    compressed: bool
    deleted: bool
    calls: tuple[ToolCall, ...]
    results: tuple[ToolResultInfo, ...]
    boundary: bool
    created_at: datetime
    usage: Usage | None = None
    context_limit: int | None = None
    #: a prompt's hook prefix, as recorded: the number of messages just before it (ids ``message_id -
    #: prefix`` to ``message_id - 1``) that the event inserting the prompt recorded ahead of it
    #: (``TurnStarted`` / ``QueuedPromptPromoted``: ``messages`` before ``prompt_message_id``); 0 for any
    #: other message. An edit soft-deletes these with the prompt (``ledger.chat.decide.stale_hook_prefix``).
    prefix: int = 0
    #: a structured-output receipt (``ledger.chat.values.is_receipt``): not model output, so readers of the
    #: history skip it (it never hides an outstanding call)
    receipt: bool = False


def message_info(m: Message, at: datetime, previous: MessageInfo | None = None, prefix: int = 0) -> MessageInfo:
    calls: list[ToolCall] = []
    results: list[ToolResultInfo] = []
    boundary = False
    for p in m.parts:
        t = type(p)  # (parts are a closed union of final classes)
        if t is ToolCallPart:
            calls.append(ToolCall(p.tool_call_id, p.tool_name, p.provider_executed, p.args))
            boundary = boundary or p.tool_name in BOUNDARY_TOOLS
        elif t is ToolResultPart:
            results.append(ToolResultInfo(p.tool_call_id, p.tool_name, p.is_error))
            boundary = boundary or p.tool_name in BOUNDARY_TOOLS
    turn_id, model_config_id = m.turn_id, m.model_config_id
    if previous is not None:
        if turn_id is not None and previous.turn_id is not None and turn_id.int == previous.turn_id.int:
            turn_id = previous.turn_id
        if (model_config_id is not None and previous.model_config_id is not None
                and model_config_id.int == previous.model_config_id.int):
            model_config_id = previous.model_config_id
    return MessageInfo(m.message_id, m.role, m.visibility, turn_id, model_config_id, m.compressed, False,
                       tuple(calls) if calls else (), tuple(results) if results else (),
                       boundary and m.compressed, at, m.usage, m.context_limit, prefix,
                       m.role == "assistant" and m.visibility == "user" and is_receipt(m.role, m.visibility, m.parts))
