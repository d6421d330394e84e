"""A chat whose assistant message (id 2) carries given tool calls, through the real handler."""

from __future__ import annotations

from typing import Any

from tests.chat.helpers import ORG, OWNER, run

ASSISTANT_MESSAGE_ID = 2


def new_chat(app: Any, *calls: tuple[str, str], dynamic: tuple[str, ...] = ()) -> str:
    """Create a chat and commit one assistant message with ``calls`` ((tool_call_id, tool_name) pairs)."""
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="do it",
                  dynamic_tools=list(dynamic))["chat_id"]
    parts = [{"type": "tool-call", "tool_call_id": cid, "tool_name": name, "args": {"n": i}}
             for i, (cid, name) in enumerate(calls or (("c1", "execute"),))]
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": parts}])
    return chat_id


def call_command(kind: str, chat_id: str, tool_call_id: str = "c1", **fields: Any) -> dict[str, Any]:
    return {"type": kind, "chat_id": chat_id, "assistant_message_id": ASSISTANT_MESSAGE_ID,
            "tool_call_id": tool_call_id, **fields}


def claim(app: Any, chat_id: str, tool_call_id: str = "c1", tool_name: str = "execute", **kw: Any) -> dict[str, Any]:
    return run(app, **call_command("claim_tool_call", chat_id, tool_call_id, tool_name=tool_name, **kw))


def respond(app: Any, chat_id: str, tool_call_id: str = "c1", status: int = 200,
            body: str = '{"exit_code": 0}', **kw: Any) -> dict[str, Any]:
    return run(app, **call_command("record_tool_call_response", chat_id, tool_call_id, status=status, body=body, **kw))


def cancel(app: Any, chat_id: str, tool_call_id: str = "c1", **kw: Any) -> dict[str, Any]:
    return run(app, **call_command("cancel_tool_call", chat_id, tool_call_id, **kw))
