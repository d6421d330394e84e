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
  **fingerprint** of its class's ``class_version``, of the state's shape (``state_shape``: its types' fields,
  annotations, defaults and encoding settings, nested types and aliases included) and of the source of the
  modules that fold the stream (``FOLD_MODULES``). A snapshot whose fingerprint differs, or
  that does not decode, is ignored (the load replays from the events, as before the first snapshot) and the
  next snapshot of the stream replaces it. ``docs/schema-changes.md`` gives the rule;
* nothing that judges the log reads them: ``events verify``, the projections, audit, export and import read
  the events only (an import writes no snapshot; they are re-taken as the streams grow).

A chat's snapshot is a **head** and **chunks** (``ChatSnapshot``, ``ledger.chat.index``), so that loading a
chat costs what its tail costs, not what its length does: the head (every field of the state, with the
message index's partial last chunk) is the chat's row; each full chunk of the message index is a
``MessageChunk`` row of the chat's chunk stream (``chunk_stream``: per chat and fingerprint), keyed by the
chunk's number and the chat version it was stored at, written once by the first snapshot after it filled up
and again only when a message in it is soft-deleted (the older row of that chunk is then deleted). The head
names the version of each chunk it needs; a restored chat reads a chunk when a rule reaches into it
(``ChunkLoader``: the rows asked for in one select; a missing row costs a replay of the events up to the
head's version, never a different answer). Chunks are written before their head, and a chunk row is the
fold's own data at its version, so a head never names a row that holds anything else.

Snapshots are written as msgpack whatever the payload format (they are never read by people), and
deleting them (``DELETE FROM stored_snapshots``) is always safe.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import functools
import gc
import hashlib
import importlib
import inspect
import re
import sys
import typing
from datetime import datetime, timezone
from typing import Any, ClassVar, Iterator
from uuid import UUID, uuid5

import msgspec
from eventsourcing.application import AggregateNotFoundError, Repository
from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import IntegrityError, PersistenceError
from eventsourcing.sqlite import SQLiteAggregateRecorder

from ledger.base import TOPICS, DeciderAggregate, _register, fast_project
from ledger.codec import CodecError, struct_field
from ledger.chat.aggregate import Chat
from ledger.chat.index import MessageIndex, fits
from ledger.chat.messageinfo import MessageInfo
from ledger.chat.state import ChatState
from ledger.evidence.published import CheckpointLog, LogState


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
        digest.update(state_shape(cls.STATE).encode())
        for name in cls.FOLD_MODULES:
            digest.update(b"\0" + inspect.getsource(importlib.import_module(name)).encode())
        return digest.hexdigest()

    @classmethod
    def take(cls, aggregate: DeciderAggregate) -> StateSnapshot:
        return cls(originator_id=aggregate.id, originator_version=aggregate.version,  # type: ignore[call-arg]
                   timestamp=datetime.now(timezone.utc), fingerprint=cls.current_fingerprint(),
                   created_on=aggregate.created_on, modified_on=aggregate.modified_on,
                   state=cls.head_of(aggregate.state))

    @classmethod
    def head_of(cls, state: Any) -> Any:
        """What the snapshot row holds of the state (all of it, unless a subclass stores parts apart)."""
        return state

    @classmethod
    def write(cls, store: Any, aggregate: DeciderAggregate) -> None:
        """Store a snapshot of ``aggregate`` and delete the stream's older ones (raises PersistenceError)."""
        _once(store.recorder, "insert_events")([store.mapper.to_stored_event(cls.take(aggregate))])
        delete_older(store.recorder, aggregate.id, aggregate.version)

    def usable(self) -> bool:
        """Whether the current code folds the stream as the code that took this snapshot did."""
        return self.fingerprint == type(self).current_fingerprint()

    def bind(self, repository: Any) -> None:
        """Called by the repository before ``mutate``: where parts stored apart are read from."""

    def restored_state(self) -> Any:
        return self.state

    def mutate(self, _: None) -> DeciderAggregate:
        cls = self.AGGREGATE
        agg = cls.__new__(cls)
        agg.__base_init__(self.originator_id, self.originator_version, self.created_on)
        agg._modified_on = self.modified_on
        agg.state = self.restored_state()
        return agg


# -- chats: the head of the state, and the message index in chunks stored apart (``ledger.chat.index``) --------

class StoredIndex(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A chat's message index as its snapshot's head holds it: the chat version each full chunk is stored at
    (its ``MessageChunk`` row), and the partial last chunk itself."""

    length: int
    chunk_size: int
    versions: list[int]
    tail: list[MessageInfo]


def _head_type(state_type: type, replaced: dict[str, Any], name: str) -> Any:
    """``state_type``'s fields, with the types of ``replaced`` swapped (the snapshot's shape of the state)."""
    fields = [struct_field(f.name, replaced.get(f.name, f.type), f.default, f.default_factory, msgspec.NODEFAULT)
              for f in msgspec.structs.fields(state_type)]
    return msgspec.defstruct(name, fields, kw_only=True, module=__name__)


#: a ``ChatState`` with its message index as ``StoredIndex`` (what a chat snapshot's row holds)
ChatHead = _head_type(ChatState, {"messages": StoredIndex}, "ChatHead")
_HEAD_FIELDS = tuple(f for f in ChatHead.__struct_fields__ if f != "messages")

#: chunk ``k`` stored at chat version ``v`` is the row at version ``k << 32 | v`` of the chat's chunk stream
_VERSION_BITS = 32
_VERSION_MASK = (1 << _VERSION_BITS) - 1


class MessageChunk(DomainEvent):
    """One full chunk of a chat's message index, as it was at the chat version it was stored at (a row of
    the snapshot table, in the chat's chunk stream: ``chunk_stream``)."""

    TOPIC: ClassVar[str] = "chat-ledger:chat.MessageChunk"
    class_version: ClassVar[int] = 1
    PAYLOAD_FORMAT: ClassVar[str] = "msgpack"

    messages: list[MessageInfo]


_register(MessageChunk)


def chunk_stream(chat_id: UUID) -> UUID:
    """The stream of a chat's chunks: one per fingerprint, so that a row is only ever read by the code that
    wrote it (rows of other code are never looked at; deleting them is safe)."""
    return uuid5(chat_id, "message-chunks/" + ChatSnapshot.current_fingerprint())


def state_shape(tp: Any) -> str:
    """The shape of a state type, nested types included, as text: for each Struct reachable from ``tp`` its
    qualified name, configuration (``array_like``, ``tag``, ``forbid_unknown_fields``, ...), fields with their
    encoded names and annotations, and defaults; for each other name an annotation refers to (an alias such as
    a ``Literal`` of allowed values, a union, ``Annotated`` constraints), its ``repr``. Two states decode the
    same bytes alike when their shapes are equal.

    (What msgspec's JSON schema of the type says, found without evaluating every annotation through
    ``typing``: 0.1 ms instead of 2-3 ms, paid by the first load from a snapshot in each process.)"""
    out: list[str] = []
    _shape_of(tp, None, set(), out)
    return "\n".join(out)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_STRUCT_CONFIG = ("array_like", "dict", "eq", "forbid_unknown_fields", "frozen", "gc", "omit_defaults", "order",
                  "tag", "tag_field")


def _shape_of(obj: Any, namespace: dict[str, Any] | None, seen: set[int], out: list[str]) -> None:
    if isinstance(obj, str):  # an annotation's text: every name in it, resolved where it was written
        for name in _NAME.findall(obj):
            head, *rest = name.split(".")
            target = (namespace or {}).get(head, getattr(builtins, head, None))
            for part in rest:
                target = getattr(target, part, None)
            if target is not None:
                _shape_of(target, namespace, seen, out)
        return
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
        module = sys.modules.get(obj.__module__)
        ns = vars(module) if module is not None else {}
        annotations: dict[str, Any] = {}
        for base in reversed(obj.__mro__):
            annotations.update(base.__dict__.get("__annotations__", {}))
        config = obj.__struct_config__
        fields = obj.__struct_fields__
        defaults = obj.__struct_defaults__
        defaults = (None,) * (len(fields) - len(defaults)) + tuple(
            f"factory:{getattr(d.factory, '__qualname__', d.factory)!r}" if type(d).__name__ == "Factory" else repr(d)
            for d in defaults)
        out.append(f"{obj.__module__}.{obj.__qualname__} " + " ".join(f"{k}={getattr(config, k)!r}" for k in _STRUCT_CONFIG)
                   + " | " + "; ".join(f"{f}/{e}: {annotations.get(f)!s} = {d}"
                                       for f, e, d in zip(fields, obj.__struct_encode_fields__, defaults)))
        for f in fields:
            _shape_of(annotations.get(f), ns, seen, out)
        return
    if isinstance(obj, type):  # (str, UUID, datetime, ...: named in the annotations' text already)
        return
    args = typing.get_args(obj)
    if args or typing.get_origin(obj) is not None:  # an alias: its repr names its members and constraints
        out.append(repr(obj))
        for arg in args:
            _shape_of(arg, namespace, seen, out)


class ChatSnapshot(StateSnapshot):
    """A chat's state at a version: the head (every field, the message index's partial last chunk) in the
    chat's stream of the snapshot table, each full chunk in its own row (written once, rewritten only when a
    message in it is soft-deleted), read when a reader reaches into it."""

    TOPIC: ClassVar[str] = "chat-ledger:chat.Snapshot"
    class_version: ClassVar[int] = 1
    AGGREGATE = Chat
    STATE = ChatHead
    FOLD_MODULES = ("ledger.chat.evolve", "ledger.chat.state", "ledger.chat.index", "ledger.chat.messageinfo",
                    "ledger.chat.values", "ledger.base")

    state: ChatHead

    @classmethod
    def head_of(cls, state: ChatState) -> Any:
        versions, tail = state.messages.stored_form()
        index = StoredIndex(len(state.messages), state.messages.chunk_size, versions, tail)
        return ChatHead(messages=index, **{f: getattr(state, f) for f in _HEAD_FIELDS})

    @classmethod
    def write(cls, store: Any, aggregate: DeciderAggregate) -> None:
        """The chunks not stored yet (or changed since), then the head; the older rows of each."""
        index: MessageIndex = aggregate.state.messages
        unstored = index.unstored()
        if unstored:
            stream, version = chunk_stream(aggregate.id), aggregate.version
            rows = [store.mapper.to_stored_event(MessageChunk(  # type: ignore[call-arg]
                originator_id=stream, originator_version=k << _VERSION_BITS | version,
                timestamp=datetime.now(timezone.utc), messages=chunk)) for k, chunk in unstored]
            insert = _once(store.recorder, "insert_events")
            try:
                insert(rows)
            except IntegrityError:  # some are there already (a copy of this state wrote them): the same rows
                for row in rows:
                    with contextlib.suppress(IntegrityError):
                        insert([row])
            for k, _ in unstored:
                index.mark_stored(k, version)
            delete_older(store.recorder, stream, *((k << _VERSION_BITS | version, k << _VERSION_BITS)
                                                   for k, _ in unstored))  # one transaction for them all
        super().write(store, aggregate)

    def bind(self, repository: Any) -> None:
        self.__dict__["_loader"] = ChunkLoader(repository, self.originator_id, self.originator_version,
                                               self.state.messages.chunk_size)

    def restored_state(self) -> ChatState:
        head = self.state
        stored = head.messages
        messages = MessageIndex.restore(stored.length, stored.chunk_size, stored.versions, stored.tail,
                                        self.__dict__.get("_loader"))
        return ChatState(messages=messages, **{f: getattr(head, f) for f in _HEAD_FIELDS})


class ChunkLoader:
    """Reads a restored chat's chunks (``MessageIndex``'s loader): the rows of the versions asked for, in one
    select; a row that is missing or does not decode (the table was cleared, a later snapshot replaced it)
    costs a replay of the chat's events up to the snapshot's version instead, which gives the same rows."""

    def __init__(self, repository: Any, chat_id: UUID, version: int, chunk_size: int) -> None:
        self.repository, self.chat_id, self.version, self.chunk_size = repository, chat_id, version, chunk_size
        self._replayed: Any = None

    def __call__(self, wanted: dict[int, int]) -> dict[int, list[MessageInfo]]:
        out: dict[int, list[MessageInfo]] = {}
        store = self.repository.snapshot_store
        try:
            lo, hi = min(wanted), max(wanted)
            rows = _once(store.recorder, "select_events")(
                chunk_stream(self.chat_id), gt=(lo << _VERSION_BITS) - 1 if lo else None,
                lte=hi << _VERSION_BITS | _VERSION_MASK)
            with _gc_paused():
                for row in rows:
                    k, v = row.originator_version >> _VERSION_BITS, row.originator_version & _VERSION_MASK
                    if wanted.get(k) == v:
                        messages = store.mapper.to_domain_event(row).messages
                        if fits(k, messages, self.chunk_size):
                            out[k] = messages  # (anything else is not this chunk: replayed below)
        except (PersistenceError, CodecError):
            pass
        missing = [k for k in wanted if k not in out]
        if missing:
            if self._replayed is None:
                self._replayed = fast_project(None, self.repository.event_store.get(self.chat_id, lte=self.version))
            msgs, size = self._replayed.state.messages, self.chunk_size
            for k in missing:  # (copies: the replayed messages are this loader's, a chunk is its reader's)
                out[k] = [copy.copy(m) for m in msgs[k * size:(k + 1) * size]]
        return out


class CheckpointLogSnapshot(StateSnapshot):
    """The published checkpoints' stream (a checkpoint a minute is half a million events a year): its state is
    the latest checkpoint and its cosignatures, one small row."""

    TOPIC: ClassVar[str] = "chat-ledger:evidence.CheckpointLogSnapshot"
    class_version: ClassVar[int] = 1
    AGGREGATE = CheckpointLog
    STATE = LogState
    FOLD_MODULES = ("ledger.evidence.published", "ledger.base")

    state: LogState


#: aggregate class -> its snapshot class
SNAPSHOTS: dict[type, type[StateSnapshot]] = {Chat: ChatSnapshot, CheckpointLog: CheckpointLogSnapshot}
#: aggregate class -> snapshot every this many events (``ChatLedgerApp.snapshotting_intervals``)
INTERVALS: dict[type, int] = {Chat: 500, CheckpointLog: 500}


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
        if not usable_snapshot(snapshot, aggregate_id):
            return None
        snapshot.bind(self)
        return snapshot


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
            SNAPSHOTS[type(aggregate)].write(app.snapshots, aggregate)
        except PersistenceError:
            pass


def _once(recorder: Any, name: str) -> Any:
    """The recorder's method without the library's retry decorator (``functools.wraps`` keeps the original)."""
    method = getattr(recorder, name)
    original = getattr(method, "__wrapped__", None)
    return functools.partial(original, recorder) if original is not None else method


def delete_older(recorder: Any, aggregate_id: UUID, *ranges: int | tuple[int, int]) -> None:
    """Delete the stream's snapshot rows below each range's version and at its floor or above (the library's
    snapshot table, either database), in one transaction. A range is ``version`` (floor 0) or ``(version,
    floor)``."""
    where = "WHERE originator_id = {p} AND originator_version < {p} AND originator_version >= {p}"
    bounds = [r if isinstance(r, tuple) else (r, 0) for r in ranges]
    if isinstance(recorder, SQLiteAggregateRecorder):
        statement: Any = f"DELETE FROM {recorder.events_table_name} " + where.format(p="?")
        oid: Any = aggregate_id.hex
    else:
        from psycopg.sql import SQL, Identifier

        statement = SQL("DELETE FROM {}.{} " + where.format(p="%s")).format(
            Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
        oid = aggregate_id
    with recorder.datastore.transaction(commit=True) as c:
        c.executemany(statement, [(oid, version, floor) for version, floor in bounds])
