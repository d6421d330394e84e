"""Deciding on recently saved aggregates (``commands.uow.Recent``): no read of the chat for a command that
follows this process's own save, and never a decision that the store did not check — two application
objects on one database stand for two processes."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from commands import uow
from ledger.chat import events as ev
from ledger.store import ChatLedgerApp, open_app
from tests.store.test_store import cmd, create, reply


def counting_loads(app: ChatLedgerApp, monkeypatch: Any) -> list[UUID]:
    loads: list[UUID] = []
    real = app.load

    def load(aggregate_id: UUID, *a: Any, **kw: Any) -> Any:
        loads.append(aggregate_id)
        return real(aggregate_id, *a, **kw)

    monkeypatch.setattr(app, "load", load)
    return loads


def another_process_sends(db_url: str, chat_id: UUID, text: str) -> None:
    other = open_app(db_url)
    try:
        cmd(other, type="send_message", chat_id=chat_id, text=text)
    finally:
        other.close()


def state(app: ChatLedgerApp, chat_id: UUID) -> str:
    return app.load(chat_id).state.execution_state


def test_a_command_after_our_own_save_does_not_read_the_chat(app: ChatLedgerApp, monkeypatch: Any) -> None:
    chat_id = create(app)
    loads = counting_loads(app, monkeypatch)
    r1 = cmd(app, type="commit_step", chat_id=chat_id, messages=reply("one"))
    r2 = cmd(app, type="finish_turn", chat_id=chat_id)
    assert chat_id not in loads
    assert (r1["version"], r2["version"]) == (2, 3)
    monkeypatch.undo()
    assert state(app, chat_id) == "W" and [e.originator_version for e in app.stream(chat_id)] == [1, 2, 3]


def test_a_stale_copy_is_caught_by_the_save_and_decided_again(app: ChatLedgerApp, db_url: str) -> None:
    chat_id = create(app)
    cmd(app, type="commit_step", chat_id=chat_id, messages=reply("mine 1"))  # remembered at version 2
    another_process_sends(db_url, chat_id, "from the other process")  # version 3
    result = cmd(app, type="commit_step", chat_id=chat_id, messages=reply("mine 2"))
    assert result["version"] == 4  # decided again on the current chat, after the other process's prompt
    events = app.stream(chat_id)
    assert [type(e) for e in events[1:]] == [ev.StepCommitted, ev.PromptQueued, ev.StepCommitted]


def test_a_refusal_is_decided_on_current_state(app: ChatLedgerApp, db_url: str) -> None:
    chat_id = create(app)
    cmd(app, type="finish_turn", chat_id=chat_id)  # remembered: waiting (W), where interrupt is refused
    another_process_sends(db_url, chat_id, "wake up")  # now running (R0)
    result = cmd(app, type="interrupt", chat_id=chat_id)  # the remembered W would refuse it
    events = app.stream(chat_id)
    assert result["version"] == len(events) > 3
    assert any(isinstance(e, ev.InterruptRequested) for e in events[3:])


def test_a_read_only_use_of_a_remembered_chat_is_decided_on_current_state(app: ChatLedgerApp, db_url: str) -> None:
    """Work that reads a remembered chat without recording on it (a no-op, or a record on another
    aggregate) is not checked by the save: it runs again on the chat read from the store."""
    chat_id = create(app)
    cmd(app, type="commit_step", chat_id=chat_id, messages=reply("mine"))  # remembered at version 2
    another_process_sends(db_url, chat_id, "from the other process")  # version 3
    seen: list[int] = []

    def work(u: uow.UnitOfWork) -> int:
        seen.append(u.get(chat_id).version)
        return seen[-1]

    assert uow.run(app, work) == 3
    assert seen == [2, 3]  # first the remembered copy, then the current chat


def test_an_attempt_that_fails_leaves_nothing_remembered(app: ChatLedgerApp, monkeypatch: Any) -> None:
    chat_id = create(app)
    cmd(app, type="commit_step", chat_id=chat_id, messages=reply("one"))
    real_save = app.save

    def failing_save(*objs: Any, **kw: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(app, "save", failing_save)
    with pytest.raises(RuntimeError):
        cmd(app, type="commit_step", chat_id=chat_id, messages=reply("lost"))
    monkeypatch.setattr(app, "save", real_save)
    loads = counting_loads(app, monkeypatch)
    result = cmd(app, type="commit_step", chat_id=chat_id, messages=reply("two"))
    assert chat_id in loads  # the failed attempt's copy (with its unsaved event) was not kept
    assert result["version"] == 3


def test_recent_is_bounded() -> None:
    recent = uow.Recent(maxsize=2)

    class A:
        def __init__(self, i: int) -> None:
            self.id = UUID(int=i)

    recent.put([A(1), A(2), A(3)])
    assert recent.take(UUID(int=1)) is None
    assert recent.take(UUID(int=3)) is not None and recent.take(UUID(int=3)) is None
