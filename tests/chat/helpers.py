"""Builders that put a chat into each execution state through the real command handler."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from commands.handler import command_from_dict, execute
from ledger.base import Emitter
from ledger.chat import events as ev
from ledger.chat.aggregate import Chat

ORG = "8a6f4d2e-1b3c-4d5e-8f70-000000000001"
OWNER = "5b1d7e9a-2c4f-4a6b-9d8e-00000000a11c"
#: the organization's one model config (its default), set up by ``setup_org``
MODEL = "3e8b6a1c-9d2f-4e7a-8b5c-000000000001"
WORKER = "7c2e9f1a-3b5d-4c7e-8a90-00000000f0c1"
RUNNER = "7c2e9f1a-3b5d-4c7e-8a90-00000000f0c2"
DYNAMIC_CALL = {"type": "tool-call", "tool_call_id": "call_dyn", "tool_name": "ask_user", "args": {"q": "which?"}}
RESOLVE_DYNAMIC = {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": "call_dyn",
                                              "tool_name": "ask_user", "result": "ok"}]}


def run(app: Any, **command: Any) -> dict[str, Any]:
    return execute(app, command_from_dict(command))


def setup_org(app: Any, org: str = ORG, members: tuple[str, ...] = (OWNER,), model: str | None = MODEL) -> None:
    """What create_chat needs: the owners as members of the organization, and a usable default model."""
    for user in members:
        run(app, type="add_organization_member", organization_id=org, user_id=user)
    if model is not None:
        run(app, type="create_model_config", organization_id=org, model_config_id=model, provider="openai",
            model="gpt-5", context_limit=200_000)


def chat_state(app: Any, chat_id: str) -> Any:
    agg = app.load(uuid.UUID(chat_id))
    assert isinstance(agg, Chat)
    return agg.state


def new_running_chat(app: Any, owned: bool = True) -> str:
    """R0, owned, whose latest assistant message has one pending dynamic call (``call_dyn``)."""
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="hello",
                  dynamic_tools=["ask_user"])["chat_id"]
    if owned:
        run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
    run(app, type="commit_step", chat_id=chat_id,
        messages=[{"role": "assistant", "parts": [{"type": "text", "text": "let me ask"}, DYNAMIC_CALL]}])
    return chat_id


BEGIN_EDIT = {"type": "edit_queued_message", "queued_message_id": 1, "editing": True}

#: state -> steps from the R0 base chat
RECIPES: dict[str, list[dict[str, Any]]] = {
    "R0": [],
    "R1": [{"type": "send_message", "text": "queued"}],
    "W": [{"type": "finish_turn"}],
    "E0": [{"type": "finish_error", "error": {"message": "boom"}}],
    "E1": [{"type": "send_message", "text": "queued"}, {"type": "finish_error", "error": {"message": "boom"}}],
    "I0": [{"type": "interrupt"}],
    "I1": [{"type": "send_message", "text": "queued"}, {"type": "interrupt"}],
    "A0": [{"type": "enter_requires_action"}],
    "A1": [{"type": "enter_requires_action"}, {"type": "send_message", "text": "queued"}],
    "XW": [{"type": "finish_turn"}, {"type": "set_archived", "archived": True}],
    "XE0": [{"type": "finish_error", "error": {"message": "boom"}}, {"type": "set_archived", "archived": True}],
    "XE1": [{"type": "send_message", "text": "queued"}, {"type": "finish_error", "error": {"message": "boom"}},
            {"type": "set_archived", "archived": True}],
    # the queue head (prompt 1) under edit
    "R1P": [{"type": "send_message", "text": "queued"}, BEGIN_EDIT],
    "E1P": [{"type": "send_message", "text": "queued"}, BEGIN_EDIT, {"type": "finish_error", "error": {"message": "boom"}}],
    "I1P": [{"type": "send_message", "text": "queued"}, BEGIN_EDIT, {"type": "interrupt"}],
    "A1P": [{"type": "enter_requires_action"}, {"type": "send_message", "text": "queued"}, BEGIN_EDIT],
    "P": [{"type": "send_message", "text": "queued"}, BEGIN_EDIT, {"type": "finish_turn"}],
    "XE1P": [{"type": "send_message", "text": "queued"}, BEGIN_EDIT, {"type": "finish_error", "error": {"message": "boom"}},
             {"type": "set_archived", "archived": True}],
}
STATES = tuple(RECIPES)


def record_raw(app: Any, chat_id: str, event_class: type, **fields: Any) -> None:
    """Append one event to a chat's stream through the store without deciding it — what an imported
    or legacy log may hold (``events import`` records stored events as they are)."""
    agg = app.load(uuid.UUID(chat_id))
    em = Emitter(agg.id, agg.version, datetime.now(timezone.utc))
    agg.record([em.emit(event_class, **fields)])
    app.save(agg)


def invalid_chat(app: Any, owned: bool = True) -> str:
    """Invalid (a running chat with a queue, archived): R1 plus an ``ArchivedSet`` no decision records."""
    chat_id = chat_in(app, "R1", owned)
    record_raw(app, chat_id, ev.ArchivedSet, archived=True)
    assert chat_state(app, chat_id).execution_state == "Invalid"
    return chat_id


def chat_in(app: Any, state: str, owned: bool = True) -> str:
    if state == "Invalid":
        return invalid_chat(app, owned)
    chat_id = new_running_chat(app, owned)
    for step in RECIPES[state]:
        run(app, chat_id=chat_id, **step)
    assert chat_state(app, chat_id).execution_state == state
    return chat_id
