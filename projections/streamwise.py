"""Stream-wise builds: a new build filled stream by stream, then caught up in log order.

A projection that declares ``streamwise = True`` promises that its rows depend on one stream at a time
(``chat_views``, ``conversations``): the rows of a stream are a function of that stream's events alone, and
rows of different streams have different keys. Such a build need not be exact at every intermediate
position, because readers never see it before it is switched in (blue/green) or marked live; so it is made
like this (``build``), under the build's lease, into a build created empty:

1. the head (the highest notification id) is fixed;
2. the events up to the head are read in the events table's primary-key order (stream, version), an
   index-order read (one server-side cursor on PostgreSQL, keyset pages on SQLite);
3. each stream is folded once with the projection's own ``apply``/``end_batch`` over an in-memory store of
   that stream's rows (``MemoryStore``: the same pure code as a log-order build, one batch per stream);
4. the rows are inserted in bounded transactions (``FLUSH_ROWS``; COPY on PostgreSQL, ``executemany`` on
   SQLite), and the last transaction sets the build's position to the head.

The runner then catches the build up from the head in log order, as for any build. Memory stays flat: one
stream's events and rows at a time, and at most ``FLUSH_ROWS`` rows waiting to be written.

With ``workers > 1`` the originator-id space is cut into that many ranges, each read and folded by its own
process (forked: the parent's projection object and settings, its own database connections). Each worker
inserts its rows itself, on its own connection, under the rebuild's lease (each of its transactions checks
that the lease's holder, the rebuilding session, still holds it); on SQLite (one writer per file) the workers'
transactions take the write lock in turns. The build's secondary and full-text indexes are made once, over
every row, by its last transaction (``Batches.suspend_indexes``). A worker that fails or dies fails the
rebuild (the others are stopped); the build is never switched in, so the live version is untouched.

A stream the projection cannot fold (``apply`` raising, a row that cannot be stored) stops the stream-wise
build: the runner then makes the build in log order, which stops at that event exactly and records it.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
from multiprocessing.connection import wait as wait_for
from typing import Any, NamedTuple
from uuid import UUID

from ledger.eventsql import STREAM_ORDER, stored_events_query
from projections.engine import MemoryStore, Projection, ProjectionError

#: rows inserted per transaction of a stream-wise build
FLUSH_ROWS = 5_000
#: rows per read of the log (a keyset page on SQLite, the cursor's fetch size on PostgreSQL)
PAGE = 2_000

Progress = Callable[[int, int], None]


class StreamFailed(ProjectionError):
    """A stream-wise build cannot fold a stream (the build is then made in log order, which names the event)."""


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def id_ranges(n: int) -> list[tuple[UUID | None, UUID | None]]:
    """``n`` ranges ``[lo, hi)`` of equal width covering the UUID space (None: unbounded)."""
    step = 2**128 // n
    bounds: list[UUID | None] = [None, *(UUID(int=i * step) for i in range(1, n)), None]
    return list(pairwise(bounds))


class _Stored:
    """What the mapper decodes (a stored event without the library's dataclass overhead)."""

    __slots__ = ("originator_id", "originator_version", "state", "topic")

    def __init__(self, originator_id: Any, originator_version: int, topic: str, state: bytes) -> None:
        self.originator_id, self.originator_version, self.topic, self.state = (
            originator_id, originator_version, topic, state)


def read_log(app: Any, head: int, topics: Sequence[str] | None, lo: UUID | None = None,
             hi: UUID | None = None, page: int = PAGE) -> Iterator[tuple[int, _Stored]]:
    """The stored events with notification ids up to ``head`` (of ``topics``, of originator ids in
    ``[lo, hi)``), in the events table's primary-key order: (notification id, stored event)."""
    datastore = app.recorder.datastore
    query = stored_events_query(app.recorder, head, topics=topics, lo=lo, hi=hi)
    select, params, order = query.select, query.params, STREAM_ORDER
    if not query.sqlite:
        from psycopg.rows import tuple_row

        with (datastore.get_connection() as conn, conn.transaction(),
              conn.cursor(name="chat_ledger_streamwise", row_factory=tuple_row, binary=True) as cur):
            cur.itersize = page
            cur.execute(select + order, params)
            yield from _stored(cur, lambda oid: oid)
        return
    last: tuple[str, int] | None = None
    # The pages after the first start after the last (stream, version) read, which is past ``lo`` already: the
    # bound is left out of their query, or SQLite searches its index from ``lo`` (not from that key) for every
    # page, reading again all the range read so far
    later = stored_events_query(app.recorder, head, topics=topics, hi=hi)
    while True:
        with datastore.transaction(commit=False) as cur:
            if last is None:
                cur.execute(select + order + f" LIMIT {int(page)}", params)
            else:
                cur.execute(later.select + later.after_key() + order + f" LIMIT {int(page)}", (*later.params, *last))
            rows = cur.fetchall()
        if not rows:
            return
        yield from _stored(rows, UUID)
        last = (rows[-1][1], rows[-1][2])


def read_streams(app: Any, upto: dict[UUID, int], chunk: int = 500) -> Iterator[tuple[int, _Stored]]:
    """The stored events of the streams in ``upto`` up to each one's version (stream -> last version), in
    (stream, version) order: many streams in one query each ``chunk`` streams."""
    from eventsourcing.sqlite import SQLiteDatastore

    recorder = app.recorder
    datastore = recorder.datastore
    sqlite = isinstance(datastore, SQLiteDatastore)
    items = sorted(upto.items())
    for i in range(0, len(items), chunk):
        part = items[i:i + chunk]
        if sqlite:
            sql = (f"WITH k(id, v) AS (VALUES {', '.join(['(?, ?)'] * len(part))}) SELECT e.rowid, e.originator_id, "
                   f"e.originator_version, e.topic, e.state FROM {recorder.events_table_name} e JOIN k "
                   "ON e.originator_id = k.id AND e.originator_version <= k.v ORDER BY e.originator_id, "
                   "e.originator_version")
            params: Any = [x for sid, v in part for x in (sid.hex, v)]
        else:
            sql = (f"SELECT e.notification_id, e.originator_id, e.originator_version, e.topic, e.state "
                   f'FROM "{datastore.schema}"."{recorder.events_table_name}" e '
                   f"JOIN unnest(%s::{datastore.originator_id_type}[], %s::bigint[]) AS k(id, v) "
                   "ON e.originator_id = k.id AND e.originator_version <= k.v "
                   "ORDER BY e.originator_id, e.originator_version")
            params = ([sid if datastore.originator_id_type == "uuid" else str(sid) for sid, _ in part],
                      [v for _, v in part])
        rows = _fetch(datastore, sqlite, sql, params)
        yield from _stored((tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows),
                           UUID if sqlite else (lambda oid: oid))


def _fetch(datastore: Any, sqlite: bool, sql: str, params: Any) -> list[Any]:
    """The rows of one query, in one read transaction (PostgreSQL: ``binary_rows``)."""
    if sqlite:
        with datastore.transaction(commit=False) as cur:
            cur.execute(sql, params)
            return cur.fetchall()  # type: ignore[no-any-return]
    from ledger.recorders.postgres import binary_rows

    return binary_rows(datastore, sql, params)


def _stored(rows: Any, to_uuid: Callable[[Any], UUID]) -> Iterator[tuple[int, _Stored]]:
    """Rows (id, originator id, version, topic, state) as stored events, with one UUID object per stream."""
    raw: Any = None
    uid: Any = None
    for n, oid, version, topic, state in rows:
        if oid != raw:
            raw, uid = oid, to_uuid(oid)
        yield n, _Stored(uid, version, topic, state)


def stream_rows(projection: Projection, events: list[Any]) -> dict[str, list[dict[str, Any]]]:
    """The rows of one stream after ``events`` (all of the stream's events, in order): the projection's own
    ``prepare``/``apply``/``end_batch`` as one batch over an in-memory store of this stream's rows."""
    store = MemoryStore(projection.tables)
    projection.prepare(events)
    store.apply(projection, events)
    projection.stream_done(events[-1].originator_id)
    return {name: list(rows.values()) for name, rows in store.data.items() if rows}


def fold_range(app: Any, projection: Projection, head: int, lo: UUID | None, hi: UUID | None,
               emit: Callable[[dict[str, list[dict[str, Any]]]], None],
               progress: Callable[[int], None] | None = None) -> int:
    """Fold every stream of ``[lo, hi)`` up to ``head``, giving each stream's rows to ``emit``; returns the
    number of events folded."""
    to_event = projection.decoder(app)
    topics = None if projection.topics is None else list(projection.topics)
    events: list[Any] = []
    current: Any = None
    done = 0

    def fold() -> None:
        nonlocal done
        try:
            rows = stream_rows(projection, events)
        except Exception as e:
            raise StreamFailed(f"projection {projection.name}: stream {current}: {type(e).__name__}: {e}") from e
        emit(rows)
        done += len(events)
        if progress is not None:
            progress(done)
        _after_stream(done)

    for _, stored in read_log(app, head, topics, lo, hi):
        oid = stored.originator_id
        if oid is not current and oid != current:  # the same object for a stream's events within a page
            if events:
                fold()
                events = []
            current = oid
        try:
            events.append(to_event(stored))
        except Exception as e:
            raise StreamFailed(f"projection {projection.name}: cannot decode stream {current} version "
                               f"{stored.originator_version}: {e}") from e
    if events:
        fold()
    return done


def _after_stream(done: int) -> None:
    """Called after each stream a build folds (tests replace it to stop a worker at a known point)."""


class RowSink:
    """Rows waiting to be inserted into a build, flushed every ``FLUSH_ROWS`` rows (one transaction each)."""

    def __init__(self, backend: Any, projection: Projection, version: int, delegate: str | None = None) -> None:
        self.backend, self.projection, self.version, self.delegate = backend, projection, version, delegate
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.count = 0
        self.worker_rss_mb: list[float] = []  # peak RSS of each worker (none: folded in this process)

    def add(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        for name, some in rows.items():
            self.rows.setdefault(name, []).extend(some)
            self.count += len(some)
        if self.count >= FLUSH_ROWS:
            self.flush()

    def flush(self, position: int | None = None) -> None:
        if self.count or position is not None:
            self.backend.insert_rows(self.projection, self.version, self.rows, position=position,
                                     delegate=self.delegate)
        self.rows, self.count = {}, 0


class Built(NamedTuple):
    events: int  # events folded
    worker_rss_mb: list[float]  # peak RSS of each worker process (none: folded in this process)


def build(app: Any, projection: Projection, backend: Any, version: int, head: int, workers: int = 1,
          progress: Progress | None = None) -> Built:
    """Fill build ``version`` (empty, its lease held by the caller) with every stream folded up to ``head``
    and set its position to ``head``. Raises ``StreamFailed`` when a
    stream cannot be folded (the build then holds some rows: recreate it), ``ProjectionError`` when a worker
    fails or dies."""
    backend.suspend_indexes(projection, version)
    sink = RowSink(backend, projection, version)
    report = None if progress is None else (lambda done: progress(done, head))
    if workers <= 1:
        done = fold_range(app, projection, head, None, None, sink.add, report)
    else:
        done = _in_workers(app, projection, backend, version, head, workers, sink, progress)
    sink.flush(position=head)
    return Built(done, sink.worker_rss_mb)


def _in_workers(app: Any, projection: Projection, backend: Any, version: int, head: int, workers: int,
                sink: RowSink, progress: Progress | None) -> int:
    # Every worker writes its own rows under the build's lease (``delegate``): PostgreSQL's writers at once,
    # SQLite's in turns (each transaction takes the write lock), either way no rows through this process
    delegate = backend.lease_token(projection.name, version)
    ctx = multiprocessing.get_context("fork")
    procs: dict[Any, Any] = {}
    try:
        for lo, hi in id_ranges(workers):
            receive, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_worker, args=(app, projection, backend, version, head, lo, hi, send, delegate),
                               name=f"{projection.name}-build-worker", daemon=True)
            proc.start()
            send.close()
            procs[receive] = proc
        done: dict[Any, int] = {r: 0 for r in procs}
        pending = set(procs)
        while pending:
            for conn in wait_for(list(pending)):
                try:
                    kind, value = conn.recv()
                except EOFError:
                    proc = procs[conn]
                    proc.join()
                    raise ProjectionError(f"projection {projection.name}: a build worker (pid {proc.pid}) ended "
                                          f"before finishing (exit code {proc.exitcode}); nothing was switched")
                if kind == "progress":
                    done[conn] = value
                    if progress is not None:
                        progress(sum(done.values()), head)
                elif kind == "done":
                    done[conn] = value[0]
                    sink.worker_rss_mb.append(value[1])
                    pending.discard(conn)
                else:  # "failed"
                    failure = StreamFailed if value[0] == "StreamFailed" else ProjectionError
                    raise failure(f"projection {projection.name}: build worker (pid {procs[conn].pid}): {value[1]}")
        for proc in procs.values():
            proc.join()
        return sum(done.values())
    finally:
        for conn, proc in procs.items():
            if proc.is_alive():
                proc.kill()
            proc.join()
            conn.close()


def _worker(app: Any, projection: Projection, backend: Any, version: int, head: int, lo: UUID | None,
            hi: UUID | None, send: Any, delegate: str) -> None:
    """One worker process: its own connections (the parent's belong to the parent), one id range."""
    status = 1
    try:
        app = app.reopen()
        own = backend.reopen()
        sink = RowSink(own, projection, version, delegate)
        last = [0]

        def report(done: int) -> None:
            if done - last[0] >= 10_000:
                last[0] = done
                send.send(("progress", done))

        done = fold_range(app, projection, head, lo, hi, sink.add, report)
        sink.flush()
        own.close()
        app.close()
        send.send(("done", (done, peak_rss_mb())))
        status = 0
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the rebuild
        try:
            send.send(("failed", (type(e).__name__, f"{type(e).__name__}: {e}")))
        except OSError:
            pass
    finally:
        send.close()
        os._exit(status)
