"""Snapshots of long streams: derived data that shortens a load, never an answer.

A process that has not seen a chat replays all of it before deciding (chatd allows 1,200 steps a turn, so
agent chats reach tens of thousands of events). The application (``ledger.store``) keeps, for the aggregate
types in its ``snapshotting_intervals``, a snapshot of the state each time a save carries a stream past a
multiple of the interval, in the library's snapshot store (``stored_snapshots`` on SQLite,
``chatledger_snapshots`` on PostgreSQL), and deletes the stream's older ones (each holds the whole state); a
load starts from the stream's snapshot when it is at or below the version asked for, and replays the
events after it (a load of an earlier version replays from the first event).

What keeps a snapshot from changing an answer:

* it is taken from the aggregate the save just recorded, at that save's last version (the state every
  event up to it folds to), after the commit, and a failure to write it fails nothing;
* it is used only while the code that folds the stream is the code that wrote it: each snapshot carries a
  **fingerprint** of its class's ``class_version``, of the state's shape (its msgspec JSON schema) and of the
  source of the modules that fold the stream (``FOLD_MODULES``). A snapshot whose fingerprint differs, or
  that does not decode, is ignored (the load replays from the events, as before the first snapshot) and the
  next snapshot of the stream replaces it. ``docs/schema-changes.md`` gives the rule;
* nothing that judges the log reads them: ``events verify``, the projections, audit, export and import read
  the events only (an import writes no snapshot; they are re-taken as the streams grow).

Snapshots are written as msgpack whatever the payload format (they are never read by people), and
deleting them (``DELETE FROM stored_snapshots``) is always safe.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import importlib
import inspect
from datetime import datetime, timezone
from typing import Any, ClassVar, Iterator
from uuid import UUID

import msgspec
from eventsourcing.application import AggregateNotFoundError, Repository
from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import PersistenceError
from eventsourcing.sqlite import SQLiteAggregateRecorder

from ledger.base import TOPICS, DeciderAggregate, _register
from ledger.codec import CodecError
from ledger.chat.aggregate import Chat
from ledger.chat.state import ChatState


class StateSnapshot(DomainEvent):
    """The state of one aggregate at ``originator_version`` (with its created/modified times)."""

    TOPIC: ClassVar[str] = ""
    class_version: ClassVar[int] = 1
    #: written as msgpack whatever the application's payload format (``ledger.codec``)
    PAYLOAD_FORMAT: ClassVar[str] = "msgpack"
    #: the aggregate class whose state this is
    AGGREGATE: ClassVar[type[DeciderAggregate]]
    #: the state's type (decoded typed, so that a snapshot's state is the fold's, field for field)
    STATE: ClassVar[type]
    #: the modules whose code folds the stream: a change to any of them invalidates every snapshot
    FOLD_MODULES: ClassVar[tuple[str, ...]] = ()

    fingerprint: str
    created_on: datetime
    modified_on: datetime
    state: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)

    @classmethod
    @functools.cache
    def current_fingerprint(cls) -> str:
        digest = hashlib.sha256(f"{cls.TOPIC}\0{cls.class_version}\0".encode())
        digest.update(msgspec.json.encode(msgspec.json.schema(cls.STATE), order="sorted"))
        for name in cls.FOLD_MODULES:
            digest.update(b"\0" + inspect.getsource(importlib.import_module(name)).encode())
        return digest.hexdigest()

    @classmethod
    def take(cls, aggregate: DeciderAggregate) -> StateSnapshot:
        return cls(originator_id=aggregate.id, originator_version=aggregate.version,  # type: ignore[call-arg]
                   timestamp=datetime.now(timezone.utc), fingerprint=cls.current_fingerprint(),
                   created_on=aggregate.created_on, modified_on=aggregate.modified_on, state=aggregate.state)

    def usable(self) -> bool:
        """Whether the current code folds the stream as the code that took this snapshot did."""
        return self.fingerprint == type(self).current_fingerprint()

    def mutate(self, _: None) -> DeciderAggregate:
        cls = self.AGGREGATE
        agg = cls.__new__(cls)
        agg.__base_init__(self.originator_id, self.originator_version, self.created_on)
        agg._modified_on = self.modified_on
        agg.state = self.state
        return agg


class ChatSnapshot(StateSnapshot):
    TOPIC: ClassVar[str] = "chat-ledger:chat.Snapshot"
    class_version: ClassVar[int] = 1
    AGGREGATE = Chat
    STATE = ChatState
    FOLD_MODULES = ("ledger.chat.evolve", "ledger.chat.state", "ledger.chat.values", "ledger.base")

    state: ChatState


#: aggregate class -> its snapshot class
SNAPSHOTS: dict[type, type[StateSnapshot]] = {Chat: ChatSnapshot}
#: aggregate class -> snapshot every this many events (``ChatLedgerApp.snapshotting_intervals``)
INTERVALS: dict[type, int] = {Chat: 500}


def crossed(interval: int, first_version: int, last_version: int) -> bool:
    """Whether a save of versions ``first_version..last_version`` carried its stream past a multiple of
    ``interval``."""
    return (first_version - 1) // interval < last_version // interval


def usable_snapshot(snapshot: Any, aggregate_id: UUID) -> bool:
    return (isinstance(snapshot, StateSnapshot) and snapshot.originator_id == aggregate_id
            and snapshot.usable() and TOPICS.get(type(snapshot).TOPIC) is type(snapshot))


class LedgerRepository(Repository[UUID]):
    """The library's repository, starting a load from a snapshot only when it is usable
    (``ledger.snapshots``): one whose fingerprint is the current code's. Any other (or none, or a ledger
    opened read-only before it had a snapshot table) means replaying the stream from its first event."""

    def _reconstruct_aggregate(self, aggregate_id: UUID, version: int | None, projector_func: Any) -> Any:
        snapshot = self._snapshot(aggregate_id, version)
        events = self.event_store.get(originator_id=aggregate_id, gt=snapshot.originator_version if snapshot else None,
                                      lte=version)
        aggregate = projector_func(snapshot.mutate(None) if snapshot else None, events)
        if aggregate is None:
            raise AggregateNotFoundError(f"Aggregate {aggregate_id!r} version {version!r} not found.")
        return aggregate

    def _snapshot(self, aggregate_id: UUID, version: int | None) -> Any:
        store = self.snapshot_store
        if store is None:
            return None
        try:  # once: on any failure the load replays (the events' read has its own bounded retries)
            stored = _once(store.recorder, "select_events")(aggregate_id, desc=True, limit=1, lte=version)
        except PersistenceError:  # also: no snapshot table (a ledger older than snapshots, opened read-only)
            return None
        if not stored:
            return None
        try:
            with _gc_paused():  # a long chat's snapshot is ~10^5 objects: no collections while they are made
                snapshot = store.mapper.to_domain_event(stored[0])
        except CodecError:  # written by other code: ignored, like a fingerprint that differs
            return None
        return snapshot if usable_snapshot(snapshot, aggregate_id) else None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def take_snapshots(app: Any, processing: Any) -> None:
    """The application's ``_take_snapshots``: a snapshot of each saved aggregate whose save carried its stream
    past a multiple of its type's interval, taken from the aggregate itself (at the save's last version: no
    read), then the stream's older snapshots deleted (each holds the whole state: keeping them all would
    store the state once per interval, quadratic in the stream's length). After the commit: a snapshot that
    cannot be written (another process wrote the same one, the database went) costs the next load some
    replay and fails nothing."""
    if app.snapshots is None:
        return
    saved = len(processing.events)
    for aggregate_id, aggregate in processing.aggregates.items():
        interval = app.snapshotting_intervals.get(type(aggregate))
        version = aggregate.version
        if not interval or version % interval >= saved:  # (the usual case: no multiple in reach, O(1))
            continue
        first = min((e.originator_version for e in processing.events if e.originator_id == aggregate_id),
                    default=None)
        if first is None or not crossed(interval, first, version):
            continue
        try:  # once, without the library's retries (ten, 0.2 s apart): the command is recorded already
            stored = app.snapshots.mapper.to_stored_event(SNAPSHOTS[type(aggregate)].take(aggregate))
            _once(app.snapshots.recorder, "insert_events")([stored])
            delete_older(app.snapshots.recorder, aggregate_id, aggregate.version)
        except PersistenceError:
            pass


def _once(recorder: Any, name: str) -> Any:
    """The recorder's method without the library's retry decorator (``functools.wraps`` keeps the original)."""
    method = getattr(recorder, name)
    original = getattr(method, "__wrapped__", None)
    return functools.partial(original, recorder) if original is not None else method


def delete_older(recorder: Any, aggregate_id: UUID, version: int) -> None:
    """Delete the stream's snapshots below ``version`` (the library's snapshot table, either database)."""
    if isinstance(recorder, SQLiteAggregateRecorder):
        statement: Any = f"DELETE FROM {recorder.events_table_name} WHERE originator_id = ? AND originator_version < ?"
        params: tuple[Any, ...] = (aggregate_id.hex, version)
    else:
        from psycopg.sql import SQL, Identifier

        statement = SQL("DELETE FROM {}.{} WHERE originator_id = %s AND originator_version < %s").format(
            Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
        params = (aggregate_id, version)
    with recorder.datastore.transaction(commit=True) as c:
        c.execute(statement, params)
