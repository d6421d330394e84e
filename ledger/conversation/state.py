"""The state ``decide`` reads and ``evolve`` builds: the reference's ConversationState + ActorState.

The transcript (``boxes``) is kept whole: ``begin``, steering and recovery send box contents to the
provider, and the reference state holds them too. Everything else is an index or a counter, so replay
stays linear in the number of events.
"""

from __future__ import annotations

import msgspec

from ledger.conversation.values import Box, BoxContent, SteerToken

IDLE = "idle"
RUNNING = "running"
STALLED = "stalled"


class KeyRange(msgspec.Struct):
    """Stream versions recorded by the command that carried an idempotency key."""

    first: int
    last: int


class ConversationState(msgspec.Struct, kw_only=True):
    session: str
    #: canonical transcript; ``boxes[i].id == i + 1``
    boxes: list[Box] = []
    #: tool-call sequence -> box id of its call (every call carries this conversation's session)
    calls: dict[int, int] = {}
    #: sequences whose return is stored or queued (a call has at most one return)
    returned: set[int] = set()
    #: arrivals accepted while the round is open, not yet boxes (FIFO); non-empty = follow-up armed
    queued: list[BoxContent] = []
    #: last allocated tool-call sequence
    sequence: int = 0
    #: ``boxes[:submitted]`` are known to the live provider thread
    submitted: int = 0
    #: last steer generation handed out
    generation: int = 0
    #: last job number handed out
    last_job: int = 0
    mode: str = IDLE
    #: the running job (mode == running)
    job: int | None = None
    #: the current (or last) round accepted a stage with at least one call
    call_wave: bool = False
    #: a provider round is open (running, stalled before a wave, or restarted and not yet begun)
    round_open: bool = False
    #: number of boxes when the open round began
    round_frontier: int = 0
    #: a restarted round waits for ``begin``
    retry_ready: bool = False
    #: an inference is due (arrival while idle, follow-up, force)
    scheduled: bool = False
    stall_message: str | None = None
    restartable: bool = False
    #: the stall closed the round after a call wave (terminal until recover)
    halted: bool = False
    pending_steer: SteerToken | None = None
    idempotency: dict[str, KeyRange] = {}

    @property
    def quiet(self) -> bool:
        return self.mode == IDLE and not self.scheduled and not self.retry_ready

    @property
    def status(self) -> str:
        """``Running`` | ``Quiet`` | ``Stalled`` as in the reference's ``status()``."""
        if self.mode == STALLED:
            return "Stalled"
        return "Quiet" if self.quiet else "Running"
