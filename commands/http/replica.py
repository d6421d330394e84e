"""Reads from a hot standby (``serve --replica-url``): which database answers a read, and read-your-writes.

Commands always go to the primary (``--db``). Views, timelines, event pages and the live stream are read from
the standby, whose views are the primary follower's, replicated. A standby lags: a token that has written
through this process reads its own writes — its reads need the standby's log and the views they read at or
past the primary's head as it was when the read first followed a write (one ``head()`` read on the primary
then, none for tokens that have not written). The read waits up to ``wait`` seconds for the standby to get
there, then is answered by the primary (views caught up there, as without a replica). A read that the standby
cannot answer because it has not seen a stream yet (``chat_not_found``…) is asked of the primary too.

The memory is per process: a client whose write went through another ``serve`` process (behind a load
balancer without sticky sessions) may read from a standby that has not replayed it yet.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, TypeVar
from uuid import UUID

from ledger.errors import LedgerError

T = TypeVar("T")

#: seconds a read waits for the standby to reach a writer's position before the primary answers it
REPLICA_WAIT = 1.0
#: seconds between looks at the standby's position while a read waits for it
_LOOK = 0.02
#: refusals meaning "not there yet" on a standby that lags: the primary is asked
NOT_YET = frozenset({"chat_not_found", "stream_not_found", "conversation_not_found", "organization_not_found"})


class ReplicaReads:
    def __init__(self, primary: Any, replica: Any, wait: float = REPLICA_WAIT) -> None:
        self.primary, self.replica, self.wait = primary, replica, wait
        self._lock = threading.Lock()
        self._wrote: set[UUID] = set()  # tokens that wrote since their last read
        self._floor: dict[UUID, int] = {}  # token -> the position its reads must see
        #: reads answered by each side (the ``/metrics`` counter ``chat_ledger_replica_reads_total``)
        self.served = {"replica": 0, "primary": 0}

    def wrote(self, token_id: UUID) -> None:
        """The token's command was recorded: its next read must see it."""
        with self._lock:
            self._wrote.add(token_id)

    def floor(self, token_id: UUID) -> int:
        with self._lock:
            fresh = token_id in self._wrote
            self._wrote.discard(token_id)
        if fresh:  # read the primary's head now, after the write was acknowledged: it covers the write
            head = self.primary.head()
            with self._lock:
                self._floor[token_id] = max(self._floor.get(token_id, 0), head)
        with self._lock:
            return self._floor.get(token_id, 0)

    def _position(self, names: tuple[str, ...]) -> int:
        head = self.replica.head()
        return min(head, self.replica.views_position(*names)) if names else head

    def choose(self, token_id: UUID, names: tuple[str, ...]) -> Any:
        """The ledger to read from: the standby once it is at the token's floor, else the primary."""
        floor = self.floor(token_id)
        deadline = time.monotonic() + self.wait
        while True:
            try:
                if self._position(names) >= floor:
                    return self.replica
            except Exception:  # noqa: BLE001 - a standby that does not answer: the primary does
                return self.primary
            if time.monotonic() >= deadline:
                return self.primary
            time.sleep(_LOOK)  # the standby replays on its own; look again

    def read(self, token_id: UUID, names: tuple[str, ...], fn: Callable[[Any], T]) -> T:
        """``fn(ledger)`` on the chosen side; on the primary when the standby has not seen what was asked."""
        ledger = self.choose(token_id, names)
        if ledger is self.replica:
            try:
                result = fn(ledger)
                self._count("replica")
                return result
            except LedgerError as e:
                if e.code not in NOT_YET:
                    raise
        result = fn(self.primary)
        self._count("primary")
        return result

    def _count(self, side: str) -> None:
        with self._lock:
            self.served[side] += 1

    def lag(self) -> tuple[int, float]:
        """(events the standby's log is behind the primary's, seconds since the last transaction it replayed
        when it is behind; 0 when it is not)."""
        behind = max(self.primary.head() - self.replica.head(), 0)
        if not behind:
            return 0, 0.0
        rows = self.replica.app.recorder.datastore  # the standby's own clock for its replay time
        with rows.transaction(commit=False) as c:
            c.execute("SELECT EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) AS s")
            row = c.fetchone()
        return behind, float(row["s"] or 0.0) if row else 0.0
