"""Pure decisions of the Codex-style conversation: ``decide_<operation>(state, ..., emitter) -> events``.

A refusal raises ``LedgerError`` before any event is emitted, so a refused command records nothing
(the reference's "transactional" rejections). Semantics follow codex-state 0.3.0 (docs/codex.md §3: "the reference") on top of
chat-state 0.5.0 / chatend 0.4.0; the points the reference leaves open (docs/codex.md §8.5) are decided as follows:

* **begin sends only the external delta.** ``complete`` moves the submitted frontier past the agent's
  own final text (the provider wrote it, so the live thread knows it); the next ``begin`` sends only the
  arrivals drained at completion and what came after. ``restart`` and ``recover`` still resend the whole
  transcript (frontier 0). This is the later upstream behaviour ("begin submits only the external
  canonical delta") instead of 0.3.0's re-sending quirk.
* **Duplicate returns are refused at accept time**, queued ones included: the return index counts
  queued returns, so flushing or draining the queue can never fail.
* **Quiet** means: idle, no inference scheduled, no restarted round waiting for ``begin``.
* **Halt and begin.** A halt exists only together with a non-restartable stall (the reference exposes no
  ``take_halt``), and ``begin`` starts nothing while stalled, so only ``recover`` leaves a halt.
* **recover(force)** resets the runtime state to idle with the whole transcript to resend. Arrivals still
  queued in the abandoned round are durable here (the reference kept them in memory and lost them), so
  they are appended in FIFO order rather than dropped. An inference is scheduled iff ``force``, or one was
  already scheduled, or queued arrivals were appended; an interrupted round is not rescheduled by itself
  (pass ``force``), as in the reference where the caller decides.
* **Job numbers and steer generations never reset** within a stream, not even by ``recover`` (the
  reference renumbers because its process is new). Commands carry them and can outlive a crash here, so
  keeping them monotonic keeps a pre-crash ``complete(job)`` or steer token stale.
* **An empty stage** (no text, no calls) is checked like any stage and then records nothing.
* **Completion-path failures are recorded, not refused.** ``complete`` with an uncommitted steer or a box
  in the terminal output stalls the conversation (the reference mutates and returns ``Err``); here the
  stall events are recorded and the handler reports the outcome with the §3 message.
"""

from __future__ import annotations

from typing import Sequence

from ledger.base import Emitter, LedgerEvent
from ledger.conversation.errors import (
    COMPLETED_WITH_UNCOMMITTED_STEER, DUPLICATE_TOOL_CALL, DUPLICATE_TOOL_RETURN, EMPTY_AGENT_TEXT,
    FOREIGN_SESSION, FRONTIER_INCONSISTENT, JOB_IDS_EXHAUSTED, MALFORMED_TOOL_CALL, NON_CONTIGUOUS_BOX_ID,
    NOT_RESTARTABLE, NOT_STALLED, RECOVERED_DUPLICATE_RETURN, RECOVERED_UNKNOWN_TOOL_CALL, STALE_COMPLETION,
    STALE_STAGE, STALE_STEER, STEER_GENERATIONS_EXHAUSTED, STEER_UNCOMMITTED, TERMINAL_OUTPUT_BOX,
    TOOL_CALL_IDS_EXHAUSTED, UNKNOWN_TOOL_CALL, WRONG_ORIGINATING_CALL, refuse,
)
from ledger.conversation.events import (
    CONVERSATION_TOPIC, ArrivalAppended, ArrivalQueued, ArrivalsFlushed, ConversationHalted,
    ConversationRecovered, ConversationRestarted, ConversationStarted, RoundBegan, RoundCompleted,
    RoundStalled, StagePrepared, SteerCommitted, SteerDiscarded, SteerPrepared,
)
from ledger.conversation.queries import validate_steer
from ledger.conversation.state import IDLE, RUNNING, STALLED, ConversationState
from ledger.conversation.values import (
    MAX_U64, AgentText, Arrival, Box, BoxContent, BoxItem, BoxValue, Call, OutputItem, SteerToken,
    TextItem, ToolCall, ToolCallId, ToolReturn, ToolReturnArrival,
)
from ledger.errors import invalid_command

