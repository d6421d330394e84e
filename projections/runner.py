"""Driving projections from the notification log: catch up, follow, rebuild (in place or blue/green), prune,
status.

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

One writer per build (``projections.leases``): catch-up and follow hold the build's lease batch by batch
and read its position under it, so a rebuild waits at most one batch for them; while a rebuild holds it
they wait (catch-up, up to ``wait`` seconds, then ``BuildBusy``) or skip a round (follow). A rebuild holds
the projection's rebuild lease (a second rebuild or a prune stops at once) and its build's lease for its
whole run; blue/green also holds the live build's lease while it aligns, compares and switches.

A projection that cannot apply an event stops at that event, for itself only: the events before it are
committed, and the failure (stream, version, notification, reason) is recorded with the build
(``SqlBackend.failures``) for ``status`` and ``events verify``, until a batch commits past it.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, ContextManager, Iterator, Sequence

import msgspec

from projections.backend import SqlBackend
from projections.records import Diff, Switch
from projections.sqlbase import TRANSIENT_ERRORS
from projections.engine import BuildBusy, BuildGone, PositionConflict, Projection, ProjectionError, ProjectionFailed
from projections.leases import REBUILD, LeaseHolder

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

#: How long a rebuild waits for the catch-up or follow batch that holds its build's lease.
REBUILD_WAIT = 30.0


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
    streamwise: bool = False  # built stream by stream up to a fixed head, then caught up in log order
    workers: int = 1  # processes that folded the streams (stream-wise builds)
    worker_peak_rss_mb: list[float] = []  # peak RSS of each worker process (none: folded in this process)


class OtherBuild(msgspec.Struct):
    """A build beside the live one: left by a killed or refused blue/green rebuild, kept after a switch
    (``previous``), or being built now (``building``: its lease is held). ``projections prune`` (and the
    next rebuild) drop the ones nobody is building."""

    version: int
    definition_version: int
    position: int
    state: str  # "building" | "previous" | "leftover"
    holder: LeaseHolder | None = None


class ProjectionStatus(msgspec.Struct):
    projection: str
    declared_version: int  # Projection.version in the code
    live_version: int | None  # the version readers use
    version: int | None  # the build the code maintains (None: needs a rebuild)
    position: int  # last notification applied to that build (or to the live one)
    head: int  # last notification in the log
    lag: int  # head - position
    state: str  # "live" | "building" | "not built" | "needs rebuild" | "failed"
    error: str | None = None  # "failed": the event the build cannot apply (stream, version, reason)
    rebuilding: LeaseHolder | None = None  # a rebuild (or prune) running now
    other_builds: list[OtherBuild] = []


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


def _decode(app: Any, projection: Projection, version: int,
            notes: Sequence[Any]) -> tuple[list[tuple[int, Any]], ProjectionFailed | None]:
    """The page's events, up to the first notification that cannot be decoded (and that failure)."""
    items = []
    for n in notes:
        try:
            items.append((n.id, app.mapper.to_domain_event(n)))
        except Exception as e:
            return items, ProjectionFailed(projection.name, version, f"cannot decode: {e}", n.id, n.originator_id,
                                           n.originator_version, n.topic)
    return items, None


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
         progress: Progress | None, stop: int | None = None, purpose: str | None = None,
         wait: float = 0.0) -> int:
    """Apply every notification after the build's position up to ``stop`` (default: the head now).

    With ``purpose``, each batch is read and applied holding the build's lease (waiting up to ``wait``
    seconds for it), and the position is read under it; without, the caller holds the lease for the run."""
    name = projection.name
    head = app.head() if stop is None else stop
    start = backend.position(name, version)
    if start is None:
        raise BuildGone(f"projection {name} v{version} does not exist (dropped, or never built)")
    if purpose is not None and start >= head:
        return 0  # nothing to do: no lease needed to say so
    hold: Callable[[], ContextManager[Any]] = (
        (lambda: backend.lease(name, version, purpose, wait)) if purpose is not None else nullcontext)
    topics = None if projection.topics is None else list(projection.topics)
    committed = cursor = -1
    applied = 0
    if progress is not None:
        progress(0, max(head - start, 0))
    while True:
        with hold():
            # Under a lease held batch by batch, read the position again (another writer may have written
            # between two batches); under the caller's lease for the whole run, it is the last one committed.
            tracked = committed if purpose is None and committed >= 0 else backend.position(name, version)
            if tracked is None:
                raise BuildGone(f"projection {name} v{version} does not exist (dropped, or never built)")
            if tracked != committed:  # the first batch, or another writer moved (or reset) the build since
                cursor = tracked
            committed = tracked
            if cursor >= head:
                break
            # Read windows until one holds events for this projection (or the head is reached), and commit it.
            while cursor < head:
                # A page is a window of ``batch_size`` notification ids (not "the next batch_size matching
                # rows"): with a topic filter, an open-ended range lets PostgreSQL plan a scan of the whole
                # rest of the log and a sort, per page, when its statistics are stale (as after a bulk
                # import) — a rebuild became quadratic. Ids <= head are all committed when head is read (the
                # store commits in notification order), so a window, once read, has been seen whole.
                window_end = min(cursor + batch_size, head)
                with _collector_paused():
                    if topics == []:  # handles nothing: only the position moves
                        notes: Sequence[Any] = []
                    else:
                        notes = app.recorder.select_notifications(start=cursor, limit=batch_size, stop=window_end,
                                                                  topics=topics or (), inclusive_of_start=False)
                    items, failure = _decode(app, projection, version, notes)
                    del notes
                    if failure is None and not items and window_end < head:
                        cursor = window_end  # nothing for this projection here: commit with the next batch
                        continue
                    try:
                        committed = cursor = _commit(backend, projection, version, items,
                                                     window_end if failure is None else None, committed, failure)
                    except PositionConflict:
                        # Another writer applied these notifications first (exactly once holds); go on from there.
                        committed = cursor = backend.position(name, version) or 0
                    applied += len(items)
                    del items
                break
        if progress is not None:
            progress(min(cursor, head) - start, max(head - start, 0))
    return applied


