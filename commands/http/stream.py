"""The event log over HTTP: ``GET /v1/events`` (pages) and ``GET /v1/events/stream`` (Server-Sent Events).

Both show only the events of streams the token may read (``commands.access.visible``), optionally of one
organization (``org``) or one chat (``chat``: its own events and its tool calls' executions). In the stream
each event is one message, ``id:`` its notification id, ``event:`` its type, ``data:`` the event as
``/v1/events`` gives it. Resume rule: reconnect with ``Last-Event-ID`` (or ``after``) = the last id received;
the stream goes on with the first visible event after it, in log order, so nothing is lost or repeated.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator
from uuid import UUID

import msgspec
from litestar import Request, get
from litestar.datastructures import State
from litestar.params import Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from commands import access
from commands.access import Principal, Resource, check
from commands.api import LoggedEvent
from commands.eventlog import logged_event
from commands.http.routes import ERRORS, bad_request, principal_dependency, service
from commands.http.service import Service

#: notifications read per page while looking for visible events
SCAN_PAGE = 500
#: notifications one request scans at most (a page of mostly invisible events ends early: ``next_after``)
SCAN_LIMIT = 10_000
#: seconds between keep-alive comments on an idle stream
KEEPALIVE = 15.0
#: seconds between looks at whether the stream's token still authenticates (revoked, expired, its user removed
#: from the organization): the stream ends within about this long after any of them is recorded
RECHECK = 0.5


class EventPage(msgspec.Struct):
    """Visible events after ``after``; ``next_after`` is where the next page starts (the last notification
    looked at, visible or not), ``head`` the last notification id recorded."""

    events: list[LoggedEvent]
    next_after: int
    head: int


class Filter:
    def __init__(self, svc: Service, p: Principal, org: UUID | None, chat: UUID | None) -> None:
        self.svc, self.p, self.org, self.chat = svc, p, org, chat
        if org is not None:
            check(p, "read", Resource("catalog", org))
        if chat is not None:
            svc.scopes.check_read(p, svc.scopes.chat(chat))

    def keeps(self, n: Any) -> bool:
        sid = n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id))
        resource = self.svc.scopes.of(sid)
        return self.keeps_stream(sid, resource, lambda: self.svc.scopes.chat_of(sid))

    def keeps_stream(self, sid: UUID, resource: Any, chat_of: Any) -> bool:
        """Whether events of stream ``sid`` (of ``resource``) are shown; ``chat_of()`` the chat of a tool-call
        execution stream, asked only when it matters."""
        if resource is None or self.svc.scopes.may_read(self.p, resource) is not None:
            return False
        if self.org is not None and resource.org != self.org:
            return False
        if self.chat is not None and sid != self.chat:
            return resource.kind == "chat" and chat_of() == self.chat
        return True

    def page(self, after: int, limit: int, app: Any = None) -> EventPage:
        """``app``: the ledger application to read (a standby's, ``Service.read``); the primary's by default."""
        app = app or self.svc.app
        head = app.head()
        found: list[LoggedEvent] = []
        position, scanned = after, 0
        while len(found) < limit and scanned < SCAN_LIMIT:
            notes = app.notifications(position, SCAN_PAGE)
            if not notes:
                break
            for n in notes:
                position = n.id
                if self.keeps(n):
                    found.append(LoggedEvent(**logged_event(app, n)))
                    if len(found) == limit:
                        break
            scanned += len(notes)
        return EventPage(found, position, max(head, position))


@get("/v1/events", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="Recorded events after a notification id, in log order (only those the token may read)")
def get_events(principal: Principal, state: State, after: int = Parameter(default=0, ge=0, le=2**62),
               limit: int = Parameter(default=100, ge=1, le=1000), org: UUID | None = None,
               chat: UUID | None = None) -> EventPage:
    selection = Filter(service(state), principal, org, chat)
    return service(state).read(principal, (), lambda ledger: selection.page(after, limit, ledger.app))


def _resume_point(request: Request[Any, Any, Any], after: int | None) -> int:
    last = request.headers.get("last-event-id")
    if last is not None and last.strip():
        if not last.strip().isdigit():
            raise bad_request(f"Last-Event-ID must be a notification id, not {last!r}")
        return int(last)
    return after or 0


@get("/v1/events/stream", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="The event log live (Server-Sent Events; resume with Last-Event-ID)")
def get_stream(request: Request[Any, Any, Any], principal: Principal, state: State,
               after: int | None = Parameter(default=None, ge=0, le=2**62), org: UUID | None = None,
               chat: UUID | None = None) -> ServerSentEvent:
    svc = service(state)
    selection = Filter(svc, principal, org, chat)
    start = _resume_point(request, after)
    release = svc.limits.open_stream(principal)  # given back when the stream ends, however it ends
    return ServerSentEvent(_events(svc, selection, start, release), headers={"Cache-Control": "no-store",
                                                                    "X-Accel-Buffering": "no"})


class Messages(ServerSentEventMessage):
    """Several messages, already encoded (``Tailed.message``), sent as one chunk of the stream."""

    def __init__(self, encoded: bytes) -> None:
        super().__init__()
        self.encoded = encoded

    def encode(self) -> bytes:
        return self.encoded


async def _events(svc: Service, selection: Filter, position: int,
                  release: Any = None) -> AsyncIterator[ServerSentEventMessage]:
    """From ``position`` on: pages from the database while the stream is behind the watcher's tail, then
    the tail, filtered in memory (every notification in the tail was read once for every stream)."""
    encode = msgspec.json.encode
    watcher = svc.watcher
    watcher.streams += 1
    try:
        async for message in _follow(watcher, selection, position, encode):
            yield message
    finally:
        watcher.streams -= 1
        if release is not None:
            release()


async def _follow(watcher: Any, selection: Filter, position: int,
                  encode: Any) -> AsyncIterator[ServerSentEventMessage]:
    """The stream's loop. Before each write, and every ``RECHECK`` seconds while it waits, it asks whether the
    token still authenticates; when it no longer does, the last message is an ``error`` event with the code
    (``token_revoked``, ``token_expired``, ``not_organization_member``) and the stream ends."""
    svc, principal = selection.svc, selection.p
    idle = 0.0
    while True:
        code = await svc.still_refused(principal)
        if code is not None:
            yield ServerSentEventMessage(event="error", data=encode({"error": access.refusal(code).to_dict()}).decode())
            return
        tail = watcher.since(position)
        if tail is None:
            page = await asyncio.to_thread(selection.page, position, SCAN_PAGE)
            for event in page.events:
                yield ServerSentEventMessage(data=encode(event).decode(), id=event.notification_id,
                                             event=event.type)
            position = page.next_after
            if page.events or position < watcher.head:
                continue
        else:
            head = watcher.head
            kept = [t.message() for t in tail if selection.keeps_stream(t.stream_id, t.resource, lambda t=t: t.chat)]
            if kept:
                yield Messages(b"".join(kept))  # one write for what arrived together
            position = max(position, head)
            if watcher.head > position:
                continue
        if await watcher.wait_beyond(position, RECHECK):
            idle = 0.0
        else:
            idle += RECHECK
            if idle >= KEEPALIVE:
                idle = 0.0
                yield ServerSentEventMessage(comment="keep-alive", data=None)


ROUTES = [get_events, get_stream]
