"""Issue 30, point 4: a typed library under one import name. ``chat_ledger`` re-exports the API and every
command type; its ``Ledger`` returns typed results (msgspec Structs with ``to_dict()``) equal to what
``commands.api.Ledger`` returns as plain values, takes ids by prefix as the CLI does, and the installed
packages ship ``py.typed``."""

from __future__ import annotations

import importlib.resources
import uuid

import pytest

import chat_ledger
from chat_ledger import (
    ChatStatus, ChatView, CommandResult, CreateChat, Ledger, LedgerError, NextAction, QueuedPrompt, TimelineEntry,
)
from commands import api


def test_every_command_type_is_importable_from_chat_ledger():
    import commands.handler  # noqa: F401
    from commands.base import HANDLERS

    assert len(HANDLERS) > 40
    for cls in HANDLERS:
        assert getattr(chat_ledger, cls.__name__) is cls and cls.__name__ in chat_ledger.__all__


@pytest.mark.parametrize("package", ["chat_ledger", "commands", "ledger", "projections"])
def test_the_packages_ship_py_typed(package):
    assert importlib.resources.files(package).joinpath("py.typed").is_file()


def test_typed_results_equal_the_plain_ones_and_ids_work_by_prefix(db_url):
    org, me = uuid.uuid4(), uuid.uuid4()
    with Ledger.open(db_url) as typed, api.Ledger.open(db_url) as plain:
        typed.execute({"type": "add_organization_member", "organization_id": str(org), "user_id": str(me)})
        typed.execute({"type": "create_model_config", "organization_id": str(org), "provider": "anthropic",
                       "model": "claude", "context_limit": 200000})
        made = typed.execute(CreateChat(organization_id=org, owner_id=me, text="Fix the build"))
        assert isinstance(made, CommandResult) and made.execution_state == "R0" and made.data["chat_id"] == made.chat_id
        chat = made.chat_id
        typed.execute({"type": "send_message", "chat_id": chat, "text": "queued"})

        (row,) = typed.status(chat[:8])  # a prefix, as the CLI takes it
        assert isinstance(row, ChatStatus) and row.to_dict() == plain.status(chat)[0]
        assert [q.to_dict() for q in typed.queue(chat[:10])] == plain.queue(chat)
        assert all(isinstance(q, QueuedPrompt) for q in typed.queue(chat))
        shown = typed.show(chat[:8])
        assert isinstance(shown, ChatView) and shown.chat.title == "Fix the build" and len(shown.messages) == 1
        assert shown.to_dict() == plain.show(chat)
        history = typed.history(chat[:8])
        assert all(isinstance(e, TimelineEntry) for e in history) and history[0].type == "ChatCreated"
        assert [e.to_dict() for e in history] == plain.history(chat)
        decision = typed.next_action(chat)
        assert isinstance(decision, NextAction) and decision.data == plain.next_action(chat)
        assert typed.models(str(org)[:8]).organization_id == str(org)
        assert [r.chat_id for r in typed.status(org=str(org)[:6])] == [chat]
        with pytest.raises(LedgerError) as e:
            typed.status("ffffffff")
        assert e.value.code == "chat_not_found"