def _commit(backend: SqlBackend, projection: Projection, version: int, items: list[tuple[int, Any]],
            upto: int | None, after: int, failure: ProjectionFailed | None = None) -> int:
    """Apply one page (``items``, read from position ``after``); returns the new position.

    When the projection cannot apply an event of the page (or ``failure`` is the page's first undecodable
    notification, after ``items``), the events before it are committed, the failure is recorded, naming the
    event, and raised. Rows are written at the end of a batch, so a batch whose rows cannot be stored is
    split in halves (the good half is committed) until the one event is found."""
    if failure is None:
        try:
            return backend.apply_batch(projection, version, items, upto=upto, after=after)
        except ProjectionFailed as e:
            failure = e
        if failure.notification_id is None:
            if len(items) > 1:
                half = len(items) // 2
                position = _commit(backend, projection, version, items[:half], None, after)
                return _commit(backend, projection, version, items[half:], upto, position)
            if not items:  # pragma: no cover - an empty batch writes no rows
                raise failure
            failure = failure.at(*items[0])
        items = [item for item in items if item[0] < failure.notification_id]
    if items:
        _commit(backend, projection, version, items, None, after)
    backend.record_failure(failure)
    raise failure


def catch_up(app: Any, projection: Projection, backend: SqlBackend, batch_size: int = 500,
             progress: Progress | None = None, wait: float = 0.0, purpose: str = "catch-up") -> int:
    """Bring the maintained build up to the head of the log; returns the number of events applied.

    Commits every ``batch_size`` notifications (rows + position in one transaction), so an interrupted
    catch-up resumes where it stopped; each batch holds the build's lease, waiting up to ``wait`` seconds
    for it (``BuildBusy`` after that). ``progress(done, total)`` is called after each batch (in
    notifications). The first build of a projection becomes live when it reaches the head. Raises
    ``ProjectionFailed`` (recorded) at an event the projection cannot apply."""
    for _ in range(3):
        version = maintained_version(projection, backend)
        try:
            applied = _run(app, projection, backend, version, batch_size, progress, purpose=purpose, wait=wait)
            break
        except BuildGone:  # a blue/green rebuild switched readers and dropped it meanwhile: the new one, then
            continue
    else:  # pragma: no cover - three switches during one catch-up
        raise BuildBusy(f"projection {projection.name}: its builds keep changing (rebuilds running); try again")
    if backend.live_version(projection.name) is None:
        _switch(backend, projection.name, None, version, "initial")
    return applied


