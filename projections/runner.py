"""Driving projections from the notification log: catch up, follow, rebuild (in place or blue/green), status.

Which build does the code maintain? (``maintained_version``)

* nothing is live yet: the declared ``Projection.version`` (created if missing); it goes live, in one
  switch, the first time a catch-up reaches the head, so readers never see it half built;
* the live build was made by this definition (same ``definition_version`` and table fingerprint): that
  build (its number may be higher than the declared version after a blue/green rebuild of an unchanged
  definition);
* otherwise the live build belongs to another definition: catching up is refused until a rebuild
  (in place, or blue/green) builds and switches to a build of this definition.

Notifications are read with the library's recorder (``select_notifications``, topic filter in SQL), in
windows of ``batch_size`` notification ids; each page is decoded before the view transaction opens, then
applied with its tracking position in one transaction (``SqlBackend.apply_batch``).
"""

from __future__ import annotations

import gc
import logging
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import msgspec

from projections.backend import Diff, SqlBackend, Switch
from projections.engine import BuildsNotAligned, PositionConflict, Projection, ProjectionError

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


class RebuildResult(msgspec.Struct):
    projection: str
    mode: str  # "in_place" | "blue_green"
    from_version: int | None  # the live version before
    to_version: int  # the version built
    position: int  # where the new build stands
    events: int  # events applied while building
    switched: bool  # readers now use to_version
    diff: Diff | None = None  # blue/green: the comparison with the live version
    switch: Switch | None = None


class ProjectionStatus(msgspec.Struct):
    projection: str
    declared_version: int  # Projection.version in the code
    live_version: int | None  # the version readers use
    version: int | None  # the build the code maintains (None: needs a rebuild)
    position: int  # last notification applied to that build (or to the live one)
    head: int  # last notification in the log
    lag: int  # head - position
    state: str  # "live" | "building" | "not built" | "needs rebuild"


def _is_maintainable(projection: Projection, build: Any) -> bool:
    return (build is not None and build.definition_version == projection.version
            and build.fingerprint == projection.fingerprint())


def maintained_version(projection: Projection, backend: SqlBackend, create: bool = True) -> int:
    """The build ``catch_up`` writes to (see the module doc). Creates the first build when asked."""
    projection.check()
    builds = backend.builds(projection.name)
    live = backend.live_version(projection.name)
    if live is not None:
        if _is_maintainable(projection, builds.get(live)):
            return live
        b = builds.get(live)
        raise ProjectionError(
            f"projection {projection.name}: the live version v{live} was built by definition "
            f"v{b.definition_version if b else '?'}, the code defines v{projection.version}"
            f"{'' if b is None or b.definition_version != projection.version else ' with other tables'}: "
            "rebuild it (in place, or blue/green)")
    version = projection.version
    if create:
        existing = builds.get(version)
        # A leftover build of another definition is not read by anyone: replace it.
        backend.create_build(projection, version, replace=existing is not None
                             and not _is_maintainable(projection, existing))
    return version


def _next_version(projection: Projection, live: int | None, builds: dict[int, Any]) -> int:
    """The number of a new build: the declared version when it is new, else one past every build."""
    if live is None or projection.version > live:
        return projection.version
    return max([live, *builds]) + 1


def _decode(app: Any, projection: Projection, notes: Sequence[Any]) -> list[tuple[int, Any]]:
    items = []
    for n in notes:
        try:
            items.append((n.id, app.mapper.to_domain_event(n)))
        except Exception as e:
            raise ProjectionError(f"projection {projection.name}: cannot decode notification {n.id} "
                                  f"({n.topic}): {e}") from e
    return items


