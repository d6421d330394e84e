"""Commands of the Codex-style conversation and their handlers.

Each handler runs one unit of work (``commands.uow.run``): load the stream, decide with the pure core,
record, and return a JSON-able result built from the recorded events and the state after them. Because
results are built that way, a repeat carrying an ``idempotency_key`` the stream has already recorded is
answered by rebuilding the first result from the stream at that point, and records nothing. A command that
records nothing (``begin`` with nothing ready, a stale ``fail``, re-preparing a pending steer) leaves no
trace of its key; repeating it simply decides again. A key already recorded on the stream by a different
kind of command is refused (``idempotency_key_reused``) and records nothing.

Every result has ``conversation_id``, ``version`` and the status fields of ``conversation_view_row``
(``status``, ``restartable``, ``stall_message``, ``halted``, ``box_count``, ``queued_count``,
``current_job``, ``pending_steer``, ``last_sequence``, ``submitted``, ``session``), plus the outputs each
command's docstring names.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence
from uuid import NAMESPACE_URL, UUID, uuid4, uuid5

import msgspec

from commands.base import Command, check_repeat, emitter, handles
from commands.uow import UnitOfWork, run
from ledger.base import Emitter, LedgerEvent
from ledger.conversation import decide as core
from ledger.conversation.aggregate import Conversation
from ledger.conversation.errors import (
    COMPLETED_WITH_UNCOMMITTED_STEER, CONVERSATION_EXISTS, CONVERSATION_NOT_FOUND, TERMINAL_OUTPUT_BOX,
    refuse,
)
from ledger.conversation.events import (
    ArrivalAppended, ArrivalQueued, ArrivalsFlushed, ConversationHalted, ConversationRecovered,
    ConversationRestarted, ConversationStarted, RoundBegan, RoundCompleted, RoundStalled, StagePrepared,
    SteerCommitted, SteerDiscarded, SteerPrepared,
)
from ledger.conversation.queries import (
    boxes_to_send, conversation_show, conversation_view_row, steer_json, validate_steer,
)
from ledger.conversation.state import ConversationState
from ledger.conversation.values import (
    Arrival, Box, BoxValue, OutputItem, Session, SteerToken, TextItem, ToolCall,
)
from ledger.errors import LedgerError, invalid_command
from ledger.streams import refuse_reserved

#: Namespace of conversation ids derived from an idempotency key (``conversation_start`` without an id).
CONVERSATION_KEY_NAMESPACE = uuid5(NAMESPACE_URL, "chat-ledger:conversation")


# -- command messages -----------------------------------------------------------------------------------

class ConversationStart(Command, tag="conversation_start"):
    """Start a conversation. Without ``conversation_id`` the id is ``uuid5(namespace, idempotency_key)``
    when a key is given (so a repeat finds the same stream), else a fresh ``uuid4``. Without ``session``
    a random one is minted. ``transcript`` recovers a persisted transcript into the new stream.
    Outputs: ``box_ids`` (of the recovered transcript)."""

    conversation_id: UUID | None = None
    session: Session | None = None
    transcript: list[Box] = []
    force: bool = False


class ConversationArrive(Command, tag="conversation_arrive"):
    """External input. Outputs: ``queued`` (true while a round is open), ``box_id`` (None when queued)."""

    conversation_id: UUID
    arrival: Arrival


class ConversationBegin(Command, tag="conversation_begin"):
    """Outputs: ``started``, ``job`` (None if nothing was ready), ``resumed``, ``boxes`` (to send)."""

    conversation_id: UUID


class ConversationPrepareStage(Command, tag="conversation_prepare_stage"):
    """Outputs: ``tool_calls`` (``tool_call_id``, ``name``, ``arguments``, ``box_id``; launch these),
    ``box_ids``."""

    conversation_id: UUID
    job: int
    text: str = ""
    values: list[BoxValue] = []


class ConversationPrepareSteer(Command, tag="conversation_prepare_steer"):
    """Outputs: ``steer`` (``job``, ``generation``, ``start``, ``end``, ``values``; or None),
    ``flushed_box_ids``."""

    conversation_id: UUID
    job: int


class ConversationValidateSteer(Command, tag="conversation_validate_steer"):
    """Read-only. Outputs: ``valid`` (true), else refused with ``invalid_steer``."""

    conversation_id: UUID
    steer: SteerToken


class ConversationCommitSteer(Command, tag="conversation_commit_steer"):
    """After the provider confirmed the steer. Outputs: ``committed``."""

    conversation_id: UUID
    steer: SteerToken


class ConversationComplete(Command, tag="conversation_complete"):
    """``items`` is the provider's terminal output; ``text`` is shorthand for one text item.
    Outputs: ``outcome`` (``completed`` | ``stalled`` | ``halted``), ``error`` (None, or the stall's
    ``code`` and §3 ``message``), ``box_ids`` (final text and drained arrivals), ``follow_up``."""

    conversation_id: UUID
    job: int
    items: list[OutputItem] = []
    text: str | None = None


class ConversationFail(Command, tag="conversation_fail"):
    """Outputs: ``outcome`` (``stalled`` | ``halted`` | ``ignored`` for a stale job), ``box_ids``
    (arrivals drained by a halt), ``follow_up``."""

    conversation_id: UUID
    job: int
    message: str
    restartable_before_launch: bool = False


class ConversationRestart(Command, tag="conversation_restart"):
    conversation_id: UUID


class ConversationRecover(Command, tag="conversation_recover"):
    """Outputs: ``box_ids`` (queued arrivals appended), ``abandoned_job``."""

    conversation_id: UUID
    force: bool = False


CONVERSATION_COMMANDS: tuple[type[Command], ...] = (
    ConversationStart, ConversationArrive, ConversationBegin, ConversationPrepareStage,
    ConversationPrepareSteer, ConversationValidateSteer, ConversationCommitSteer, ConversationComplete,
    ConversationFail, ConversationRestart, ConversationRecover,
)

IDEMPOTENCY_KEY_REUSED = ("idempotency_key_reused", "idempotency key was already used by a different command")

# -- results --------------------------------------------------------------------------------------------

#: (events recorded by the command, state after them) -> the operation's outputs
Outputs = Callable[[Sequence[Any], ConversationState], dict[str, Any]]

_STALL_EVENTS = frozenset({SteerDiscarded, RoundStalled, ConversationHalted})
#: the event kinds each operation can record: a key whose events are not all of the repeated command's
#: kinds was used by a different command, which is refused rather than answered with a foreign result
_RECORDS: dict[type[Command], frozenset[type]] = {
    ConversationStart: frozenset({ConversationStarted}),
    ConversationArrive: frozenset({ArrivalAppended, ArrivalQueued}),
    ConversationBegin: frozenset({RoundBegan}),
    ConversationPrepareStage: frozenset({StagePrepared}),
    ConversationPrepareSteer: frozenset({ArrivalsFlushed, SteerPrepared}),
    ConversationCommitSteer: frozenset({SteerCommitted}),
    ConversationComplete: frozenset({RoundCompleted}) | _STALL_EVENTS,
    ConversationFail: _STALL_EVENTS,
    ConversationRestart: frozenset({ConversationRestarted}),
    ConversationRecover: frozenset({ConversationRecovered}),
}


def _of(events: Sequence[Any], cls: type) -> Any:
    return next((e for e in events if isinstance(e, cls)), None)


def _result(conversation_id: UUID, version: int, state: ConversationState,
            outputs: dict[str, Any]) -> dict[str, Any]:
    return {"conversation_id": str(conversation_id), "version": version,
            **conversation_view_row(state), **outputs}


def _start_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    started = _of(events, ConversationStarted)
    return {"box_ids": [b.id for b in started.transcript] if started else []}


def _arrive_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    appended = _of(events, ArrivalAppended)
    return {"queued": appended is None, "box_id": appended.box.id if appended else None}


def _begin_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    began = _of(events, RoundBegan)
    if began is None:
        return {"started": False, "job": None, "resumed": False, "boxes": []}
    boxes = boxes_to_send(state, began.submitted_from, began.submitted_to)
    return {"started": True, "job": began.job, "resumed": began.resumed,
            "boxes": msgspec.to_builtins(boxes)}


def _stage_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    stage = _of(events, StagePrepared)
    boxes = stage.boxes if stage else []
    calls = [
        {"tool_call_id": msgspec.to_builtins(b.content.tool_call_id), "name": b.content.name,
         "arguments": b.content.arguments, "box_id": b.id}
        for b in boxes if isinstance(b.content, ToolCall)
    ]
    return {"tool_calls": calls, "box_ids": [b.id for b in boxes]}


def _steer_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    flushed = _of(events, ArrivalsFlushed)
    return {"steer": steer_json(state, state.pending_steer),
            "flushed_box_ids": [b.id for b in flushed.boxes] if flushed else []}


def _commit_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    return {"committed": bool(events)}


_STALL_CODES = {message: code for code, message in (COMPLETED_WITH_UNCOMMITTED_STEER, TERMINAL_OUTPUT_BOX)}


def _stall_outputs(events: Sequence[Any]) -> dict[str, Any] | None:
    stall = _of(events, RoundStalled) or _of(events, ConversationHalted)
    if stall is None:
        return None
    drained = stall.drained if isinstance(stall, ConversationHalted) else []
    return {"outcome": "halted" if isinstance(stall, ConversationHalted) else "stalled",
            "message": stall.message, "box_ids": [b.id for b in drained],
            "follow_up": bool(drained)}


def _complete_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    stall = _stall_outputs(events)
    if stall is not None:
        message = stall.pop("message")
        return {**stall, "error": {"code": _STALL_CODES.get(message, "stalled"), "message": message}}
    completed = _of(events, RoundCompleted)
    boxes = [completed.text_box] if completed and completed.text_box else []
    boxes += completed.drained if completed else []
    return {"outcome": "completed", "error": None, "box_ids": [b.id for b in boxes],
            "follow_up": bool(completed and completed.follow_up)}


def _fail_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    stall = _stall_outputs(events)
    if stall is None:
        return {"outcome": "ignored", "box_ids": [], "follow_up": False}
    stall.pop("message")
    return stall


def _no_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    return {}


def _recover_outputs(events: Sequence[Any], state: ConversationState) -> dict[str, Any]:
    recovered = _of(events, ConversationRecovered)
    return {"box_ids": [b.id for b in recovered.drained] if recovered else [],
            "abandoned_job": recovered.abandoned_job if recovered else None}


# -- execution ------------------------------------------------------------------------------------------

def _replayed(app: Any, agg: Conversation, cmd: Command, outputs: Outputs) -> dict[str, Any] | None:
    """The first result of the command that recorded ``cmd.idempotency_key`` on this stream, rebuilt
    from the stream as it was then; None if the key is new here."""
    key = cmd.idempotency_key
    seen = agg.state.idempotency.get(key) if key is not None else None
    if seen is None:
        return None
    events = app.stream(agg.id, gt=seen.first - 1, lte=seen.last)
    if not check_repeat(cmd, events) and not {type(e) for e in events} <= _RECORDS[type(cmd)]:
        raise LedgerError(*IDEMPOTENCY_KEY_REUSED)  # a key recorded without its command's identity
    then = app.load(agg.id, version=seen.last)
    return _result(agg.id, then.version, then.state, outputs(events, then.state))


def _load(uow: UnitOfWork, conversation_id: UUID) -> Conversation:
    agg = uow.get(conversation_id)
    if not isinstance(agg, Conversation):
        raise refuse(CONVERSATION_NOT_FOUND)
    return agg


def _execute(app: Any, cmd: Any,
             decide: Callable[[ConversationState, Emitter], list[LedgerEvent]],
             outputs: Outputs) -> dict[str, Any]:
    def work(uow: UnitOfWork) -> dict[str, Any]:
        agg = _load(uow, cmd.conversation_id)
        replay = _replayed(app, agg, cmd, outputs)
        if replay is not None:
            return replay
        em = emitter(cmd, agg.id, agg.version, uow.now)
        events = decide(agg.state, em)
        uow.record(agg, events)
        return _result(agg.id, agg.version, agg.state, outputs(events, agg.state))

    return run(app, work)


# -- handlers -------------------------------------------------------------------------------------------

@handles(ConversationStart)
def handle_start(app: Any, cmd: ConversationStart) -> dict[str, Any]:
    refuse_reserved("conversation_id", cmd.conversation_id)
    if cmd.conversation_id is not None:
        conversation_id = cmd.conversation_id
    elif cmd.idempotency_key is not None:
        conversation_id = uuid5(CONVERSATION_KEY_NAMESPACE, cmd.idempotency_key)
    else:
        conversation_id = uuid4()
    session = cmd.session or os.urandom(12).hex()

    def work(uow: UnitOfWork) -> dict[str, Any]:
        existing = uow.get(conversation_id)
        if existing is not None:
            replay = (_replayed(app, existing, cmd, _start_outputs)
                      if isinstance(existing, Conversation) else None)
            if replay is not None:
                return replay
            raise refuse(CONVERSATION_EXISTS)
        em = emitter(cmd, conversation_id, 0, uow.now)
        events = core.decide_start(session, cmd.transcript, cmd.force, em)
        agg = uow.create(Conversation, events)
        return _result(agg.id, agg.version, agg.state, _start_outputs(events, agg.state))

    return run(app, work)


@handles(ConversationArrive)
def handle_arrive(app: Any, cmd: ConversationArrive) -> dict[str, Any]:
    return _execute(app, cmd, lambda s, e: core.decide_arrive(s, cmd.arrival, e), _arrive_outputs)


@handles(ConversationBegin)
def handle_begin(app: Any, cmd: ConversationBegin) -> dict[str, Any]:
    return _execute(app, cmd, core.decide_begin, _begin_outputs)


@handles(ConversationPrepareStage)
def handle_prepare_stage(app: Any, cmd: ConversationPrepareStage) -> dict[str, Any]:
    """The stage is saved before this returns, so the tool-call ids it hands out are durable."""
    return _execute(app, cmd, lambda s, e: core.decide_prepare_stage(s, cmd.job, cmd.text, cmd.values, e),
                    _stage_outputs)


@handles(ConversationPrepareSteer)
def handle_prepare_steer(app: Any, cmd: ConversationPrepareSteer) -> dict[str, Any]:
    return _execute(app, cmd, lambda s, e: core.decide_prepare_steer(s, cmd.job, e), _steer_outputs)


@handles(ConversationValidateSteer)
def handle_validate_steer(app: Any, cmd: ConversationValidateSteer) -> dict[str, Any]:
    """Read-only: ``valid: true``, or refused with ``invalid_steer``."""

    def work(uow: UnitOfWork) -> dict[str, Any]:
        agg = _load(uow, cmd.conversation_id)
        validate_steer(agg.state, cmd.steer)
        return _result(agg.id, agg.version, agg.state, {"valid": True})

    return run(app, work)


@handles(ConversationCommitSteer)
def handle_commit_steer(app: Any, cmd: ConversationCommitSteer) -> dict[str, Any]:
    return _execute(app, cmd, lambda s, e: core.decide_commit_steer(s, cmd.steer, e), _commit_outputs)


@handles(ConversationComplete)
def handle_complete(app: Any, cmd: ConversationComplete) -> dict[str, Any]:
    if cmd.text is not None and cmd.items:
        raise invalid_command("give either text or items, not both")
    items: list[OutputItem] = [TextItem(text=cmd.text)] if cmd.text is not None else list(cmd.items)
    return _execute(app, cmd, lambda s, e: core.decide_complete(s, cmd.job, items, e), _complete_outputs)


@handles(ConversationFail)
def handle_fail(app: Any, cmd: ConversationFail) -> dict[str, Any]:
    return _execute(
        app, cmd,
        lambda s, e: core.decide_fail(s, cmd.job, cmd.message, cmd.restartable_before_launch, e),
        _fail_outputs,
    )


@handles(ConversationRestart)
def handle_restart(app: Any, cmd: ConversationRestart) -> dict[str, Any]:
    return _execute(app, cmd, core.decide_restart, _no_outputs)


@handles(ConversationRecover)
def handle_recover(app: Any, cmd: ConversationRecover) -> dict[str, Any]:
    return _execute(app, cmd, lambda s, e: core.decide_recover(s, cmd.force, e), _recover_outputs)


# -- reads ----------------------------------------------------------------------------------------------

def load_conversation(app: Any, conversation_id: UUID, version: int | None = None) -> Conversation:
    agg = app.load(conversation_id, version=version)
    if not isinstance(agg, Conversation):
        raise refuse(CONVERSATION_NOT_FOUND)
    return agg


def show_conversation(app: Any, conversation_id: UUID, version: int | None = None) -> dict[str, Any]:
    """``show`` data for one conversation (optionally as of a stream version)."""
    agg = load_conversation(app, conversation_id, version)
    show = conversation_show(agg.state)
    show["conversation"] = {"conversation_id": str(agg.id), "version": agg.version, **show["conversation"]}
    return show