def _switch(backend: SqlBackend, name: str, expected: int | None, to_version: int, mode: str,
            diff: Diff | None = None, accepted_with_diff: bool = False) -> Switch | None:
    """Switch readers to ``to_version``; None when another writer already did (nothing else changed)."""
    try:
        return backend.switch_live(name, expected, to_version, mode=mode, diff=diff,
                                   accepted_with_diff=accepted_with_diff)
    except ProjectionError:
        if backend.live_version(name) != to_version:  # someone else switched to another one
            raise
        return None


class _Fill:
    """How a rebuild fills a new build: in log order (``_run``), or stream-wise up to a fixed head and then in
    log order (``projections.streamwise``), falling back to log order for a stream it cannot fold."""

    def __init__(self, app: Any, projection: Projection, backend: SqlBackend, batch_size: int,
                 progress: Progress | None, streamwise: bool, workers: int) -> None:
        self.app, self.projection, self.backend = app, projection, backend
        self.batch_size, self.progress, self.streamwise, self.workers = batch_size, progress, streamwise, workers
        self.worker_rss: list[float] = []

    def __call__(self, target: int, stop: int | None = None) -> int:
        """Build ``target`` (just created, its lease held) up to ``stop`` (default: the head)."""
        app, p, backend = self.app, self.projection, self.backend
        if self.streamwise:
            from projections import streamwise

            head = app.head() if stop is None else stop
            try:
                built = streamwise.build(app, p, backend, target, head, self.workers, self.progress)
            except streamwise.StreamFailed as e:
                log.info("%s; building %s v%s in log order instead", e, p.name, target)  # the log-order build reports it
                backend.create_build(p, target, replace=True)
            except BaseException:
                try:  # a failed or killed worker: the build is never switched in; drop what it holds
                    backend.drop_build(p.name, target)
                except Exception as drop_error:  # noqa: BLE001 - the rebuild's own failure is what matters
                    log.warning("dropping %s v%s after a failed build: %s", p.name, target, drop_error)
                raise
            else:
                self.worker_rss = built.worker_rss_mb
                return built.events + _run(app, p, backend, target, self.batch_size, self.progress, stop=stop)
        return _run(app, p, backend, target, self.batch_size, self.progress, stop=stop)

    def result(self, *args: Any) -> RebuildResult:
        return RebuildResult(*args, streamwise=self.streamwise, workers=self.workers if self.streamwise else 1,
                             worker_peak_rss_mb=self.worker_rss)


