"""Conversation fixtures. ``db_url`` and ``app`` (SQLite and PostgreSQL) come from tests/conftest.py."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from ledger.store import ChatLedgerApp, open_app


@pytest.fixture
def reopen(db_url: str) -> Iterator[Callable[[], ChatLedgerApp]]:
    """Opens another application on the same database (a new process after a crash, or a second
    writer); every app opened this way is closed at teardown."""
    opened: list[ChatLedgerApp] = []

    def open_another() -> ChatLedgerApp:
        app = open_app(db_url)
        opened.append(app)
        return app

    yield open_another
    for app in opened:
        app.close()


@pytest.fixture
def do(app: ChatLedgerApp) -> Callable[..., dict[str, Any]]:
    """Runs one conversation command (given as a JSON-like dict) on ``app`` through its handler."""
    from tests.conversation.commands_kit import run_command

    return lambda command, on=None: run_command(on or app, command)
