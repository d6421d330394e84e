"""Following the log: keeping projections caught up until stopped (``Follower``, ``follow``), with
``runner.catch_up`` each round, woken by PostgreSQL's LISTEN/NOTIFY where there is one."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Sequence

from projections.backend import SqlBackend
from projections.engine import BuildBusy, Projection, ProjectionError
from projections.runner import catch_up
from projections.sqlbase import transient_errors

log = logging.getLogger(__name__)


# -- following the log ----------------------------------------------------------------------------
class Follower:
    """Keeps projections caught up with the log until ``stop_event`` is set.

    Every ``poll_interval`` seconds it catches up every projection. On PostgreSQL it also LISTENs on the
    event store's NOTIFY channel on a dedicated connection, and a notification wakes it at once; the
    notification is only a hint, so a lost notification or a dead LISTEN connection costs at most one
    poll interval. The LISTEN connection is reopened with exponential backoff (``reconnect_delay``:
    initial, maximum seconds) and every reconnect triggers a catch-up (notifications sent while it was
    down are lost). Transient database errors during a catch-up are logged and retried with the same
    backoff. A projection whose build another writer holds (a rebuild) is skipped for the round
    (``busy``) and tried again at the next one. A projection that fails otherwise (an event it cannot
    apply: recorded with its build; a definition that needs a rebuild) stops being followed (``failed``,
    and ``on_failure`` is called with it) while the others go on; when every projection has failed, the
    follower stops and raises the first failure. ``on_batch(projection, done, total)`` is called after
    each committed batch (notifications done of the ``total`` behind when that catch-up began).
    """

    def __init__(self, app: Any, projections: Sequence[Projection], backend: SqlBackend,
                 poll_interval: float = 1.0, batch_size: int | None = None,
                 reconnect_delay: tuple[float, float] = (0.1, 5.0),
                 on_failure: Callable[[Projection, ProjectionError], None] | None = None,
                 on_batch: Callable[[Projection, int, int], None] | None = None) -> None:
        self.app = app
        self.on_batch = on_batch
        self.projections = list(projections)
        self.backend = backend
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self.reconnect_delay = reconnect_delay
        self.on_failure = on_failure
        self.listen_pid: int | None = None  # backend pid of the LISTEN connection (None when down)
        self.listen_connects = 0
        self.catch_ups = 0
        self.last_error: BaseException | None = None
        self.failed: dict[str, ProjectionError] = {}  # projection name -> why it is no longer followed
        self.busy: dict[str, str] = {}  # projection name -> who held it at the last round
        self._wake = threading.Event()
        self._halt = threading.Event()  # tells the LISTEN thread to end
        self._transient = transient_errors()

    def _listen_target(self) -> tuple[str, str] | None:
        channel = getattr(self.app.recorder, "channel_name", None)
        conninfo = getattr(self.backend, "conninfo", None)
        if channel is None or conninfo is None:
            return None  # SQLite: polling only
        return conninfo, channel

    def run(self, stop_event: threading.Event) -> None:
        listener = None
        target = self._listen_target()
        self._halt.clear()
        if target is not None:
            listener = threading.Thread(target=self._listen, args=target,
                                        name="projections-listen", daemon=True)
            listener.start()
        delay = self.reconnect_delay[0]
        try:
            while not stop_event.is_set():
                self._wake.clear()
                try:
                    self._round()
                    self.catch_ups += 1
                    delay = self.reconnect_delay[0]
                    wait = self.poll_interval
                except self._transient as e:
                    self.last_error = e
                    log.warning("projection catch-up failed (retrying in %.1fs): %s", delay, e)
                    wait, delay = delay, min(delay * 2, self.reconnect_delay[1])
                self._sleep(wait, stop_event)
        finally:
            self._halt.set()
            if listener is not None:
                listener.join(timeout=5)

    def _round(self) -> None:
        """Catch every followed projection up once (transient database errors propagate: retried)."""
        for p in self.projections:
            if p.name in self.failed:
                continue
            try:
                progress = None if self.on_batch is None else (
                    lambda done, total, p=p: self.on_batch(p, done, total) if done else None)  # type: ignore[misc]
                catch_up(self.app, p, self.backend, self.batch_size, progress, purpose="follow")
                self.busy.pop(p.name, None)
            except BuildBusy as e:
                self.busy[p.name] = str(e)
            except ProjectionError as e:
                self.failed[p.name] = e
                self.last_error = e
                if self.on_failure is not None:
                    self.on_failure(p, e)
                else:
                    log.error("no longer following %s: %s", p.name, e)
        if self.projections and len(self.failed) == len(self.projections):
            raise next(iter(self.failed.values()))

    def _sleep(self, seconds: float, stop_event: threading.Event) -> None:
        deadline = time.monotonic() + seconds
        while not stop_event.is_set() and not self._wake.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wake.wait(min(remaining, 0.05))

    def _listen(self, conninfo: str, channel: str) -> None:
        import psycopg

        delay = self.reconnect_delay[0]
        while not self._halt.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    conn.execute(f'LISTEN "{channel}"')
                    self.listen_pid = conn.info.backend_pid
                    self.listen_connects += 1
                    delay = self.reconnect_delay[0]
                    self._wake.set()  # anything sent while we were not listening was lost
                    while not self._halt.is_set():
                        for _ in conn.notifies(timeout=0.1, stop_after=1):
                            self._wake.set()
            except psycopg.Error as e:
                self.listen_pid = None
                self.last_error = e
                log.warning("projection LISTEN connection lost (reconnecting in %.1fs): %s", delay, e)
                self._halt.wait(delay)
                delay = min(delay * 2, self.reconnect_delay[1])
        self.listen_pid = None


def follow(app: Any, projections: Projection | Sequence[Projection], backend: SqlBackend,
           poll_interval: float = 1.0, stop_event: threading.Event | None = None, batch_size: int | None = None,
           reconnect_delay: tuple[float, float] = (0.1, 5.0),
           on_failure: Callable[[Projection, ProjectionError], None] | None = None) -> Follower:
    """Follow the log until ``stop_event`` is set (forever without one). Returns the follower (stats)."""
    if isinstance(projections, Projection):
        projections = [projections]
    follower = Follower(app, projections, backend, poll_interval, batch_size, reconnect_delay, on_failure)
    follower.run(stop_event or threading.Event())
    return follower