def rebuild(app: Any, projection: Projection, backend: SqlBackend, blue_green: bool = False,
            accept_diff: bool = False, batch_size: int = 500, progress: Progress | None = None,
            wait: float = REBUILD_WAIT, streamwise: bool | None = None, workers: int = 1) -> RebuildResult:
    """Rebuild a projection from the start of the log.

    Holds the projection's rebuild lease throughout (another rebuild of it running: ``BuildBusy`` at once)
    and first drops the builds nobody uses (``prune``). The build it makes is written under that build's
    lease, taken within ``wait`` seconds (followers hold it one batch at a time).

    A projection that declares ``streamwise`` (default: as it declares; ``streamwise=False`` forces log
    order) is built stream by stream up to a fixed head by ``workers`` processes, then caught up in log order
    (``projections.streamwise``). Such a build is never the live one while it is made: in place, a live build
    of this definition is replaced by a new build switched in at the end (the result names it).

    In place: the maintained build (or, when the code's definition differs from the live one, a new
    build that then goes live without comparison) is dropped, recreated and caught up. Readers of the
    live build see it refill while this runs; catch-ups of it wait, followers skip it.

    Blue/green: a new build (the declared version when it is new, else one past the last) is made
    beside the live one and caught up to the live build's position; then, holding the live build's lease
    (its followers pause), the new build is aligned with it and the two are compared row by row at that
    position (``SqlBackend.compare``); readers switch to the new build, in one transaction, only when
    the builds are equal or ``accept_diff`` is given, and the switch is logged with the diff's digest and
    size; after a switch the new build is caught up to the head. A refused switch leaves the new build
    beside the live one, unread (``result.diff`` says why; run again with ``accept_diff``). After a
    switch the previous live build is kept (a reader that resolved it just before the switch can
    finish); older builds are dropped."""
    projection.check()
    name = projection.name
    if workers < 1:
        raise ProjectionError(f"workers must be at least 1 (got {workers})")
    fill = _Fill(app, projection, backend, batch_size, progress,
                 projection.streamwise if streamwise is None else streamwise, workers)
    with backend.lease(name, REBUILD, "rebuild"):
        _prune(backend, projection)
        builds = backend.builds(name)
        live = backend.live_version(name)
        maintainable = live is not None and _is_maintainable(projection, builds.get(live))

        if not blue_green:
            target = live if maintainable and not fill.streamwise else _next_version(projection, live, builds)
            assert target is not None
            with backend.lease(name, target, "rebuild", wait):
                backend.create_build(projection, target, replace=True)
                events = fill(target)
                switch = _switch(backend, name, live, target, "in_place") if live != target else None
                position = backend.position(name, target) or 0
            if live != target:
                _prune(backend, projection, keep={target, live})
            return fill.result(name, "in_place", live, target, position, events, live != target, None, switch)

        target = _next_version(projection, live, builds)
        with backend.lease(name, target, "rebuild", wait):
            backend.create_build(projection, target, replace=True)
            if live is None:
                events = fill(target)
                switch = _switch(backend, name, None, target, "blue_green")
                return fill.result(name, "blue_green", None, target, backend.position(name, target) or 0,
                                   events, True, None, switch)
            # Most of the way without holding up the live build's followers...
            events = fill(target, stop=backend.position(name, live))
            # ...then the rest with the live build held still: same position, compare, switch.
            with backend.lease(name, live, "rebuild", wait):
                p_live = backend.position(name, live) or 0
                events += _run(app, projection, backend, target, batch_size, progress, stop=p_live)
                diff = backend.compare(name, live, target)
                if not (diff.equal or accept_diff):
                    return fill.result(name, "blue_green", live, target, diff.position, events, False, diff, None)
                switch = backend.switch_live(name, live, target, mode="blue_green", diff=diff,
                                             accepted_with_diff=not diff.equal)
            events += _run(app, projection, backend, target, batch_size, progress)
            position = backend.position(name, target) or 0
        _prune(backend, projection, keep={target, live})
        return fill.result(name, "blue_green", live, target, position, events, True, diff, switch)


def _unused(backend: SqlBackend, projection: Projection, builds: dict[int, Any], live: int | None,
            keep: set[int | None]) -> list[int]:
    """Builds nobody reads or maintains: not live, not kept, and not the first build catch-ups are making
    (the declared version, while nothing is live)."""
    return [v for v in builds if v != live and v not in keep and not (live is None and v == projection.version)]


def _prune(backend: SqlBackend, projection: Projection, keep: set[int | None] | None = None) -> list[int]:
    """Drop the unused builds (under their leases; one being written is kept). The caller holds the
    projection's rebuild lease. Returns the versions dropped."""
    name = projection.name
    dropped = []
    for version in _unused(backend, projection, backend.builds(name), backend.live_version(name), keep or set()):
        try:
            with backend.lease(name, version, "prune"):
                backend.drop_build(name, version)
            dropped.append(version)
        except BuildBusy as e:
            log.warning("not dropping %s v%s: %s", name, version, e)
        except ProjectionError as e:  # became live meanwhile: keep it
            log.warning("not dropping %s v%s: %s", name, version, e)
    return dropped