Events = list[LedgerEvent]


# -- transcript recovery (the reference's ``recover`` constructor) --------------------------------------

def recovered_sequence(session: str, boxes: Sequence[Box]) -> int:
    """The highest tool-call sequence in ``boxes`` (0 if none); any foreign session is refused."""
    maximum = 0
    for box in boxes:
        content = box.content
        if isinstance(content, (ToolCall, ToolReturn)):
            if content.tool_call_id.session != session:
                raise refuse(FOREIGN_SESSION)
            if content.tool_call_id.sequence > MAX_U64:
                raise invalid_command("tool call sequence does not fit in 64 bits")
            maximum = max(maximum, content.tool_call_id.sequence)
    return maximum


def validate_transcript(boxes: Sequence[Box]) -> None:
    """Chatend recovery rules: contiguous ids from 1, non-empty agent text, unique tool-call ids, and
    every return names an earlier call (its box id as ``originating_call``) with at most one return."""
    calls: dict[ToolCallId, int] = {}
    returned: set[ToolCallId] = set()
    for index, box in enumerate(boxes):
        if box.id != index + 1:
            raise refuse(NON_CONTIGUOUS_BOX_ID)
        content = box.content
        if isinstance(content, AgentText) and not content.text:
            raise refuse(EMPTY_AGENT_TEXT)
        if isinstance(content, ToolCall):
            if content.tool_call_id in calls:
                raise refuse(DUPLICATE_TOOL_CALL)
            calls[content.tool_call_id] = box.id
        elif isinstance(content, ToolReturn):
            call_box = calls.get(content.tool_call_id)
            if call_box is None:
                raise refuse(RECOVERED_UNKNOWN_TOOL_CALL)
            if call_box != content.originating_call:
                raise refuse(WRONG_ORIGINATING_CALL)
            if content.tool_call_id in returned:
                raise refuse(RECOVERED_DUPLICATE_RETURN)
            returned.add(content.tool_call_id)


def decide_start(session: str, transcript: Sequence[Box], force: bool, emitter: Emitter) -> Events:
    """A new conversation (empty ``transcript``: the reference's ``new``, quiet unless ``force``) or a
    persisted transcript recovered into a new stream: idle, whole transcript to resend, sequence = the
    highest stored. The foreign-session check runs before the Chatend validation, as in the reference."""
    sequence = recovered_sequence(session, transcript)
    validate_transcript(transcript)
    return [emitter.emit(ConversationStarted, originator_topic=CONVERSATION_TOPIC, session=session,
                         transcript=list(transcript), sequence=sequence, scheduled=force)]


# -- arrivals -------------------------------------------------------------------------------------------

def _resolve_arrival(state: ConversationState, arrival: Arrival) -> BoxContent:
    if not isinstance(arrival, ToolReturnArrival):
        return arrival
    tool_call_id = arrival.tool_call_id
    call_box = state.calls.get(tool_call_id.sequence) if tool_call_id.session == state.session else None
    if call_box is None:
        raise refuse(UNKNOWN_TOOL_CALL)
    if tool_call_id.sequence in state.returned:
        raise refuse(DUPLICATE_TOOL_RETURN)
    return ToolReturn(tool_call_id=tool_call_id, originating_call=call_box, result=arrival.result,
                      is_error=arrival.is_error)


def decide_arrive(state: ConversationState, arrival: Arrival, emitter: Emitter) -> Events:
    """Accepted in every mode (the reference has no mode check). Outside a provider round the box is
    appended and inference scheduled; while a round is open (running, or stalled before a wave) it is
    queued and arms one coalesced follow-up. A return must name an existing call without a return."""
    content = _resolve_arrival(state, arrival)
    if state.round_open:
        return [emitter.emit(ArrivalQueued, content=content, job=state.job)]
    return [emitter.emit(ArrivalAppended, box=Box(id=len(state.boxes) + 1, content=content))]


# -- rounds ---------------------------------------------------------------------------------------------

