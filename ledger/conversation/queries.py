"""Read-only questions about a conversation state: steer validation, what to send, view rows."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.conversation.errors import INVALID_STEER, refuse
from ledger.conversation.state import RUNNING, ConversationState
from ledger.conversation.values import Box, History, SteerToken, project


def validate_steer(state: ConversationState, token: SteerToken) -> None:
    """The reference's ``validate_steer``: call it right before the provider's steer API.

    Valid iff the token is the pending one (the reference's ``Arc`` identity: generations never repeat
    in a stream, so field equality is identity), its job is running, and the frontier and transcript
    still end where the token says. Raises ``invalid_steer`` ("stale or invalid Codex steer")."""
    valid = (
        state.mode == RUNNING and state.job == token.job
        and state.generation == token.generation
        and state.submitted == token.start
        and len(state.boxes) == token.end
        and token.end >= token.start
        and state.pending_steer == token
    )
    if not valid:
        raise refuse(INVALID_STEER)


def projected(boxes: list[Box]) -> list[History]:
    return [project(box) for box in boxes]


def boxes_to_send(state: ConversationState, start: int, end: int) -> list[History]:
    """``project(boxes[start:end])``: what a ``begin`` or a steer hands to the provider."""
    return projected(state.boxes[start:end])


def steer_values(state: ConversationState, token: SteerToken) -> list[History]:
    return boxes_to_send(state, token.start, token.end)


def steer_json(state: ConversationState, token: SteerToken | None) -> dict[str, Any] | None:
    if token is None:
        return None
    return {**msgspec.to_builtins(token), "values": msgspec.to_builtins(steer_values(state, token))}


def conversation_view_row(state: ConversationState) -> dict[str, Any]:
    """The status row a projection keeps per conversation (JSON-able)."""
    return {
        "session": state.session,
        "status": state.status,
        "restartable": state.restartable,
        "stall_message": state.stall_message,
        "halted": state.halted,
        "box_count": len(state.boxes),
        "queued_count": len(state.queued),
        "current_job": state.job,
        "pending_steer": state.pending_steer is not None,
        "last_sequence": state.sequence,
        "submitted": state.submitted,
    }


def conversation_show(state: ConversationState) -> dict[str, Any]:
    """Everything about one conversation: the view row, every box as the codec projects it, the queued
    arrivals (no box ids yet) and the pending steer token."""
    return {
        "conversation": conversation_view_row(state),
        "boxes": [msgspec.to_builtins(value) for value in projected(state.boxes)],
        "queued": [msgspec.to_builtins(content) for content in state.queued],
        "pending_steer": steer_json(state, state.pending_steer),
    }
