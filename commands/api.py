"""The Python API: open a ledger by URL, execute commands, query the views, read history, follow the log.

``Ledger`` is a small facade over the service layer (the same functions the CLI and the HTTP service call);
it adds no rule of its own. Documented in ``docs/library.md``::

    from commands.api import Ledger

    with Ledger.open("sqlite:///chat-ledger.db") as ledger:
        result = ledger.execute({"type": "set_title", "chat_id": "...", "title": "Build fix"})
        rows = ledger.status(org="8a6f4d2e-1b3c-4d5e-8f70-000000000001")

A refused command raises ``LedgerError`` (``code``, ``message``; docs/commands.md, "Results"); ``execute_many`` instead returns
one result per command, as ``chat-ledger apply`` prints them.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Iterator, Mapping
from uuid import UUID

import msgspec

from commands import queries, views
from commands.base import Command
from commands.handler import apply_lines, decode_command, execute
from ledger.errors import LedgerError
from ledger.store import ChatLedgerApp, open_app, resolve_url

__all__ = ["Ledger", "LedgerError", "LoggedEvent"]

CommandInput = Mapping[str, Any] | Command | str | bytes


class LoggedEvent(msgspec.Struct, frozen=True):
    """One recorded event as the log holds it: its place in the global order and in its stream, its topic,
    its time and its payload (the event's fields as JSON values)."""

    notification_id: int
    stream_id: str
    version: int
    topic: str
    type: str
    timestamp: str | None
    data: dict[str, Any]


def _uuid(value: Any, what: str) -> UUID | None:
    if value is None or isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise LedgerError("invalid_command", f"invalid {what}: {value!r}") from None


def _command(command: CommandInput) -> Command:
    if isinstance(command, Command):
        return command
    if isinstance(command, (str, bytes)):
        return decode_command(command)
    return decode_command(msgspec.json.encode(dict(command)))


class Ledger:
    """An open ledger. Use ``Ledger.open(url)`` (a context manager) and ``close()`` when done.

    Thread-safe as the underlying application is: commands from several threads are serialized per stream by
    optimistic concurrency (the unit of work retries), queries read committed data.
    """

    def __init__(self, app: ChatLedgerApp, url: str, *, replica: bool = False) -> None:
        self.app = app
        self.url = url
        #: a hot standby's copy (``open_replica``): its views are read as replicated, never caught up here
        self.replica = replica
        self._backend: Any = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, url: str | None = None, *, create: bool = True) -> Ledger:
        """Open the ledger at ``url`` (default ``$CHAT_LEDGER_DB``, else ``sqlite:///chat-ledger.db``), creating
        its database, schema and tables if missing; with ``create=False`` a missing ledger is
        ``database_not_found`` and nothing is created."""
        url = resolve_url(url)
        return cls(open_app(url, create=create), url)

    @classmethod
    def open_replica(cls, url: str) -> Ledger:
        """A PostgreSQL hot standby of a ledger, for reading (docs/operations.md, "Reads from a standby"):
        nothing is created or written; the views are as the primary's follower left them, replicated (a
        standby cannot catch them up), so they may lag the primary's log."""
        from ledger.store import DatabaseURL

        if DatabaseURL.parse(url).backend != "postgres":
            raise LedgerError("invalid_request", "a replica is a PostgreSQL hot standby: give a postgresql:// URL")
        return cls(open_app(url, create=False), url, replica=True)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
        self.app.close()

    @property
    def backend(self) -> Any:
        """The views' backend (opened on first use)."""
        with self._lock:
            if self._backend is None:
                from projections import open_backend

                self._backend = open_backend(self.url, read_only=self.replica)
            return self._backend

    # -- writing -------------------------------------------------------------------------------------------

    def execute(self, command: CommandInput) -> dict[str, Any]:
        """Run one command (a dict, a JSON text or a command Struct); its result (docs/commands.md, "Results"). A refusal
        raises ``LedgerError`` and records nothing."""
        return execute(self.app, _command(command))

    def execute_many(self, commands: Iterable[CommandInput], stop_on_error: bool = False) -> list[dict[str, Any]]:
        """Run commands in order; one ``{"line", "ok", "type", "result"|"error"}`` per command, as ``apply``."""
        lines = (c.decode() if isinstance(c, bytes) else c if isinstance(c, str)
                 else msgspec.json.encode(c if isinstance(c, Command) else dict(c)).decode() for c in commands)
        results: list[dict[str, Any]] = []
        apply_lines(self.app, lines, stop_on_error, out=results.append)
        return results

    # -- the views (caught up to the head of the log first) -------------------------------------------------

    def _views(self, *names: str) -> Any:
        return self.backend if self.replica else views.catch_up_views(self.app, self.backend, names)

    def views_backend(self, *names: str) -> Any:
        """The views' backend with the named views caught up to the head (a replica's: as replicated)."""
        return self._views(*names)

    def views_position(self, *names: str) -> int:
        """The lowest position of the named views' live builds (0 for one not built)."""
        with self.backend.snapshot() as snap:
            readers = [snap.live(name) for name in names]
            return min((r.position() if r is not None else 0 for r in readers), default=0)

    def status(self, chat_id: Any = None, *, org: Any = None, status: str | None = None) -> list[dict[str, Any]]:
        """chat_status rows (docs/commands.md, "CLI"): one chat, or every chat of ``org`` / with ``status``."""
        return views.chat_status(self._views("chat_views"), _uuid(chat_id, "chat id"),
                                 _uuid(org, "organization id"), status)

    def unresolved(self, chat_id: Any = None, *, org: Any = None) -> list[dict[str, Any]]:
        """unresolved_tool_calls rows: the open tool calls of each chat's latest assistant message."""
        return views.unresolved(self._views("chat_views"), _uuid(chat_id, "chat id"), _uuid(org, "organization id"))

    def queue(self, chat_id: Any) -> list[dict[str, Any]]:
        """chat_queue rows of one chat, head first."""
        return views.chat_queue(self._views("chat_views"), _uuid(chat_id, "chat id"))

    def models(self, org: Any, user: Any = None) -> dict[str, Any]:
        """The organization's model view (with a user's overrides and effective models when given)."""
        return views.organization_models(self.app, self._views("org_models"), _uuid(org, "organization id"),
                                         _uuid(user, "user id"))

    def conversations(self, conversation_id: Any = None, *, status: str | None = None) -> list[dict[str, Any]]:
        """Rows of the conversations view."""
        return views.conversations(self._views("conversations"), _uuid(conversation_id, "conversation id"), status)

    # -- history (by replay) ----------------------------------------------------------------------------------

    def show(self, chat_id: Any, at: int | None = None, as_of: str | None = None) -> dict[str, Any]:
        """One chat as it is (or was at stream version ``at`` / time ``as_of``): the status fields, every
        message (deleted ones too), the queue and the unresolved calls (docs/commands.md, "CLI" ``show``), with the
        model and the executions as of the same log position."""
        cid = _uuid(chat_id, "chat id")
        assert cid is not None
        return queries.shown_chat(self.app, cid, at, as_of)

    def history(self, stream_id: Any, at: int | None = None, as_of: str | None = None) -> list[dict[str, Any]]:
        """A stream's audit timeline: each event with its time, type, summary and the state after it, up to
        stream version ``at`` or time ``as_of`` (ISO 8601)."""
        from ledger.audit.timeline import timeline

        sid = _uuid(stream_id, "stream id")
        assert sid is not None
        events = queries.stream_events(self.app, sid)
        return timeline(events, queries.cut_version(events, at, as_of))["events"]

    def next_action(self, chat_id: Any, at: int | None = None, as_of: str | None = None,
                    with_current_settings: bool = False) -> dict[str, Any]:
        """What a worker should do next for the chat (or what it should have done at version ``at`` / time
        ``as_of``, with the other streams as of then), and why."""
        from commands.next_action import next_action_report

        return next_action_report(self.app, _uuid(chat_id, "chat id"), version=at, as_of=as_of,
                                  with_current_settings=with_current_settings)

    # -- the log ------------------------------------------------------------------------------------------

    def head(self) -> int:
        """The notification id of the last recorded event (0 for an empty ledger)."""
        return self.app.head()

    def events(self, after: int = 0, limit: int = 100) -> list[LoggedEvent]:
        """Up to ``limit`` events recorded after notification id ``after``, in log order."""
        from commands.eventlog import logged_event

        return [LoggedEvent(**logged_event(self.app, n)) for n in self.app.notifications(after, limit)]

    def subscribe(self, after: int = 0, *, stop: threading.Event | None = None, poll_interval: float = 0.5,
                  batch: int = 100) -> Iterator[LoggedEvent]:
        """Every event after ``after`` in log order, then each new one as it is recorded, until ``stop`` is set
        (forever without one). Resume after a disconnect with ``after`` = the last ``notification_id`` seen:
        nothing is lost or repeated."""
        stop = stop or threading.Event()
        while not stop.is_set():
            page = self.events(after, batch)
            for event in page:
                yield event
                after = event.notification_id
                if stop.is_set():
                    return
            if len(page) < batch:
                stop.wait(poll_interval)
