"""The log watcher: one thread per process that notices new events and wakes every waiting stream.

On PostgreSQL it LISTENs on the event store's NOTIFY channel (each insert notifies) and also polls the head
every ``PG_POLL`` seconds, since a notification is only a hint (a lost one, a dropped LISTEN connection);
on SQLite it polls the head every ``SQLITE_POLL`` seconds. A command this process recorded pokes it
(``poke``) so its own writes are streamed without waiting for the next poll. Waiters are asyncio tasks: the
thread sets the current ``asyncio.Event`` through the loop and replaces it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

SQLITE_POLL = 0.02
PG_POLL = 0.5


class LogWatcher:
    def __init__(self, app: Any, url: str, poll_interval: float | None = None) -> None:
        from ledger.store import DatabaseURL

        self.app = app
        self.db = DatabaseURL.parse(url)
        self.poll = poll_interval or (PG_POLL if self.db.backend == "postgres" else SQLITE_POLL)
        self.head = app.head()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._spawn(self._run, "log-watcher")
        channel = getattr(self.app.recorder, "channel_name", None)
        if self.db.backend == "postgres" and channel:
            self._spawn(lambda: self._listen(channel), "log-listen")

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def close(self) -> None:
        self._halt.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=5)

    def poke(self) -> None:
        """Look at the head now (a command was just recorded)."""
        self._wake.set()

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
            try:
                head = self.app.head()
            except Exception as e:  # the database is away: streams wait, readers see the error themselves
                log.warning("log watcher: %s", e)
                self._halt.wait(0.5)
                continue
            if head > self.head:
                self.head = head
                if self._loop is not None and not self._loop.is_closed():
                    self._loop.call_soon_threadsafe(self._notify)

    def _notify(self) -> None:
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
