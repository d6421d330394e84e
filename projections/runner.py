"""Driving projections from the notification log: catch up (here), follow (``projections.follower``), rebuild
(in place or blue/green), prune, rollback and status (``projections.lifecycle``).

Which build does the code maintain? (``maintained_version``)

* nothing is live yet: the declared ``Projection.version`` (created if missing); it goes live, in one
  switch, the first time a catch-up reaches the head, so readers never see it half built;
* the live build was made by this definition (same ``definition_version`` and table fingerprint): that
  build (its number may be higher than the declared version after a blue/green rebuild of an unchanged
  definition);
* otherwise the live build belongs to another definition: catching up is refused until a rebuild
  (in place, or blue/green) builds and switches to a build of this definition.

Notifications are read in windows of notification ids (``projections.pacing.Pace``: fixed at ``batch_size``
when one is given, else starting at 500 and growing while far behind; ``projections.notes.read_window``, topic
filter in SQL); each window is decoded before the view transaction opens, then applied with its tracking
position in one transaction (``SqlBackend.apply_batch``).

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

from projections.backend import SqlBackend
from projections.engine import BuildBusy, BuildGone, PositionConflict, Projection, ProjectionError, ProjectionFailed
from projections.pacing import Pace
from projections.records import Diff, Switch

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

#: How long a rebuild waits for the catch-up or follow batch that holds its build's lease.
REBUILD_WAIT = 30.0


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
    decode = projection.decoder(app)
    for n in notes:
        try:
            items.append((n.id, decode(n)))
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


def _run(app: Any, projection: Projection, backend: SqlBackend, version: int, batch_size: int | None,
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
    pace = Pace(batch_size)  # the window grows while far behind (projections.pacing)
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
                window_end = min(cursor + pace.window, head)
                began = time.perf_counter()
                with _collector_paused():
                    if topics == []:  # handles nothing: only the position moves
                        notes: Sequence[Any] = []
                    else:
                        notes = pace.read(app, cursor, window_end, topics)
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
                pace.done(time.perf_counter() - began, head - cursor)
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


def catch_up(app: Any, projection: Projection, backend: SqlBackend, batch_size: int | None = None,
             progress: Progress | None = None, wait: float = 0.0, purpose: str = "catch-up") -> int:
    """Bring the maintained build up to the head of the log; returns the number of events applied.

    Commits every ``batch_size`` notifications (None: windows from 500 that grow while far behind,
    ``projections.pacing``; rows + position in one transaction), so an interrupted
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
