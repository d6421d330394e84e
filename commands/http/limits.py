"""Per-token limits of one ``serve`` process: concurrent event streams, and the rate of commands.

A token past either limit is answered ``rate_limited`` (HTTP 429) with ``Retry-After``, and nothing is
recorded. The write limit is a token bucket per token: ``write_rate`` commands per second on average, bursts of
up to ``write_burst``; a request of several commands (JSON Lines) takes one per command, and may take the bucket
into debt (a request larger than the burst is let through once the bucket is full, and the debt is paid in
time). The limits are per process: N processes behind a balancer allow N times as much. 0 turns a limit off.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from uuid import UUID

from commands.access import REFUSALS, Principal
from ledger.errors import LedgerError

#: ``serve``'s defaults (docs/server.md, "Limits")
STREAMS_PER_TOKEN = 8
WRITE_RATE = 1000.0
WRITE_BURST = 2000.0


class RateLimited(LedgerError):
    """``rate_limited``: try again after ``retry_after`` seconds (the ``Retry-After`` header, rounded up)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__("rate_limited", f"{REFUSALS['rate_limited'][1]}: {message}")
        self.retry_after = max(1, math.ceil(retry_after))


class Limits:
    """The limits of one process (thread-safe)."""

    def __init__(self, *, streams_per_token: int = STREAMS_PER_TOKEN, write_rate: float = WRITE_RATE,
                 write_burst: float = WRITE_BURST) -> None:
        self.streams_per_token = streams_per_token
        self.write_rate = write_rate
        self.write_burst = max(write_burst, 1.0)
        self._streams: dict[UUID | None, int] = {}
        self._buckets: dict[UUID | None, tuple[float, float]] = {}  # token -> (tokens left, when counted)
        self._lock = threading.Lock()

    def write(self, p: Principal, commands: int = 1) -> None:
        """Take ``commands`` from the token's bucket, or refuse ``rate_limited`` (taking nothing)."""
        if self.write_rate <= 0 or commands <= 0:
            return
        now = time.monotonic()
        with self._lock:
            left, then = self._buckets.get(p.token_id, (self.write_burst, now))
            left = min(self.write_burst, left + (now - then) * self.write_rate)
            need = min(commands, self.write_burst)
            if left < need:
                self._buckets[p.token_id] = (left, now)
                raise RateLimited(f"more than {self.write_rate:g} commands a second (bursts of "
                                  f"{self.write_burst:g}) from one token", (need - left) / self.write_rate)
            self._buckets[p.token_id] = (left - commands, now)
            if len(self._buckets) > 100_000:  # full buckets forget nothing worth keeping
                self._buckets = {k: v for k, v in self._buckets.items() if v[0] < self.write_burst}

    def open_stream(self, p: Principal) -> Callable[[], None]:
        """Take one of the token's stream slots (``rate_limited`` when none is free); the function that gives
        it back (once, however often it is called: the stream's end calls it)."""
        with self._lock:
            open_now = self._streams.get(p.token_id, 0)
            if 0 < self.streams_per_token <= open_now:
                raise RateLimited(f"the token has {open_now} event streams open (at most "
                                  f"{self.streams_per_token}): close one first", 5)
            self._streams[p.token_id] = open_now + 1
        given_back = threading.Event()

        def release() -> None:
            with self._lock:
                if given_back.is_set():
                    return
                given_back.set()
                left = self._streams[p.token_id] - 1
                if left:
                    self._streams[p.token_id] = left
                else:
                    del self._streams[p.token_id]

        return release
