"""How many notifications a log-order run (catch-up, follow, a log-order rebuild) commits per transaction.

A view exact at every committed position writes each touched stream's rows once per transaction; on a log
recorded with thousands of chats at once nearly every event of a 500-notification batch touches a different
chat, so the rows, not the events, dominate a catch-up after a pause (BENCHMARKS.md, issue 17 point 4). The
number of row writes per event falls with the batch: a batch several times the number of active chats
writes each of them about once.

So, unless the caller fixes the size (``batch_size=N``: windows of N, as before), the window grows while the
run is far behind: it starts at ``DEFAULT_BATCH`` (what a run at the head, e.g. ``follow``, commits: it stays
as responsive as before); after each committed batch that left more than two windows of lag it grows
toward the window that, at that batch's rates, would take ``BATCH_SECONDS`` and read ``BATCH_BYTES`` of
stored events — by at most ``GROWTH_STEP`` x, only when that is at least 1.5x, up to ``MAX_BATCH``; it
halves (not below ``DEFAULT_BATCH``) after a batch that took more than twice ``BATCH_SECONDS`` or read more
than twice ``BATCH_BYTES``. Every commit is still one exact position (rows and position in one transaction), so exactly-once, leases
(held batch by batch: a rebuild waits for one batch, about ``BATCH_SECONDS``) and failures naming their
event are unchanged; a crash loses at most one batch of work. On SQLite a batch's view transaction (about
half its time) holds the file's write lock: commands then wait up to that long (their lock timeout is 30 s). Memory grows with the window (its events
are decoded at once): +140-235 MB at 100,000 notifications of the benchmark's chats (BENCHMARKS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from projections.notes import read_window

#: the first window (and the smallest) of a run whose batch size is not fixed
DEFAULT_BATCH = 500
#: the largest factor of one growth step (500 can reach 100,000 in two batches)
GROWTH_STEP = 16
#: the largest window grown to (notifications): its decoded events are in memory at once
MAX_BATCH = 100_000
#: the time a batch (read, decode, apply, commit) may grow to take; twice as long halves the window
BATCH_SECONDS = 4.0
#: the stored payload bytes a batch may grow to read; twice as much halves the window (a window's
#: events are in memory at once, decoded: about three times their stored size)
BATCH_BYTES = 48 << 20


class Pace:
    """The window of the next batch of a log-order run (see the module)."""

    def __init__(self, batch_size: int | None = None) -> None:
        """``batch_size``: fixed windows of that many notifications; None: windows that grow (the module)."""
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        # The module's settings are read here, per run (tests vary them).
        self.base = DEFAULT_BATCH if batch_size is None else batch_size
        self.max = self.base if batch_size is not None else max(self.base, MAX_BATCH)
        self.step, self.seconds, self.max_bytes = GROWTH_STEP, BATCH_SECONDS, BATCH_BYTES
        self.window = self.base
        self.bytes = 0  # stored payload bytes of the last window read

    def read(self, app: Any, after: int, stop: int, topics: Sequence[str] | None) -> Sequence[Any]:
        """The notifications of the window ``(after, stop]`` (at most ``window``; ``projections.notes``)."""
        notes = read_window(app, after, stop, self.window, topics)
        self.bytes = sum([len(n.state) for n in notes])
        return notes

    def done(self, seconds: float, lag: int) -> None:
        """A batch committed in ``seconds``, leaving ``lag`` notifications to the head: size the next window."""
        if self.max == self.base:
            return  # fixed windows
        if seconds > 2 * self.seconds or self.bytes > 2 * self.max_bytes:
            self.window = max(self.base, self.window // 2)
            return
        if lag <= 2 * self.window:
            return
        # Toward the window this batch's rates say would take ``seconds`` and read ``max_bytes``, by at most
        # ``step`` at a time (and not for less than half as much again).
        factor = min(float(self.step), self.seconds / max(seconds, 1e-6), self.max_bytes / max(self.bytes, 1))
        if factor >= 1.5:
            self.window = min(self.max, int(self.window * factor))
