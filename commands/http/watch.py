"""The log watcher: one thread per process that notices new events, reads each of them once, and wakes
every waiting stream.

The events it reads form the **tail**: the notifications after ``floor`` up to ``head``, every one of them,
in log order, each decoded and encoded (the SSE ``data`` text) once, with the stream's scope and, for a
tool-call execution stream, its chat. A stream whose position is inside the tail filters it in memory
(``commands.http.stream``); one further behind (a resume from long ago) reads pages from the database until
it reaches the tail. The tail holds at most ``TAIL`` notifications (the oldest are dropped and ``floor``
moves up); while no stream is open nothing is read but the head (the tail is empty and ``floor`` = head).
It is changed only on the event loop (what is read or recorded is handed over to it), so the streams read
it without a lock, and a stream sees the tail and ``head`` move together.

On PostgreSQL it LISTENs on the event store's NOTIFY channel (each insert notifies) and also polls the head
every ``PG_POLL`` seconds, since a notification is only a hint (a lost one, a dropped LISTEN connection);
on SQLite it polls the head every ``SQLITE_POLL`` seconds. The saves of this process are not read back:
the application hands each save's recordings to ``recorded`` (``ChatLedgerApp.listeners``) in the saving
thread, right after its commit, and when their first notification directly follows the tail (nothing
recorded elsewhere in between) they join it as they are; otherwise the thread reads the log from the tail
on. Reads and hand-overs take one lock, so the tail is handed to the loop in log order, once. Waiters are
asyncio tasks: the thread sets the current ``asyncio.Event`` through the loop and replaces it.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
from typing import Any, NamedTuple
from uuid import UUID

import msgspec

log = logging.getLogger(__name__)

SQLITE_POLL = 0.02
PG_POLL = 0.5
#: notifications the tail keeps at most
TAIL = 4096
#: notifications read per query while filling the tail
READ_PAGE = 500


class Tailed(NamedTuple):
    """One notification of the tail: what a stream filters on and what it sends."""

    id: int
    stream_id: UUID
    resource: Any  # commands.access.Resource, or None (a stream with no scope)
    chat: UUID | None  # the chat of a tool-call execution stream (None for any other)
    type: str
    data: str  # the event as GET /v1/events shows it, JSON

    def message(self) -> bytes:
        """The event as one Server-Sent Events message (``id``, ``event``, ``data``: the lines and the
        ``\r\n`` separators Litestar's ``ServerSentEventMessage`` writes; the JSON has no line break)."""
        return f"id: {self.id}\r\nevent: {self.type}\r\ndata: {self.data}\r\n\r\n".encode()


class LogWatcher:
    def __init__(self, app: Any, url: str, poll_interval: float | None = None, scopes: Any = None) -> None:
        from ledger.store import DatabaseURL

        self.app = app
        self.scopes = scopes
        self.db = DatabaseURL.parse(url)
        self.poll = poll_interval or (PG_POLL if self.db.backend == "postgres" else SQLITE_POLL)
        self.head = app.head()  # the tail's head: changed on the loop only
        self.floor = self.head  # the tail holds every notification in (floor, head]
        self.tail: list[Tailed] = []
        self._ids: list[int] = []
        self._read = self.head  # where the thread's next read starts
        self.streams = 0  # open event streams (changed on the loop; while 0 the thread reads no events)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._lock = threading.Lock()  # held by whoever reads or hands over the tail (``_read``)
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self.app.listeners.append(self.recorded)
        self._spawn(self._run, "log-watcher")
        channel = getattr(self.app.recorder, "channel_name", None)
        if self.db.backend == "postgres" and channel:
            self._spawn(lambda: self._listen(channel), "log-listen")

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def close(self) -> None:
        if self.recorded in self.app.listeners:
            self.app.listeners.remove(self.recorded)
        self._halt.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=5)

    def recorded(self, recordings: Any) -> None:
        """A save of this process, committed (module docstring): its events join the tail when they directly
        follow it; else the thread reads the log."""
        if not recordings:
            return
        try:
            self._recorded(recordings)
        except Exception as e:  # (a scope that could not be read): the thread reads the log instead
            log.warning("log watcher: %s", e)
            self._wake.set()

    def _recorded(self, recordings: Any) -> None:
        ids = [r.notification.id for r in recordings]
        with self._lock:
            if ids[-1] <= self._read:
                return  # (read from the log already)
            if not self.streams:
                self._read = ids[-1]
                self._hand_over((ids[-1], []), reset=True)
            elif ids[0] == self._read + 1 and ids[-1] - ids[0] == len(ids) - 1:
                self._read = ids[-1]
                self._hand_over((ids[-1], [self._tailed(r.notification, r.domain_event) for r in recordings]))
            else:
                self._wake.set()  # something recorded elsewhere comes first: read it from the log

    def since(self, position: int) -> list[Tailed] | None:
        """The tail's notifications after ``position`` (every one of them up to ``head``), or None when
        ``position`` is below the tail (read those from the database). Call on the event loop."""
        if position < self.floor:
            return None
        return self.tail[bisect.bisect_right(self._ids, position):]

    async def wait_beyond(self, position: int, timeout: float) -> bool:
        """Wait until the head is past ``position`` (True) or ``timeout`` seconds pass (False)."""
        assert self._event is not None
        if self.head > position:
            return True
        event = self._event
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        return self.head > position

    def _run(self) -> None:
        while not self._halt.is_set():
            self._wake.wait(self.poll)
            self._wake.clear()
            try:  # one query per wake-up when nothing is new (no separate look at the head)
                if not self.streams:  # nobody reads the tail: keep only its head (and floor) current
                    with self._lock:
                        head = self.app.head()
                        if head > self._read:
                            self._read = head
                            self._hand_over((head, []), reset=True)
                    continue
                while not self._halt.is_set():
                    with self._lock:
                        read = self._read_page()
                        if read[1]:
                            self._hand_over(read)
                    if len(read[1]) < READ_PAGE:
                        break
            except Exception as e:  # the database is away: streams wait, readers see the error themselves
                log.warning("log watcher: %s", e)
                self._halt.wait(0.5)
                continue

    def _read_page(self) -> tuple[int, list[Tailed]]:
        notes = self.app.notifications(self._read, READ_PAGE)
        page = [self._tailed(n) for n in notes]
        if notes:
            self._read = notes[-1].id
        return self._read, page

    def _tailed(self, n: Any, domain_event: Any = None) -> Tailed:
        from commands.eventlog import logged_event

        sid = n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id))
        event = logged_event(self.app, n, domain_event)
        first = domain_event if domain_event is not None and n.originator_version == 1 else None
        known = self.scopes.entry(sid, first) if self.scopes is not None else None
        resource, chat = known if known is not None else (None, None)
        return Tailed(n.id, sid, resource, chat, event["type"], msgspec.json.encode(event).decode())

    def _hand_over(self, read: tuple[int, list[Tailed]], reset: bool = False) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._extend, *read, reset)

    def _extend(self, head: int, page: list[Tailed], reset: bool = False) -> None:
        """On the loop: append what the thread read, drop the oldest beyond ``TAIL``, wake the streams.
        ``reset``: the thread skipped to ``head`` without reading (no stream was open), so the tail is empty
        from there (a stream opened meanwhile below it reads the database until it gets there)."""
        if head <= self.head:
            return
        if reset:
            self.tail, self._ids, self.floor = [], [], head
        self.tail.extend(page)
        self._ids.extend(t.id for t in page)
        if len(self.tail) > 2 * TAIL:  # trim now and then, not at every page
            cut = len(self.tail) - TAIL
            self.floor = self._ids[cut - 1]
            del self.tail[:cut], self._ids[:cut]
        self.head = head
        event, self._event = self._event, asyncio.Event()
        if event is not None:
            event.set()

    def _listen(self, channel: str) -> None:
        import psycopg

        while not self._halt.is_set():
            try:
                with psycopg.connect(self.db.psycopg_conninfo(), autocommit=True) as conn:
                    conn.execute(f'LISTEN "{channel}"')
                    self._wake.set()
                    while not self._halt.is_set():
                        for _ in conn.notifies(timeout=0.1, stop_after=1):
                            self._wake.set()
            except psycopg.Error as e:
                log.warning("log watcher LISTEN connection lost: %s", e)
                self._halt.wait(1.0)
