"""How many notifications a log-order run (catch-up, follow, a log-order rebuild) commits per transaction.

A view exact at every committed position writes each touched stream's rows once per transaction; on a log
recorded with thousands of chats at once nearly every event of a 500-notification batch touches a different
chat, so the rows, not the events, dominate a catch-up after a pause (BENCHMARKS.md, issue 17 point 4). The
number of row writes per event falls with the batch: a batch several times the number of active chats
writes each of them about once.

So the window grows while the run is far behind: it starts at ``batch_size`` (what a run at the head, e.g.
``follow``, commits: it stays as responsive as before), quadruples after each committed batch that left more
than two windows of lag and took less than ``BATCH_SECONDS``, up to ``max_batch`` (``GROWTH`` x
``batch_size``, at most ``MAX_BATCH`` unless ``batch_size`` itself is larger), and halves after a batch that
took more than twice ``BATCH_SECONDS``. Every commit is still one exact position (rows and position in one
transaction), so exactly-once, leases (held batch by batch: a rebuild waits about ``BATCH_SECONDS`` at most
for one) and failures naming their event are unchanged; a crash loses at most one batch of work.
"""

from __future__ import annotations

#: how far the window may grow over ``batch_size``
GROWTH = 64
#: the factor of each growth step (a run far behind reaches the largest window after three batches)
GROWTH_STEP = 4
#: the largest window grown to (notifications): its decoded events are in memory at once
MAX_BATCH = 50_000
#: a batch (read, decode, apply, commit) taking longer than this stops the growth; twice as long halves it
BATCH_SECONDS = 2.0


class Pace:
    """The window of the next batch of a log-order run (see the module)."""

    def __init__(self, batch_size: int, max_batch: int | None = None, seconds: float | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        # The module's settings are read here, per run (tests vary them).
        self.base, self.step = batch_size, GROWTH_STEP
        self.max = max(batch_size, min(batch_size * GROWTH, MAX_BATCH) if max_batch is None else max_batch)
        self.seconds = BATCH_SECONDS if seconds is None else seconds
        self.window = batch_size

    def done(self, seconds: float, lag: int) -> None:
        """A batch committed in ``seconds``, leaving ``lag`` notifications to the head: size the next window."""
        if seconds > 2 * self.seconds:
            self.window = max(self.base, self.window // 2)
        elif seconds < self.seconds and lag > 2 * self.window:
            self.window = min(self.max, self.window * self.step)