def prune(projection: Projection, backend: SqlBackend) -> list[int]:
    """Drop every build of ``projection`` besides the live one (leftovers of killed or refused blue/green
    rebuilds, the previous live build kept after a switch): ``projections prune``. Holds the projection's
    rebuild lease (``BuildBusy`` while a rebuild runs). Returns the versions dropped."""
    with backend.lease(projection.name, REBUILD, "prune"):
        return _prune(backend, projection)


class NoRollback(ProjectionError):
    """``rollback`` has no build to go back to (none was live before, or it is gone, or the code cannot
    maintain it)."""


def rollback(projection: Projection, backend: SqlBackend, wait: float = REBUILD_WAIT) -> Switch:
    """Switch readers back to the build that was live before the last switch, when it is still there and
    the code maintains it (``projections rollback``); the switch is logged (mode ``rollback``), so the
    build rolled back from becomes the previous one and a second rollback undoes the first. The build
    switched to catches up from where it stopped on its next catch-up. Holds the rebuild lease."""
    name = projection.name
    with backend.lease(name, REBUILD, "rollback"):
        live = backend.live_version(name)
        last = [sw for sw in backend.switches(name) if sw.to_version == live]
        previous = last[-1].from_version if live is not None and last else None
        if previous is None:
            raise NoRollback(f"projection {name}: no build was live before v{live}" if live is not None
                             else f"projection {name} has no live build")
        build = backend.builds(name).get(previous)
        if build is None:
            raise NoRollback(f"projection {name}: the previous build v{previous} is gone (dropped by prune or a "
                             "rebuild): rebuild instead")
        if not _is_maintainable(projection, build):
            raise NoRollback(f"projection {name}: the previous build v{previous} was built by definition "
                             f"v{build.definition_version}, the code defines v{projection.version}: it cannot be "
                             "maintained; rebuild instead")
        with backend.lease(name, live, "rollback", wait), backend.lease(name, previous, "rollback", wait):
            return backend.switch_live(name, live, previous, mode="rollback")


def status(app: Any, projections: Sequence[Projection], backend: SqlBackend) -> list[ProjectionStatus]:
    """Per projection: the live and maintained versions, the position, the head of the log and the lag; the
    event it cannot apply, if any; a rebuild running; the other builds beside the live one."""
    head = app.head()
    failures = backend.failures()
    holders: dict[tuple[str, int], LeaseHolder] = {(h.projection, h.build): h for h in backend.lease_holders()}
    last_switch = {s.projection: s for s in backend.switches()}
    out = []
    for p in projections:
        builds = backend.builds(p.name)
        live = backend.live_version(p.name)
        if live is not None:
            b = builds.get(live)
            version = live if _is_maintainable(p, b) else None
            position = b.position if b else 0
            state = "live" if version is not None else "needs rebuild"
        elif p.version in builds:
            version, position, state = p.version, builds[p.version].position, "building"
        else:
            version, position, state = None, 0, "not built"
        failure = failures.get((p.name, version)) if version is not None else None
        if failure is not None and failure.notification_id > position:
            state = "failed"
        previous = last_switch[p.name].from_version if p.name in last_switch else None
        others = [OtherBuild(v, b.definition_version, b.position,
                             "building" if (p.name, v) in holders else "previous" if v == previous else "leftover",
                             holders.get((p.name, v)))
                  for v, b in sorted(builds.items()) if v != live and v != version]
        out.append(ProjectionStatus(p.name, p.version, live, version, position, head, head - position, state,
                                    failure.message() if state == "failed" and failure else None,
                                    holders.get((p.name, REBUILD)), others))
    return out


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
                 poll_interval: float = 1.0, batch_size: int = 500,
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
        self._transient = TRANSIENT_ERRORS

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
           poll_interval: float = 1.0, stop_event: threading.Event | None = None, batch_size: int = 500,
           reconnect_delay: tuple[float, float] = (0.1, 5.0),
           on_failure: Callable[[Projection, ProjectionError], None] | None = None) -> Follower:
    """Follow the log until ``stop_event`` is set (forever without one). Returns the follower (stats)."""
    if isinstance(projections, Projection):
        projections = [projections]
    follower = Follower(app, projections, backend, poll_interval, batch_size, reconnect_delay, on_failure)
    follower.run(stop_event or threading.Event())
    return follower
