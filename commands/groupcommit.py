"""Group commit: single commands from concurrent callers, decided one after another in one writer thread
and saved together, several in one transaction (the ledger service's ``POST /v1/commands``).

Why: a save is one transaction that every writer of a ledger takes in turn (SQLite has one writer at a
time, and the event store's pool lets one thread write while the rest queue, readers included; on
PostgreSQL every save locks the events table to number its notifications). Commands from concurrent
requests, each in its own thread, wait on each other there; one writer thread that saves what arrived
while it was saving pays one transaction, one lock and one round trip of each kind for all of them.

What stays true (``commands.uow``'s rules, per command):

* **All or nothing, exactly once.** Each command is decided in its own unit of work, as ``run`` first
  decides it; its events are staged, and the staged commands are saved in one transaction with every
  decision's dependencies checked in it. If that save is refused — another process wrote a stream first,
  a value the database would not take — nothing of it was recorded, and each staged command runs again
  alone through ``run``, with its retries and fault rules. A lost reply to the COMMIT
  (``SaveInDoubt``) is settled as ``run`` settles one: recorded — every staged result stands; nothing, or
  another writer's events — each command runs again alone; the database unreachable — each is refused
  with ``outcome_unknown`` naming its own streams. When the database fails (a read for a decision, or
  the save), the commands not yet answered are tried again together until ``RECONNECT_SECONDS`` from the
  batch's start, then each is refused ``database_unavailable``: the batch waits out a failing database
  once, not once per command.
* **An order the callers could have seen.** The commands of a batch were all pending at once (no caller
  had its answer yet), so any order of them is one a caller could observe. A command whose attempt reads
  or writes a stream that a command staged before it in the batch writes (or writes one such a command
  read) is not staged: it runs alone after the batch's save, on the saved state. So is everything ``run``
  would decide again on the store: a refusal or a no-op decided on a remembered copy. A refusal or a
  no-op decided on the store is final at once (it records nothing, and was decided on committed state:
  as if it ran before the batch). Each caller sends one command at a time and gets its answer after its
  command is saved, so a caller's own commands keep their order.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import random
import threading
import time
from typing import Any, Callable, Sequence
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError

from commands.handler import refused_line, run_line
from commands.metrics import COUNTERS
from commands.uow import (IN_DOUBT_SECONDS, RECONNECT_SECONDS, UnitOfWork, cached_behind, forget_cached,
                          outcome_unknown, settle, staging, unavailable)
from ledger.errors import LedgerError
from ledger.recorders import (
    EXPECTED_VERSIONS, DependencyChanged, ReplicationUnconfirmed, SaveInDoubt, commit_timeout,
)

log = logging.getLogger(__name__)

#: most commands saved in one transaction
MAX_BATCH = 64

Row = dict[str, Any]


class Job:
    """One submitted command line and the check its caller's token puts on it (``access.authorize``)."""

    def __init__(self, line: bytes, prepare: Callable[[Any], Any] | None = None) -> None:
        self.line, self.prepare = line, prepare

    def run(self, app: Any) -> Row:
        return run_line(app, 1, self.line, self.prepare)

    def refused(self, error: LedgerError) -> Row:
        return refused_line(1, self.line, error)


class Deferred(Exception):
    """The command is not staged: it runs alone after the batch's save."""


