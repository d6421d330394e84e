"""Which tool call a command names, checked against its chat (facts for the pure ``decide``).

The execution id is the deterministic tool-call UUID of docs/chatd.md §5.3 (chattool ``ToolCallID``):
``uuid5(0af4d6d3-691c-45dd-ac54-55ea97970ebc, "<chat_id>/<assistant_message_id>/<provider_tool_call_id>")``.
A call whose provider id is empty or repeated within its message has none (``ToolCallIDs``): calls sharing
an id would get each other's saved responses, so such calls cannot be tracked here.
"""

from __future__ import annotations

from uuid import UUID

import msgspec

from ledger.chat.state import ChatState
from ledger.chat.views import tool_call_execution_ids
from ledger.errors import LedgerError, invalid_command
from ledger.toolcalls.errors import TOOL_CALL_NO_IDENTITY, TOOL_CALL_NOT_FOUND, refuse


class CallFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call that exists in its chat, with its execution id."""

    execution_id: UUID
    chat_id: UUID
    assistant_message_id: int
    tool_call_id: str
    tool_name: str


def locate_call(chat: ChatState | None, assistant_message_id: int, tool_call_id: str) -> CallFacts:
    """The call ``tool_call_id`` of assistant message ``assistant_message_id``, or the refusal saying why not:
    ``chat_not_found``, ``message_not_found``, ``tool_call_not_found`` (not an assistant message, or no
    such call in it), ``invalid_command`` for a provider-executed call (the provider runs those), or
    ``tool_call_no_identity`` (empty or repeated provider id)."""
    if chat is None:
        raise LedgerError("chat_not_found", "chat not found")
    idx = assistant_message_id - 1
    if not 0 <= idx < len(chat.messages):
        raise LedgerError("message_not_found", "chat message not found")
    message = chat.messages[idx]
    call = next((c for c in message.calls if c.tool_call_id == tool_call_id), None)
    if message.role != "assistant" or call is None:
        raise refuse(TOOL_CALL_NOT_FOUND)
    if call.provider_executed:
        raise invalid_command("a provider-executed tool call is run by the provider, not claimed here")
    ids = tool_call_execution_ids(chat.chat_id, message.message_id, [c.tool_call_id for c in message.calls])
    execution_id = ids.get(tool_call_id)
    if execution_id is None:
        raise refuse(TOOL_CALL_NO_IDENTITY)
    return CallFacts(execution_id=execution_id, chat_id=chat.chat_id, assistant_message_id=message.message_id,
                     tool_call_id=tool_call_id, tool_name=call.tool_name)


def call_resolved(chat: ChatState, facts: CallFacts) -> bool:
    """Whether the chat already has a result for the call: a later active ``tool`` message of its turn
    (before the next assistant message) holds one (GEN's rule: results inside the assistant message
    itself do not count)."""
    for m in chat.messages[facts.assistant_message_id:]:
        if m.deleted:
            continue
        if m.role == "assistant":
            return False
        if m.role == "tool" and any(r.tool_call_id == facts.tool_call_id for r in m.results):
            return True
    return False
