"""chat-ledger's public Python API under one import name that cannot clash with an application's own modules
(the project's top-level packages ``ledger``, ``projections`` and ``commands`` are common words: docs/library.md).

    from chat_ledger import Ledger, SendMessage

    with Ledger.open("sqlite:///chat-ledger.db") as ledger:
        ledger.execute(SendMessage(chat_id=..., text="hello"))
        for row in ledger.status(org="8a6f"):      # ids as the CLI takes them: whole, or a unique prefix
            print(row.chat_id, row.execution_state)  # typed results (``chat_ledger.results``)

``Ledger`` here returns typed results (msgspec Structs, each with ``to_dict()``); ``commands.api.Ledger``, the
same calls returning plain JSON values, stays as it was. Every command type is importable from here by its
class name (``CreateChat``, ``SendMessage``, … : docs/commands.md lists them by their ``type``).
"""

from __future__ import annotations

from typing import Any, Iterator
from uuid import UUID

from commands import __version__
from commands import api as _api
from commands import results
from commands.api import LoggedEvent
from commands.results import (
    ChatStatus, ChatUsage, ChatView, CommandResult, Message, ModelsView, NextAction, QueuedPrompt, Result,
    TimelineEntry, TurnUsage, UnresolvedCall, UsageSum,
)
from ledger.errors import LedgerError


def _commands() -> dict[str, type]:
    import commands.handler  # noqa: F401 - registers every command type
    from commands.base import HANDLERS

    return {cls.__name__: cls for cls in HANDLERS}


_COMMAND_TYPES = _commands()
globals().update(_COMMAND_TYPES)


class Ledger(_api.Ledger):
    """An open ledger, with typed results and ids by prefix (as the CLI takes them)."""

    # -- ids -----------------------------------------------------------------------------------------------

    def _id(self, value: Any, kind: str) -> UUID | None:
        """``value`` as a UUID: whole, or a unique prefix of a stream of ``kind`` (``chat``, ``conversation``,
        ``stream``) or of an organization (``organization``); ``ambiguous_id`` / ``*_not_found`` otherwise."""
        if value is None or isinstance(value, UUID):
            return value
        from commands import idlookup

        if kind == "organization":
            return idlookup.organization_id(self.app, str(value))
        return idlookup.stream_id(self.app, str(value), kind)

    def _user(self, value: Any, org: UUID | None) -> UUID | None:
        if value is None or isinstance(value, UUID):
            return value
        from commands import idlookup

        return idlookup.user_id(self.app, str(value), org)

    # -- writing ---------------------------------------------------------------------------------------------

    def execute(self, command: _api.CommandInput) -> CommandResult:  # type: ignore[override]
        """Run one command; its result (``CommandResult``: ``data`` holds it whole). A refusal raises
        ``LedgerError`` and records nothing."""
        return CommandResult.of(super().execute(command))

    # -- reads -----------------------------------------------------------------------------------------------

    def status(self, chat_id: Any = None, *, org: Any = None,  # type: ignore[override]
               status: str | None = None) -> list[ChatStatus]:
        return [ChatStatus.of(r) for r in super().status(self._id(chat_id, "chat"), org=self._id(org, "organization"),
                                                          status=status)]

    def unresolved(self, chat_id: Any = None, *, org: Any = None) -> list[UnresolvedCall]:  # type: ignore[override]
        return [UnresolvedCall.of(r) for r in super().unresolved(self._id(chat_id, "chat"),
                                                                  org=self._id(org, "organization"))]

    def queue(self, chat_id: Any) -> list[QueuedPrompt]:  # type: ignore[override]
        return [QueuedPrompt.of(r) for r in super().queue(self._id(chat_id, "chat"))]

    def models(self, org: Any, user: Any = None) -> ModelsView:  # type: ignore[override]
        oid = self._id(org, "organization")
        return ModelsView.of(super().models(oid, self._user(user, oid)))

    def show(self, chat_id: Any, at: int | None = None, as_of: str | None = None) -> ChatView:  # type: ignore[override]
        return ChatView.of(super().show(self._id(chat_id, "chat"), at, as_of))

    def history(self, stream_id: Any, at: int | None = None,  # type: ignore[override]
                as_of: str | None = None) -> list[TimelineEntry]:
        return [TimelineEntry.of(e) for e in super().history(self._id(stream_id, "stream"), at, as_of)]

    def next_action(self, chat_id: Any, at: int | None = None, as_of: str | None = None,  # type: ignore[override]
                    with_current_settings: bool = False) -> NextAction:
        return NextAction.of(super().next_action(self._id(chat_id, "chat"), at, as_of, with_current_settings))

    def conversations(self, conversation_id: Any = None, *, status: str | None = None) -> list[dict[str, Any]]:
        return super().conversations(self._id(conversation_id, "conversation"), status=status)

    def subscribe(self, after: int = 0, **kw: Any) -> Iterator[LoggedEvent]:
        return super().subscribe(after, **kw)


__all__ = [
    "Ledger", "LedgerError", "LoggedEvent", "__version__", "results",
    "Result", "ChatStatus", "UnresolvedCall", "QueuedPrompt", "Message", "ChatView", "ChatUsage", "UsageSum",
    "TurnUsage", "TimelineEntry", "CommandResult", "NextAction", "ModelsView",
    *sorted(_COMMAND_TYPES),
]