class Unavailable(Exception):
    """The database failed a read of the command's decision: the batch is tried again (``run_batch``)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Batch:
    """The units of work staged by the commands of one batch (``run`` calls ``stage`` in its thread)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.staged: list[UnitOfWork] = []
        self.unknown: list[LedgerError] = []  # after an unsettled save: each staged command's outcome_unknown
        self.failure: BaseException | None = None  # after a save the database failed (``unavailable``)
        self._job_staged = False

    def begin_job(self) -> int:
        self._job_staged = False
        return len(self.staged)

    def drop(self, mark: int) -> None:
        del self.staged[mark:]

    def stage(self, work: Callable[[UnitOfWork], Any]) -> Any:
        """One attempt of ``work`` on remembered state (``run``'s first), staged when it can be saved with
        the batch (module docstring); else ``Deferred``. A refusal decided on the store is raised."""
        if self._job_staged:
            raise Deferred  # a command of two units of work: alone, where each is its own transaction
        uow = UnitOfWork(self.app, from_memory=True)
        try:
            result = work(uow)
        except LedgerError:
            if uow.optimistic:
                raise Deferred from None  # refusals are decided on current state
            raise
        except IntegrityError:
            raise Deferred from None
        except PersistenceError as e:
            raise Unavailable(e) from e
        if not uow.checked_by_save():
            raise Deferred  # a read-only use or a no-op on remembered state: decided again on the store
        if not uow.written():
            return result  # nothing to save, decided on the store
        if self._overlaps(uow):
            raise Deferred
        self.staged.append(uow)
        self._job_staged = True
        return result

    def _overlaps(self, uow: UnitOfWork) -> bool:
        touched, written = uow.touched(), set(uow.written())
        dependencies = uow.dependencies()
        for other in self.staged:
            theirs = set(other.written())
            if touched & theirs or written & other.touched():
                return True
            seen = other.dependencies()
            if any(seen.get(sid, v) != v for sid, v in dependencies.items()):
                return True  # a fact read at two versions (a cached catalog moved between them)
        return False

    def save(self) -> str:
        """Save every staged unit of work in one transaction: ``saved``; ``redo`` when nothing was recorded
        and each command should run alone (a conflict, a value the database refused); ``unavailable`` when
        nothing was recorded because the database failed (``self.failure``); ``unknown`` when nobody can
        tell (``self.unknown``: each command's ``outcome_unknown``). Anything else raised (a defect) is
        every staged command's failure."""
        dependencies: dict[UUID, int] = {}
        for uow in self.staged:
            dependencies.update(uow.dependencies())
        aggregates = [a for uow in self.staged for a in uow.recorded()]
        try:
            self.app.save(*aggregates, **({EXPECTED_VERSIONS: dependencies} if dependencies else {}))
        except DependencyChanged as e:
            cached_behind(self.app, e.stale)
            return "redo"
        except SaveInDoubt as doubt:
            try:
                outcome = settle(self.app, doubt.stored_events, time.monotonic() + IN_DOUBT_SECONDS)
            except LedgerError as unknown:
                self.unknown = [outcome_unknown(self.app, [s for s in doubt.stored_events
                                                           if s.originator_id in set(uow.written())],
                                                unknown.__cause__ or unknown) for uow in self.staged]
                return "unknown"
            if outcome != "recorded":
                return "redo"
            forget_cached(self.app, [a.id for a in aggregates])  # the cache did not see this save
        except ReplicationUnconfirmed as e:  # committed on the primary, unconfirmed: each command says so
            forget_cached(self.app, [a.id for a in aggregates])
            self.unknown = [LedgerError("replication_unconfirmed", str(ReplicationUnconfirmed(
                [s for s in e.stored_events if s.originator_id in set(uow.written())], commit_timeout())))
                for uow in self.staged]
            return "unknown"
        except (IntegrityError, LedgerError):
            return "redo"  # another writer first, or a value the database refused: each alone gets its answer
        except PersistenceError as e:
            self.failure = e  # a connection lost before COMMIT, a refused transaction: nothing recorded
            return "unavailable"
        for uow in self.staged:
            uow.saved()
        return "saved"


def run_batch(app: Any, jobs: Sequence[Job], order: list[int] | None = None) -> list[Row | BaseException]:
    """Each job's result row, or the exception it raised (a defect; refusals are rows). The commands are
    staged and saved as one transaction where they can be (module docstring), and every row is final when
    this returns. ``order``, if given, receives the jobs' indexes in an order in which running them one
    after another gives the same rows and the same log.

    When the database fails (a read of a decision, or the save), nothing of the batch is recorded and the
    commands not yet answered are tried again together, as ``run`` tries one again, until
    ``RECONNECT_SECONDS`` from the batch's start; then each is refused with ``database_unavailable``. So a
    batch waits out a failing database once, not once per command."""
    results: list[Row | BaseException | None] = [None] * len(jobs)
    deadline = time.monotonic() + RECONNECT_SECONDS
    pending = list(range(len(jobs)))
    while True:
        pending, failure = _round(app, jobs, pending, results, order)
        if not pending:
            return results  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            assert failure is not None
            error = unavailable(app, failure)
            for i in pending:
                results[i] = jobs[i].refused(error)
            if order is not None:
                order.extend(pending)
            return results  # type: ignore[return-value]
        time.sleep(random.uniform(0.01, 0.05))  # let the pool replace its connections