def decide_begin(state: ConversationState, emitter: Emitter) -> Events:
    """Start the next job if one is ready: a restarted round (same round and frontier, fresh job) or,
    outside a round, a scheduled inference. Nothing (no error) when not idle or nothing is ready.

    The boxes to send are ``boxes[submitted:]``; see the module notes for why that excludes the agent's
    own final text."""
    if state.mode != IDLE:
        return []
    if state.retry_ready:
        resumed, frontier = True, state.round_frontier
    elif not state.round_open and state.scheduled:
        resumed, frontier = False, len(state.boxes)
    else:
        return []
    if state.last_job >= MAX_U64:
        raise refuse(JOB_IDS_EXHAUSTED)
    return [emitter.emit(RoundBegan, job=state.last_job + 1, resumed=resumed, frontier=frontier,
                         submitted_from=state.submitted, submitted_to=len(state.boxes))]


def _is_running(state: ConversationState, job: int) -> bool:
    return state.mode == RUNNING and state.job == job


def decide_prepare_stage(state: ConversationState, job: int, text: str, values: Sequence[BoxValue],
                         emitter: Emitter) -> Events:
    """One atomic stage: optional non-empty agent text, then the calls in provider order with ids
    ``sequence+1, sequence+2, …``. Checks in the reference's order: malformed value (before the job
    check), stale job, pending steer, id exhaustion. Ids are allocated only here, in the event that
    appends their call boxes, so an id handed out is durable and is never allocated again."""
    calls: list[Call] = []
    for value in values:
        if not isinstance(value, Call):
            raise refuse(MALFORMED_TOOL_CALL)
        calls.append(value)
    if not _is_running(state, job):
        raise refuse(STALE_STAGE)
    if state.pending_steer is not None:
        raise refuse(STEER_UNCOMMITTED)
    if state.sequence + len(calls) > MAX_U64:
        raise refuse(TOOL_CALL_IDS_EXHAUSTED)
    if not text and not calls:
        return []
    boxes: list[Box] = []
    if text:
        boxes.append(Box(id=len(state.boxes) + 1, content=AgentText(text=text)))
    sequence = state.sequence
    for call in calls:
        sequence += 1
        boxes.append(Box(id=len(state.boxes) + len(boxes) + 1, content=ToolCall(
            tool_call_id=ToolCallId(session=state.session, sequence=sequence),
            name=call.name, arguments=call.arguments)))
    return [emitter.emit(StagePrepared, job=job, boxes=boxes, sequence=sequence,
                         submitted=len(state.boxes) + len(boxes))]


def _queued_as_boxes(state: ConversationState, after: int) -> list[Box]:
    return [Box(id=after + i + 1, content=content) for i, content in enumerate(state.queued)]


# -- steering -------------------------------------------------------------------------------------------

def decide_prepare_steer(state: ConversationState, job: int, emitter: Emitter) -> Events:
    """Flush the queued arrivals into boxes and hand out a token for them. Re-preparing while a token is
    pending returns that token (no events); nothing queued gives no token and no generation. The flush
    is canonical even if the steer is never committed, and consumes the pending follow-up."""
    if not _is_running(state, job):
        raise refuse(STALE_STEER)
    if state.pending_steer is not None:
        return []
    if state.submitted != len(state.boxes):
        raise refuse(FRONTIER_INCONSISTENT)
    if state.generation >= MAX_U64:
        raise refuse(STEER_GENERATIONS_EXHAUSTED)
    if not state.queued:
        return []
    start = len(state.boxes)
    flushed = _queued_as_boxes(state, start)
    return [
        emitter.emit(ArrivalsFlushed, job=job, boxes=flushed),
        emitter.emit(SteerPrepared, job=job, generation=state.generation + 1, start=start,
                     end=start + len(flushed)),
    ]


def decide_commit_steer(state: ConversationState, token: SteerToken, emitter: Emitter) -> Events:
    """Exactly once, after the provider confirmed the steer: the frontier moves to ``token.end``."""
    validate_steer(state, token)
    return [emitter.emit(SteerCommitted, job=token.job, generation=token.generation, end=token.end)]


