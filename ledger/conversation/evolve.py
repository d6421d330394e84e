"""``evolve(state, event) -> state``: applies one recorded fact. Mutates ``state`` in place.

Total for histories ``decide`` produces; it checks the structural invariants it relies on (box ids
contiguous, the queue drained whole) and raises ``ValueError`` on a history that breaks them, so a corrupt
stream is noticed instead of silently producing a wrong state.
"""

from __future__ import annotations

from typing import Any

from ledger.conversation.events import (
    ArrivalAppended, ArrivalQueued, ArrivalsFlushed, ConversationHalted, ConversationRecovered,
    ConversationRestarted, ConversationStarted, RoundBegan, RoundCompleted, RoundStalled,
    SteerCommitted, SteerDiscarded, SteerPrepared, StagePrepared,
)
from ledger.conversation.state import IDLE, RUNNING, STALLED, ConversationState, KeyRange
from ledger.conversation.values import Box, SteerToken, ToolCall, ToolReturn


def _append(state: ConversationState, box: Box) -> None:
    if box.id != len(state.boxes) + 1:
        raise ValueError(f"box id {box.id} does not follow {len(state.boxes)}")
    content = box.content
    if isinstance(content, ToolCall):
        state.calls[content.tool_call_id.sequence] = box.id
    elif isinstance(content, ToolReturn):
        state.returned.add(content.tool_call_id.sequence)
    state.boxes.append(box)


def _drain(state: ConversationState, drained: list[Box]) -> None:
    if [b.content for b in drained] != state.queued:
        raise ValueError("drained boxes do not match the arrival queue")
    for box in drained:
        _append(state, box)
    state.queued.clear()


def _remember_key(state: ConversationState, event: Any) -> None:
    key = event.idempotency_key
    if key is None:
        return
    version = event.originator_version
    seen = state.idempotency.get(key)
    if seen is None:
        state.idempotency[key] = KeyRange(first=version, last=version)
    elif seen.last == version - 1:
        seen.last = version


def evolve(state: ConversationState | None, event: Any) -> ConversationState:
    if isinstance(event, ConversationStarted):
        state = ConversationState(session=event.session, sequence=event.sequence,
                                  scheduled=event.scheduled)
        for box in event.transcript:
            _append(state, box)
        _remember_key(state, event)
        return state
    assert state is not None, "the first event of a conversation is ConversationStarted"
    _remember_key(state, event)

    if isinstance(event, ArrivalAppended):
        _append(state, event.box)
        state.scheduled = True
    elif isinstance(event, ArrivalQueued):
        state.queued.append(event.content)
        if isinstance(event.content, ToolReturn):
            state.returned.add(event.content.tool_call_id.sequence)
    elif isinstance(event, RoundBegan):
        if event.resumed:
            state.retry_ready = False
        else:
            state.scheduled = False
            state.round_open = True
        state.round_frontier = event.frontier
        state.last_job = event.job
        state.mode = RUNNING
        state.job = event.job
        state.call_wave = False
        state.submitted = event.submitted_to
    elif isinstance(event, StagePrepared):
        for box in event.boxes:
            _append(state, box)
            if isinstance(box.content, ToolCall):
                state.call_wave = True
        state.sequence = event.sequence
        state.submitted = event.submitted
    elif isinstance(event, ArrivalsFlushed):
        _drain(state, event.boxes)
    elif isinstance(event, SteerPrepared):
        state.generation = event.generation
        state.pending_steer = SteerToken(job=event.job, generation=event.generation,
                                         start=event.start, end=event.end)
    elif isinstance(event, SteerCommitted):
        state.submitted = event.end
        state.pending_steer = None
    elif isinstance(event, SteerDiscarded):
        state.pending_steer = None
    elif isinstance(event, RoundCompleted):
        if event.text_box is not None:
            _append(state, event.text_box)
        _drain(state, event.drained)
        state.mode = IDLE
        state.job = None
        state.round_open = False
        state.scheduled = state.scheduled or event.follow_up
        state.submitted = event.submitted
    elif isinstance(event, RoundStalled):
        state.mode = STALLED
        state.job = None
        state.pending_steer = None
        state.stall_message = event.message
        state.restartable = event.restartable
    elif isinstance(event, ConversationHalted):
        _drain(state, event.drained)
        state.mode = STALLED
        state.job = None
        state.pending_steer = None
        state.round_open = False
        state.scheduled = state.scheduled or event.follow_up
        state.stall_message = event.message
        state.restartable = False
        state.halted = True
    elif isinstance(event, ConversationRestarted):
        state.mode = IDLE
        state.retry_ready = True
        state.submitted = 0
        state.pending_steer = None
        state.stall_message = None
        state.restartable = False
    elif isinstance(event, ConversationRecovered):
        _drain(state, event.drained)
        state.mode = IDLE
        state.job = None
        state.call_wave = False
        state.round_open = False
        state.round_frontier = 0
        state.retry_ready = False
        state.scheduled = event.scheduled
        state.stall_message = None
        state.restartable = False
        state.halted = False
        state.pending_steer = None
        state.submitted = 0
        state.sequence = event.sequence
    else:
        raise ValueError(f"not a conversation event: {type(event).__name__}")
    return state