_pause_lock = threading.Lock()
_pauses = 0
_resume = False


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection while one page is read, decoded and applied.

    A page holds hundreds of decoded events at once; with the collector on, the young generations are
    scanned dozens of times per page while all of them are still referenced, promoting them, and the
    old generation (the fold's cached states) gets fully scanned every few pages: about a fifth of a
    rebuild's time. Paused, the page's objects are freed by reference counting when it is done and the
    collector runs once afterwards over what survived. Reentrant and thread-safe (nested or concurrent
    pauses resume collection when the last one ends, and only if it was on before the first)."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


def _run(app: Any, projection: Projection, backend: SqlBackend, version: int, batch_size: int,
         progress: Progress | None, stop: int | None = None) -> int:
    """Apply every notification after the build's position up to ``stop`` (default: the head now)."""
    name = projection.name
    position = backend.position(name, version)
    if position is None:
        raise ProjectionError(f"projection {name} v{version} does not exist")
    start = position
    head = app.head() if stop is None else stop
    topics = None if projection.topics is None else list(projection.topics)
    total = max(head - start, 0)
    applied = 0
    if progress is not None:
        progress(0, total)
    while position < head:
        # A page is a window of ``batch_size`` notification ids (not "the next batch_size matching
        # rows"): with a topic filter, an open-ended range lets PostgreSQL plan a scan of the whole rest
        # of the log and a sort, per page, when its statistics are stale (as after a bulk import) — a
        # rebuild became quadratic. Ids <= head are all committed when head is read (the store commits
        # in notification order), so a window, once read, has been seen whole.
        window_end = min(position + batch_size, head)
        with _collector_paused():
            if topics == []:  # handles nothing: only the position moves
                notes: Sequence[Any] = []
            else:
                notes = app.recorder.select_notifications(start=position, limit=batch_size, stop=window_end,
                                                          topics=topics or (), inclusive_of_start=False)
            items = _decode(app, projection, notes)
            if not items and window_end < head:
                position = window_end  # nothing for this projection here: move on, commit with the next batch
            else:
                try:
                    position = backend.apply_batch(projection, version, items, upto=window_end)
                    applied += len(items)
                except PositionConflict:
                    # Another writer applied these notifications first (exactly once holds); go on from there.
                    position = backend.position(name, version) or 0
            del notes, items
        if progress is not None:
            progress(min(position, head) - start, total)
    return applied


def catch_up(app: Any, projection: Projection, backend: SqlBackend, batch_size: int = 500,
             progress: Progress | None = None) -> int:
    """Bring the maintained build up to the head of the log; returns the number of events applied.

    Commits every ``batch_size`` notifications (rows + position in one transaction), so an interrupted
    catch-up resumes where it stopped. ``progress(done, total)`` is called after each batch (in
    notifications). The first build of a projection becomes live when it reaches the head."""
    version = maintained_version(projection, backend)
    applied = _run(app, projection, backend, version, batch_size, progress)
    if backend.live_version(projection.name) is None:
        try:
            backend.switch_live(projection.name, None, version, mode="initial")
        except ProjectionError:
            if backend.live_version(projection.name) != version:  # someone else switched to another one
                raise
    return applied


def rebuild(app: Any, projection: Projection, backend: SqlBackend, blue_green: bool = False,
            accept_diff: bool = False, batch_size: int = 500, progress: Progress | None = None) -> RebuildResult:
    """Rebuild a projection from the start of the log.

    In place: the maintained build (or, when the code's definition differs from the live one, a new
    build that then goes live without comparison) is dropped, recreated and caught up. Readers of the
    live build see it refill while this runs.

    Blue/green: a new build (the declared version when it is new, else one past the last) is made
    beside the live one and caught up to the live build's position; the two are compared row by row at
    that position (``SqlBackend.compare``); readers switch to the new build, in one transaction, only when
    the builds are equal or ``accept_diff`` is given, and the switch is logged with the diff's digest and
    size; after a switch the new build is caught up to the head. A refused switch leaves the new build
    beside the live one, unread (``result.diff`` says why; run again with ``accept_diff``). After a
    switch the previous live build is kept (a reader that resolved it just before the switch can
    finish); older builds are dropped."""
    projection.check()
    name = projection.name
    builds = backend.builds(name)
    live = backend.live_version(name)
    maintainable = live is not None and _is_maintainable(projection, builds.get(live))

    if not blue_green:
        target = live if maintainable else _next_version(projection, live, builds)
        assert target is not None
        backend.create_build(projection, target, replace=True)
        events = _run(app, projection, backend, target, batch_size, progress)
        switch = None
        if live != target:
            switch = backend.switch_live(name, live, target, mode="in_place")
            _prune(backend, name, keep={target, live})
        return RebuildResult(name, "in_place", live, target, backend.position(name, target) or 0, events,
                             live != target, None, switch)

    target = _next_version(projection, live, builds)
    backend.create_build(projection, target, replace=True)
    if live is None:
        events = _run(app, projection, backend, target, batch_size, progress)
        switch = backend.switch_live(name, None, target, mode="blue_green")
        return RebuildResult(name, "blue_green", None, target, backend.position(name, target) or 0, events,
                             True, None, switch)

    events = 0
    diff: Diff | None = None
    for _ in range(20):  # the live build may move while we build; bounded retries
        p_live = backend.position(name, live) or 0
        p_new = backend.position(name, target) or 0
        if p_new < p_live:
            events += _run(app, projection, backend, target, batch_size, progress, stop=p_live)
        elif p_new > p_live:
            if not maintainable:
                raise ProjectionError(f"projection {name}: the new build v{target} is past the live v{live} "
                                      f"({p_new} > {p_live}) and this code cannot advance v{live}")
            _run(app, projection, backend, live, batch_size, None, stop=p_new)
        try:
            diff = backend.compare(name, live, target)
            break
        except BuildsNotAligned:  # the live build moved between our reads: align again
            continue
    if diff is None:
        raise ProjectionError(f"projection {name}: the live build keeps moving; stop its follower and retry")
    if not (diff.equal or accept_diff):
        return RebuildResult(name, "blue_green", live, target, diff.position, events, False, diff, None)
    switch = backend.switch_live(name, live, target, mode="blue_green", diff=diff,
                                 accepted_with_diff=not diff.equal)
    _prune(backend, name, keep={target, live})
    events += _run(app, projection, backend, target, batch_size, progress)
    return RebuildResult(name, "blue_green", live, target, backend.position(name, target) or 0, events,
                         True, diff, switch)


def _prune(backend: SqlBackend, name: str, keep: set[int | None]) -> None:
    for version in backend.builds(name):
        if version not in keep:
            try:
                backend.drop_build(name, version)
            except ProjectionError as e:  # became live meanwhile: keep it
                log.warning("not dropping %s v%s: %s", name, version, e)


def status(app: Any, projections: Sequence[Projection], backend: SqlBackend) -> list[ProjectionStatus]:
    """Per projection: the live and maintained versions, the position, the head of the log and the lag."""
    head = app.head()
    out = []
    for p in projections:
        builds = backend.builds(p.name)
        live = backend.live_version(p.name)
        if live is not None:
            b = builds.get(live)
            ok = _is_maintainable(p, b)
            position = b.position if b else 0
            out.append(ProjectionStatus(p.name, p.version, live, live if ok else None, position, head,
                                        head - position, "live" if ok else "needs rebuild"))
        elif p.version in builds:
            position = builds[p.version].position
            out.append(ProjectionStatus(p.name, p.version, None, p.version, position, head, head - position,
                                        "building"))
        else:
            out.append(ProjectionStatus(p.name, p.version, None, None, 0, head, head, "not built"))
    return out


# -- following the log ----------------------------------------------------------------------------
def _transient_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [sqlite3.OperationalError]
    try:
        import psycopg
        import psycopg_pool

        errors += [psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout]
    except ImportError:  # pragma: no cover
        pass
    from eventsourcing.persistence import InterfaceError, OperationalError

    errors += [OperationalError, InterfaceError]
    return tuple(errors)


class Follower:
    """Keeps projections caught up with the log until ``stop_event`` is set.

    Every ``poll_interval`` seconds it catches up every projection. On PostgreSQL it also LISTENs on the
    event store's NOTIFY channel on a dedicated connection, and a notification wakes it at once; the
    notification is only a hint, so a lost notification or a dead LISTEN connection costs at most one
    poll interval. The LISTEN connection is reopened with exponential backoff (``reconnect_delay``:
    initial, maximum seconds) and every reconnect triggers a catch-up (notifications sent while it was
    down are lost). Transient database errors during a catch-up are logged and retried with the same
    backoff; any other error (a poison event, a projection bug) stops the follower and is raised.
    """

    def __init__(self, app: Any, projections: Sequence[Projection], backend: SqlBackend,
                 poll_interval: float = 1.0, batch_size: int = 500,
                 reconnect_delay: tuple[float, float] = (0.1, 5.0)) -> None:
        self.app = app
        self.projections = list(projections)
        self.backend = backend
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self.reconnect_delay = reconnect_delay
        self.listen_pid: int | None = None  # backend pid of the LISTEN connection (None when down)
        self.listen_connects = 0
        self.catch_ups = 0
        self.last_error: BaseException | None = None
        self._wake = threading.Event()
        self._halt = threading.Event()  # tells the LISTEN thread to end
        self._transient = _transient_errors()

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
                    for p in self.projections:
                        catch_up(self.app, p, self.backend, self.batch_size)
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
           poll_interval: float = 1.0, stop_event: threading.Event | None = None, batch_size: int = 500,
           reconnect_delay: tuple[float, float] = (0.1, 5.0)) -> Follower:
    """Follow the log until ``stop_event`` is set (forever without one). Returns the follower (stats)."""
    if isinstance(projections, Projection):
        projections = [projections]
    follower = Follower(app, projections, backend, poll_interval, batch_size, reconnect_delay)
    follower.run(stop_event or threading.Event())
    return follower