# -- completion and failure -----------------------------------------------------------------------------

def _preserve(state: ConversationState, message: str, restartable_before_launch: bool,
              emitter: Emitter) -> Events:
    """Stall the running round. The pending steer is dropped without advancing the frontier. After a
    call wave the round is closed and halted (never restartable: launched calls make a replay unsafe);
    before one the round stays open, restartable iff the caller certifies nothing was launched."""
    assert state.job is not None
    job = state.job
    events: Events = []
    if state.pending_steer is not None:
        events.append(emitter.emit(SteerDiscarded, job=job, generation=state.pending_steer.generation,
                                   reason=message))
    if state.call_wave:
        drained = _queued_as_boxes(state, len(state.boxes))
        events.append(emitter.emit(ConversationHalted, job=job, message=message, drained=drained,
                                   follow_up=bool(drained)))
    else:
        events.append(emitter.emit(RoundStalled, job=job, message=message,
                                   restartable=restartable_before_launch))
    return events


def completion_error(output: Sequence[OutputItem], steer_pending: bool) -> tuple[str, str] | None:
    """Why a completion stalls instead of completing (§3 order: uncommitted steer, then a box)."""
    if steer_pending:
        return COMPLETED_WITH_UNCOMMITTED_STEER
    if any(isinstance(item, BoxItem) for item in output):
        return TERMINAL_OUTPUT_BOX
    return None


def decide_complete(state: ConversationState, job: int, output: Sequence[OutputItem],
                    emitter: Emitter) -> Events:
    """Finish ``job`` with text only: the concatenated text items become the final agent box (none if
    empty), then the queued arrivals are drained and one follow-up is scheduled if there were any.
    A stale job is refused with no change. An uncommitted steer or a box in the output stalls the round
    non-restartably (recorded; see the module notes)."""
    if not _is_running(state, job):
        raise refuse(STALE_COMPLETION)
    error = completion_error(output, state.pending_steer is not None)
    if error is not None:
        return _preserve(state, error[1], False, emitter)
    text = "".join(item.text for item in output if isinstance(item, TextItem))
    text_box = Box(id=len(state.boxes) + 1, content=AgentText(text=text)) if text else None
    after_text = len(state.boxes) + (1 if text_box else 0)
    drained = _queued_as_boxes(state, after_text)
    return [emitter.emit(RoundCompleted, job=job, text_box=text_box, drained=drained,
                         follow_up=bool(drained), submitted=after_text)]


def decide_fail(state: ConversationState, job: int, message: str, restartable_before_launch: bool,
                emitter: Emitter) -> Events:
    """Stall the running ``job`` (see ``_preserve``); a stale or unknown job is ignored (no events)."""
    if not _is_running(state, job):
        return []
    return _preserve(state, message, restartable_before_launch, emitter)


def decide_restart(state: ConversationState, emitter: Emitter) -> Events:
    """Only from a restartable stall: the same round becomes ready under a fresh job, the next ``begin``
    resends the whole transcript, the sequence and the generation are kept."""
    if state.mode != STALLED:
        raise refuse(NOT_STALLED)
    if not state.restartable:
        raise refuse(NOT_RESTARTABLE)
    return [emitter.emit(ConversationRestarted, frontier=state.round_frontier)]


def decide_recover(state: ConversationState, force: bool, emitter: Emitter) -> Events:
    """Cold recovery from the stored transcript, allowed in any mode (see the module notes). The
    transcript is revalidated and the sequence recomputed as the highest stored id, as the reference
    does; in a stream written by ``decide`` both are consistent by construction."""
    drained = _queued_as_boxes(state, len(state.boxes))
    transcript = [*state.boxes, *drained]
    sequence = recovered_sequence(state.session, transcript)
    validate_transcript(transcript)
    scheduled = force or state.scheduled or bool(drained)
    return [emitter.emit(ConversationRecovered, sequence=sequence, drained=drained, force=force,
                         scheduled=scheduled, abandoned_job=state.job)]
