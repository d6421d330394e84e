"""Events of the Codex-style conversation (one stream per conversation).

Each event is a fact that carries everything ``evolve`` needs: boxes with their ids, allocated tool-call
ids, job numbers and the submitted frontier after the change. Replay never re-derives a decision.

Runtime facts that are process-local in the reference (jobs, frontier, steer generation) are durable here,
because commands that reference them (a late ``complete`` for job 3, a steer token) can outlive a process;
``ConversationRecovered`` resets them the way the reference's cold ``recover`` does (see ``decide``).
"""

from __future__ import annotations

from ledger.base import LedgerCreated, LedgerEvent
from ledger.conversation.values import Box, BoxContent
from ledger.privacy import under

CONVERSATION_TOPIC = "chat-ledger:conversation.Conversation"


class ConversationStarted(LedgerCreated):
    """A conversation exists for ``session``.

    ``transcript`` is empty for a new conversation (the reference's ``new``) or holds a validated,
    persisted transcript being recovered into a new stream (the reference's ``recover`` constructor);
    ``sequence`` is the highest tool-call sequence in it. ``scheduled`` is the ``force`` flag.
    """

    TOPIC = "chat-ledger:conversation.ConversationStarted"

    session: str
    transcript: list[Box]
    sequence: int
    scheduled: bool


class ArrivalAppended(LedgerEvent):
    """External input accepted outside a round: appended at once, and inference is scheduled."""

    TOPIC = "chat-ledger:conversation.ArrivalAppended"

    box: Box


class ArrivalQueued(LedgerEvent):
    """External input accepted while a round is open: queued (no box id yet); a follow-up is armed.

    ``job`` is the running job, or None while the open round is stalled.
    """

    TOPIC = "chat-ledger:conversation.ArrivalQueued"

    content: BoxContent
    job: int | None


class RoundBegan(LedgerEvent):
    """Inference ``job`` started. ``boxes[submitted_from:submitted_to]`` are sent to the provider.

    ``resumed`` is true when a restarted round was reopened (same round, same ``frontier``, new job).
    """

    TOPIC = "chat-ledger:conversation.RoundBegan"

    job: int
    resumed: bool
    frontier: int
    submitted_from: int
    submitted_to: int


class StagePrepared(LedgerEvent):
    """One atomic stage of ``job``: optional agent text then the calls, with their allocated ids.

    ``sequence`` is the last allocated tool-call sequence afterwards; ``submitted`` the new frontier.
    """

    TOPIC = "chat-ledger:conversation.StagePrepared"

    job: int
    boxes: list[Box]
    sequence: int
    submitted: int


class ArrivalsFlushed(LedgerEvent):
    """The whole arrival queue of the open round became canonical boxes (for a steer)."""

    TOPIC = "chat-ledger:conversation.ArrivalsFlushed"

    job: int
    boxes: list[Box]


class SteerPrepared(LedgerEvent):
    """A steer token for ``boxes[start:end]`` is pending; ``generation`` identifies it."""

    TOPIC = "chat-ledger:conversation.SteerPrepared"

    job: int
    generation: int
    start: int
    end: int


class SteerCommitted(LedgerEvent):
    """The provider confirmed the steer: the submitted frontier moves to ``end``."""

    TOPIC = "chat-ledger:conversation.SteerCommitted"

    job: int
    generation: int
    end: int


class SteerDiscarded(LedgerEvent):
    """A pending steer was dropped without advancing the frontier (the round stalled or halted)."""

    TOPIC = "chat-ledger:conversation.SteerDiscarded"

    job: int
    generation: int
    reason: str


class RoundCompleted(LedgerEvent):
    """``job`` finished: optional final agent text, then the queued arrivals drained in FIFO order.

    ``follow_up`` is true when arrivals were drained (one coalesced follow-up inference is scheduled).
    ``submitted`` is the frontier afterwards: past the final text, before the drained arrivals.
    """

    TOPIC = "chat-ledger:conversation.RoundCompleted"

    job: int
    text_box: Box | None
    drained: list[Box]
    follow_up: bool
    submitted: int


class RoundStalled(LedgerEvent):
    """``job`` failed before any call wave: the round stays open (with its frontier) for a restart."""

    TOPIC = "chat-ledger:conversation.RoundStalled"

    job: int
    message: str
    restartable: bool


class ConversationHalted(LedgerEvent):
    """``job`` failed after a call wave: the round is closed (queued arrivals drained, as in the
    reference's ``complete_inference(job, "")``) and a terminal message is installed. Not restartable;
    only ``recover`` leaves this state."""

    TOPIC = "chat-ledger:conversation.ConversationHalted"

    job: int
    message: str
    drained: list[Box]
    follow_up: bool


class ConversationRestarted(LedgerEvent):
    """A restartable stall was cleared: the same round (``frontier``) is ready under a fresh job, and
    the next ``begin`` resends the whole transcript (frontier reset to 0)."""

    TOPIC = "chat-ledger:conversation.ConversationRestarted"

    frontier: int


class ConversationRecovered(LedgerEvent):
    """Cold recovery: runtime state reset to idle with the whole transcript to resend.

    ``drained`` are arrivals still queued in the abandoned round, appended in FIFO order;
    ``sequence`` is the highest stored tool-call sequence; ``abandoned_job`` the job that was running.
    """

    TOPIC = "chat-ledger:conversation.ConversationRecovered"

    sequence: int
    drained: list[Box]
    force: bool
    scheduled: bool
    abandoned_job: int | None


# -- people's data in these events (issue 28, point 1: ``ledger.privacy``, docs/privacy.md) ----------------------
# A conversation is its user's (the actor who started it): every text, tool call's arguments and tool result in
# it. Tool names and ids and the session id are what the machine decides on.

_CONTENT = {"content.text": "owner", "content.arguments": "owner", "content.result": "owner"}
_CONTENT_NOT = {"content.tool_call_id.session": "the conversation's session id", "content.name": "a tool's name"}


#: event class -> field path -> whose data it is (``ledger.privacy.Whose``)
PERSONAL: dict[type, dict[str, str]] = {
    ConversationStarted: under("transcript[]", _CONTENT), ArrivalAppended: under("box", _CONTENT),
    ArrivalQueued: _CONTENT, ArrivalsFlushed: under("boxes[]", _CONTENT), StagePrepared: under("boxes[]", _CONTENT),
    RoundCompleted: {**under("text_box", _CONTENT), **under("drained[]", _CONTENT)},
    ConversationRecovered: under("drained[]", _CONTENT),
    ConversationHalted: {"message": "owner", **under("drained[]", _CONTENT)},
    RoundStalled: {"message": "owner"}, SteerDiscarded: {"reason": "owner"},
}
#: event class -> text field path -> why it is not personal
NOT_PERSONAL: dict[type, dict[str, str]] = {
    ConversationStarted: {"session": "the conversation's session id", **under("transcript[]", _CONTENT_NOT)},
    ArrivalAppended: under("box", _CONTENT_NOT), ArrivalQueued: _CONTENT_NOT,
    ArrivalsFlushed: under("boxes[]", _CONTENT_NOT), StagePrepared: under("boxes[]", _CONTENT_NOT),
    RoundCompleted: {**under("text_box", _CONTENT_NOT), **under("drained[]", _CONTENT_NOT)},
    ConversationRecovered: under("drained[]", _CONTENT_NOT), ConversationHalted: under("drained[]", _CONTENT_NOT),
}