def _round(app: Any, jobs: Sequence[Job], indexes: list[int], results: list[Any],
           order: list[int] | None) -> tuple[list[int], BaseException | None]:
    """One try of the jobs at ``indexes``: their rows in ``results``; the jobs to try again (the database
    failed) and the failure."""
    at_once: list[int] = []
    owners: list[int] = []  # the job of each staged unit of work
    alone: list[int] = []
    batch = Batch(app)
    staging.batch = batch
    try:
        for n, i in enumerate(indexes):
            mark = batch.begin_job()
            try:
                row = jobs[i].run(app)
            except Deferred:
                batch.drop(mark)
                alone.append(i)
                continue
            except Unavailable as e:  # the database fails: nothing of this round is saved, the rest try again
                if order is not None:
                    order.extend(at_once)
                return sorted(alone + owners + indexes[n:]), e.cause
            except BaseException as e:  # the job's own failure (a defect): its row is the error
                batch.drop(mark)
                results[i] = e
                at_once.append(i)
                continue
            if len(batch.staged) > mark and row["ok"]:
                owners.append(i)
            else:
                batch.drop(mark)  # (refused after staging: nothing of it is saved)
                at_once.append(i)
            results[i] = row
    finally:
        staging.batch = None
    if order is not None:
        order.extend(at_once)
    if batch.staged:
        try:
            outcome = batch.save()
        except BaseException as e:  # a defect: the staged commands fail with it, as ``run`` would
            outcome = "failed"
            for i in owners:
                results[i] = e
        COUNTERS.add("chat_ledger_group_commits_total", outcome=outcome)
        if outcome == "saved":
            COUNTERS.add("chat_ledger_group_committed_commands_total", len(owners))
        elif outcome == "unknown":
            for i, error in zip(owners, batch.unknown):
                results[i] = jobs[i].refused(error)
        elif outcome == "unavailable":
            return sorted(alone + owners), batch.failure
        elif outcome == "redo":
            alone, owners = sorted(alone + owners), []
    if order is not None:
        order.extend(owners + alone)
    for i in alone:
        try:
            results[i] = jobs[i].run(app)
        except BaseException as e:
            results[i] = e
    return [], None


class GroupCommitter:
    """The writer thread of one process: ``submit`` a job (one command line), get a future of its row.
    The thread takes everything submitted while it was saving (up to ``MAX_BATCH``) as the next batch: no
    wait is added, so a lone command is saved at once and a busy service saves in batches."""

    def __init__(self, app: Any, max_batch: int = MAX_BATCH) -> None:
        self.app = app
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[tuple[Job, concurrent.futures.Future[Row]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> concurrent.futures.Future[Row]:
        future: concurrent.futures.Future[Row] = concurrent.futures.Future()
        self._queue.put((job, future))
        return future

    def close(self) -> None:
        """Run what was submitted, then stop the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                break
            items = [item]
            while len(items) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                items.append(item)
            # a command whose caller gave up (a cancelled future) before it was taken is not run
            items = [(job, future) for job, future in items if future.set_running_or_notify_cancel()]
            try:
                rows = run_batch(self.app, [job for job, _ in items])
            except BaseException as e:  # pragma: no cover - run_batch answers each job; a defect here
                rows = [e] * len(items)
            for (_, future), row in zip(items, rows):
                if isinstance(row, BaseException):
                    future.set_exception(row)
                else:
                    future.set_result(row)
