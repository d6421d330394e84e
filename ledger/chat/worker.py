"""The worker's transitions of the chat decider: generation attempts, retries, steps, the ends of a turn,
ownership (chatd's runner), each checked against the worker's fence first."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ledger.base import Emitter
from ledger.catalog.resolve import ModelFacts
from ledger.catalog.values import Limits
from ledger.chat import events as ev
from ledger.chat.draft import Draft
from ledger.chat.rules import (
    INVALID_STATE_CANCELED,
    INVALID_STATE_ERROR,
    QUEUED_PROMOTION,
    SettingsNeeded,
    check_fence,
    require,
    worker_facts,
)
from ledger.chat.state import ChatState
from ledger.chat.values import (
    AttemptSettings,
    ChatError,
    Fence,
    MessageInput,
    is_receipt,
)
from ledger.errors import LedgerError, invalid_command


def record_generation_attempt(state: ChatState, em: Emitter, *, settings: AttemptSettings | None = None,
                              fence: Fence | None = None) -> list[Any]:
    """A new generation attempt with what it runs with: ``settings`` as the runner passed them, or (None)
    ``SettingsNeeded`` once the checks pass, for the handler to resolve them and decide again."""
    check_fence(state, fence, "RecordGenerationAttempt")
    require(state, "RecordGenerationAttempt")
    if settings is None:
        raise SettingsNeeded()
    em.emit(ev.GenerationAttemptRecorded, generation_attempt=state.generation_attempt + 1, settings=settings,
            runner_id=state.runner_id, fence=fence)
    return em.events


def record_retry_state(state: ChatState, em: Emitter, *, retry_state: dict[str, Any],
                       fence: Fence | None = None) -> list[Any]:
    check_fence(state, fence, "RecordRetryState")
    require(state, "RecordRetryState")
    if not retry_state:
        raise invalid_command("RecordRetryState requires a retry payload")
    em.emit(ev.RetryStateRecorded, retry_state=retry_state, **worker_facts(state, fence))
    return em.events


def commit_step(state: ChatState, em: Emitter, *, messages: list[MessageInput],
                consume_compaction_request: bool = False, fence: Fence | None = None,
                limits: Limits | None = None) -> list[Any]:
    check_fence(state, fence, "CommitStep")
    require(state, "CommitStep")
    if not messages:
        raise invalid_command("CommitStep requires at least one message")
    d = Draft(state, em, None, limits)
    msgs = d.messages(messages, turn_id=state.turn_id)
    d.limits.tool_output(msgs)
    d.limits.attachments(msgs)
    em.emit(ev.StepCommitted, messages=msgs,
            consumed_compaction_request=consume_compaction_request and state.compaction_requested_at is not None,
            limits=d.limits.recorded(), **worker_facts(state, fence))
    return em.events


def require_receipts(messages: list[MessageInput]) -> None:
    """chatd's ``requireReceipts``: every terminal message is a structured-output receipt, or nothing is
    recorded (checked after the matrix, as upstream does)."""
    for m in messages:
        if not is_receipt(m.role, m.visibility, m.parts):
            raise invalid_command("terminal message is not a structured output receipt")


def finish_turn(state: ChatState, em: Emitter, models: ModelFacts | None = None, *,
                terminal_messages: list[MessageInput] = (),  # type: ignore[assignment]
                fence: Fence | None = None) -> list[Any]:
    """R0 -> W; R1 -> the head promoted (calls canceled first); R1P -> paused at the head under edit.
    ``terminal_messages`` (structured-output receipts) are recorded with the turn's end: on R1 after the
    cancellations and before the promoted head (chatd ``TestTerminalReceipts``)."""
    check_fence(state, fence, "FinishTurn")
    st = require(state, "FinishTurn")
    require_receipts(list(terminal_messages))
    d = Draft(state, em, models)
    if st == "R1":
        d.cancel(QUEUED_PROMOTION)
    em.emit(ev.TurnFinished, messages=d.messages(list(terminal_messages), turn_id=state.turn_id),
            **worker_facts(state, fence))
    d.at_boundary()
    return em.events


def finish_interruption(state: ChatState, em: Emitter, *, partial_messages: list[MessageInput] = (),  # type: ignore[assignment]
                        terminal_messages: list[MessageInput] = (),  # type: ignore[assignment]
                        models: ModelFacts | None = None, fence: Fence | None = None,
                        limits: Limits | None = None) -> list[Any]:
    """``terminal_messages`` go last among the partial messages (chatd takes the receipt as the last
    partial message); a receipt never hides an outstanding call, so one left open still refuses."""
    check_fence(state, fence, "FinishInterruption")
    require(state, "FinishInterruption")
    require_receipts(list(terminal_messages))
    Draft(state, em, models, limits).finish_interruption(list(partial_messages) + list(terminal_messages),
                                                         fence=fence)
    return em.events


def finish_error(state: ChatState, em: Emitter, *, error: ChatError,
                 terminal_messages: list[MessageInput] = (),  # type: ignore[assignment]
                 fence: Fence | None = None) -> list[Any]:
    """The chat parks in error; ``terminal_messages`` (receipts) are recorded first, in the same event."""
    check_fence(state, fence, "FinishError")
    require(state, "FinishError")
    require_receipts(list(terminal_messages))
    msgs = Draft(state, em).messages(list(terminal_messages), turn_id=state.turn_id)
    em.emit(ev.TurnFailed, last_error=error, messages=msgs, **worker_facts(state, fence))
    return em.events


def fail_idle(state: ChatState, em: Emitter, *, error: str) -> list[Any]:
    require(state, "FailIdle")
    em.emit(ev.IdleChatFailed, last_error=ChatError(message=error, kind="generic"))
    return em.events


def reconcile_invalid_state(state: ChatState, em: Emitter, *, error: ChatError | None = None,
                            cancellation_reason: str | None = None) -> list[Any]:
    """ReconcileInvalidState: only from Invalid. Pending dynamic calls canceled; error state, unarchived,
    the queue and its edit marker kept (E0, E1 or E1P)."""
    require(state, "ReconcileInvalidState")
    Draft(state, em).cancel(cancellation_reason or INVALID_STATE_CANCELED, dynamic_only=True)
    em.emit(ev.InvalidStateReconciled, last_error=error or ChatError(message=INVALID_STATE_ERROR),
            status_before=state.status, archived_before=state.archived)
    return em.events


def acquire(state: ChatState, em: Emitter, *, worker_id: UUID, runner_id: UUID) -> list[Any]:
    em.emit(ev.ChatAcquired, worker_id=worker_id, runner_id=runner_id)
    return em.events


def abandon(state: ChatState, em: Emitter) -> list[Any]:
    if state.worker_id is None:
        raise LedgerError("not_owned", "chat is not owned")
    em.emit(ev.ChatAbandoned)
    return em.events
