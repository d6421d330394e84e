"""The lifecycle of a projection's builds: rebuild (in place or blue/green), prune, rollback, status.

The rules of which build the code maintains, of leases and of failures are in ``projections.runner``'s doc;
a rebuild fills its new build with ``runner``'s catch-up loop (or ``projections.streamwise``) and switches
readers with ``runner._switch``.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import msgspec

from projections.backend import SqlBackend
from projections.engine import BuildBusy, Projection, ProjectionError
from projections.leases import REBUILD, LeaseHolder
from projections.records import Diff, Switch
from projections.runner import REBUILD_WAIT, Progress, _is_maintainable, _next_version, _run, _switch

log = logging.getLogger(__name__)


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


class _Fill:
    """How a rebuild fills a new build: in log order (``_run``), or stream-wise up to a fixed head and then in
    log order (``projections.streamwise``), falling back to log order for a stream it cannot fold."""

    def __init__(self, app: Any, projection: Projection, backend: SqlBackend, batch_size: int | None,
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
            accept_diff: bool = False, batch_size: int | None = None, progress: Progress | None = None,
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
