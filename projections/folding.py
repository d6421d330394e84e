"""Projections of aggregate state: fold each stream with the aggregate's own ``evolve``, emit row diffs.

A chat's views (status, unresolved tool calls, queue) are functions of the chat's state, which is the
fold of its events with ``ledger.chat.evolve``. A ``StreamFold`` keeps the folded state of recently seen
streams in memory (a bounded LRU), each tagged with its stream version. When the state before an event
is not in memory at the version just before it — after a restart, an eviction, a failed batch (whose
in-place updates were never committed), or a rebuild — it is loaded from the event store *at that
version*: recorded events never change, so the state at ``(stream, version)`` is a fixed fact and the
rows computed from it are the same however the projection got there. That is what makes an incremental
view equal a rebuild, and equal the rows computed from the aggregates' replayed states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Folded states kept in memory: enough for every chat of a deployment with thousands active at once (a state
#: missing is read again from the store, many streams in one query), bounded so memory is too.
MAX_STREAMS = 20_000


class StreamFold:
    def __init__(self, app: Any, evolve: Callable[[Any, Any], Any], created: type, max_streams: int = MAX_STREAMS) -> None:
        self.app = app
        self.evolve = evolve
        self.created = created
        self.max_streams = max_streams
        # stream id (as an int: hashing a UUID object costs a Python call) -> (version, state);
        # insertion order = least recently folded first (an LRU).
        self._states: dict[int, tuple[int, Any]] = {}
        self._newest: int | None = None  # the key inserted last
        self.loads = 0  # states loaded from the store (for tests and benchmarks)

    def before(self, event: Any) -> Any:
        """The stream's state just before ``event`` (None for the event that creates the stream)."""
        if isinstance(event, self.created):
            return None
        sid, version = event.originator_id, event.originator_version
        known = self._states.get(sid.int)
        if known is not None and known[0] == version - 1:
            return known[1]
        self.loads += 1
        agg = self.app.load(sid, version=version - 1)
        if agg is None:
            raise LookupError(f"stream {sid} has no events before version {version}")
        return agg.state

    def take(self, event: Any) -> Any:
        """Like ``before``, but the state leaves the memory: the caller evolves it (in place) through
        any number of events and gives it back with ``put``. If the caller fails before that, the
        memory holds nothing half-applied for the stream (it is loaded again when next needed)."""
        state = self.before(event)
        if state is not None:
            self.forget(event.originator_id.int)
        return state

    def put(self, key: int, version: int, state: Any) -> None:
        """Remember ``state`` as stream ``key``'s state at ``version`` (the most recently used)."""
        self._remember(key, version, state)

    def prefetch(self, events: Any) -> None:
        """Load, before a batch is applied, the state each stream of the batch needs and the memory
        does not hold (so ``before`` never reads the store while the view's transaction is open): the
        missing streams' events are read together (``projections.streamwise.read_streams``: one query per
        500 streams, not one per stream) and folded with ``evolve``."""
        seen: set[int] = set()
        missing: dict[Any, int] = {}
        for event in events:
            sid = event.originator_id
            if sid.int in seen:
                continue
            seen.add(sid.int)
            if isinstance(event, self.created):
                continue
            known = self._states.get(sid.int)
            if known is not None and known[0] == event.originator_version - 1:
                continue
            missing[sid] = event.originator_version - 1
        if missing:
            self._load_many(missing)

    def _load_many(self, upto: dict[Any, int]) -> None:
        from projections.streamwise import read_streams

        to_event = self.app.mapper.to_domain_event
        key, state, version = None, None, 0
        for _, stored in read_streams(self.app, upto):
            k = stored.originator_id.int
            if k != key:
                if key is not None:
                    self._remember(key, version, state)
                key, state = k, None
            state = self.evolve(state, to_event(stored))
            version = stored.originator_version
        if key is not None:
            self._remember(key, version, state)
        self.loads += len(upto)

    def forget(self, key: int) -> None:
        """Drop stream ``key``'s state (a stream-wise build keeps no state once a stream's rows are out)."""
        self._states.pop(key, None)
        if self._newest == key:
            self._newest = None

    def _remember(self, key: int, version: int, state: Any) -> None:
        states = self._states
        if key == self._newest:  # consecutive events of one stream: already the most recent entry
            states[key] = (version, state)
            return
        states.pop(key, None)
        states[key] = (version, state)
        self._newest = key
        if len(states) > self.max_streams:
            del states[next(iter(states))]

    def after(self, event: Any, state: Any) -> Any:
        """Apply ``event`` (in place) and remember the result."""
        state = self.evolve(state, event)
        self._remember(event.originator_id.int, event.originator_version, state)
        return state
