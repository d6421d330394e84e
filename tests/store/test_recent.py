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


# -- the same optimism for catalog facts and new streams (commands.uow docstring) -------------------------

def test_a_create_takes_a_new_chat_as_absent_and_the_insert_checks_it(app: ChatLedgerApp, db_url: str,
                                                                      monkeypatch: Any) -> None:
    from tests.catalog.kit import chat, org_with

    org_with(app)
    chat_id = str(UUID(int=0x5EED, version=4))
    loads = counting_loads(app, monkeypatch)
    assert chat(app, chat_id=chat_id)["version"] == 1
    assert UUID(chat_id) not in loads  # no read of the stream the create makes
    other = open_app(db_url)
    try:  # another process creates a chat that this one has never seen ...
        taken = str(UUID(int=0x5EEE, version=4))
        chat(other, chat_id=taken)
        keyed = chat(other, idempotency_key="k1")
    finally:
        other.close()
    with pytest.raises(Exception) as err:  # ... the optimistic insert meets it, and the store answers
        chat(app, chat_id=taken)
    assert getattr(err.value, "code", None) == "chat_already_exists"
    assert chat(app, idempotency_key="k1") == keyed  # a repeat, found on the second attempt
    assert [e.originator_version for e in app.stream(UUID(taken))] == [1]


def test_a_stale_cached_catalog_is_caught_by_the_save_and_decided_again(app: ChatLedgerApp, db_url: str) -> None:
    from tests.catalog.kit import M2, ORG, chat, org_with

    org_with(app)
    first = chat(app)  # the catalog is now in this process's cache
    other = open_app(db_url)
    try:  # another process disables the model this process's cached catalog still allows
        cmd(other, type="update_model_config", organization_id=ORG, model_config_id=M2, enabled=False)
    finally:
        other.close()
    with pytest.raises(Exception) as err:  # decided first on the stale copy, then on the store's catalog
        cmd(app, type="send_message", chat_id=first["chat_id"], text="x", model_config_id=M2)
    assert getattr(err.value, "code", None) == "model_config_invalid"
    with pytest.raises(Exception) as err:
        chat(app, model_config_id=M2)
    assert getattr(err.value, "code", None) == "model_config_invalid"


def test_an_absent_deployment_taken_from_the_cache_is_checked(app: ChatLedgerApp, db_url: str,
                                                               monkeypatch: Any) -> None:
    from ledger.catalog.state import DEPLOYMENT_ID
    from ledger.recorders import EXPECTED_VERSIONS
    from tests.catalog.kit import chat, org_with

    org_with(app)
    chat(app)  # reads the deployment: none (the cache remembers it absent)
    other = open_app(db_url)
    try:
        cmd(other, type="set_deployment_settings", personal_model_overrides_enabled=True)
    finally:
        other.close()
    seen: list[int] = []
    real_save = app.save

    def save(*objs: Any, **kw: Any) -> Any:
        seen.append(kw.get(EXPECTED_VERSIONS, {}).get(DEPLOYMENT_ID, -1))
        return real_save(*objs, **kw)

    monkeypatch.setattr(app, "save", save)
    created = chat(app)
    # decided on "no deployment", refused by the save's check, decided again on the deployment as it is
    assert seen == [0, app.load(DEPLOYMENT_ID).version] and seen[1] > 0
    assert created["version"] == 1
