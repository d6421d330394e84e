"""Tool-call execution commands: claim a call before running it, record its response, cancel it.

Each command names the call as its chat does (``chat_id``, ``assistant_message_id``, ``tool_call_id``).
The handler loads the chat inside the unit of work, checks that the assistant message has that call and
derives the execution stream id from it (``ledger.toolcalls.identity``), then lets the pure ``decide``
answer on the execution stream. Only the execution stream is written, so concurrent claims of one call
race on one stream: the first save wins and every other attempt is re-decided and gets ``saved``.

Every result has the execution's fields (``execution_row``) plus the command's outputs:
``claim_tool_call`` -> ``outcome`` (``run`` | ``saved`` | ``timed_out``), ``remaining_ms``;
``record_tool_call_response`` -> ``recorded``; ``record_tool_call_process`` -> ``recorded``;
``cancel_tool_call`` -> ``recorded``, ``received``, ``outcome``, ``result``, ``is_error``.
A repeat carrying an ``idempotency_key`` already recorded on the execution stream returns the first
result, rebuilt from the stream as it was then, and records nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence
from uuid import UUID

import msgspec

from commands.base import Command, check_repeat, emitter, handles
from commands.uow import UnitOfWork, run
from ledger.base import Emitter
from ledger.chat.aggregate import Chat
from ledger.audit.timeline import iso
from ledger.errors import LedgerError, invalid_command
from ledger.policy.tools import ADVISOR
from ledger.streams import locate
from ledger.toolcalls import decide as core
from ledger.toolcalls import events as ev
from ledger.toolcalls.aggregate import ToolCallExecution
from ledger.toolcalls.identity import CallFacts, call_resolved, locate_call
from ledger.toolcalls.state import UNKNOWN_OUTCOME_BODY, ToolCallExecutionState, cancel_view

#: tools a chat offers whatever its tool policy (``ledger.policy.tools.offered_tools``): the advisor
ALWAYS_OFFERED = frozenset({ADVISOR})
IDEMPOTENCY_KEY_REUSED = ("idempotency_key_reused", "idempotency key was already used by a different command")


class _ToolCallCommand(Command, kw_only=True):
    chat_id: UUID
    assistant_message_id: int
    tool_call_id: str


class ClaimToolCall(_ToolCallCommand, tag="claim_tool_call", kw_only=True):
    """Claim the call before running it. ``outcome: run`` — run it now (first claim); ``saved`` — do not
    run it, ``response`` is the saved response (null while the first run is still going)."""

    tool_name: str
    input_sha256: str | None = None
    timeout_ms: int | None = None
    background: bool = False


class RecordToolCallResponse(_ToolCallCommand, tag="record_tool_call_response", kw_only=True):
    """Save the run's response (once; an identical repeat records nothing). ``outcome: unknown``: the
    runner's handler crashed; ``status``/``body`` default to a 500 saying the outcome is unknown."""

    status: int | None = None
    body: str | None = None
    content_type: str = "application/json"
    outcome: str = "completed"


class RecordToolCallProcess(_ToolCallCommand, tag="record_tool_call_process", kw_only=True):
    """The current claim's run is starting (no ``process_id``) or running as ``process_id`` on
    ``workspace_agent_id`` (chatd's ``UpdateChatToolCallExecutionProcess``)."""

    claim_epoch: int
    process_id: str | None = None
    workspace_agent_id: UUID | None = None


class CancelToolCall(_ToolCallCommand, tag="cancel_tool_call", kw_only=True):
    """Cancel the call (``execute``, ``edit_files``, ``write_file`` only; not once the chat has its
    result): no claim runs it afterwards. The outcome is the truthful result to commit."""


# -- results --------------------------------------------------------------------------------------------

def execution_row(s: ToolCallExecutionState) -> dict[str, Any]:
    return {
        "execution_id": str(s.execution_id),
        "chat_id": str(s.chat_id),
        "assistant_message_id": s.assistant_message_id,
        "tool_call_id": s.tool_call_id,
        "tool_name": s.tool_name,
        "status": s.status,
        "execution_status": s.execution_status,
        "background": s.background,
        "process_id": s.process_id,
        "workspace_agent_id": str(s.workspace_agent_id) if s.workspace_agent_id else None,
        "result_committed_at": iso(s.result_committed_at) if s.result_committed_at is not None else None,
        "claim_epoch": s.claim_epoch,
        "input_sha256": s.input_sha256,
        "first_claimed_at": iso(s.first_claimed_at) if s.first_claimed_at is not None else None,
        "timeout_ms": s.timeout_ms,
        "deadline_at": iso(s.deadline_at) if s.deadline_at is not None else None,
        "response": msgspec.to_builtins(s.response) if s.response is not None else None,
        "response_outcome": s.response_outcome,
        "wall_duration_ms": s.wall_duration_ms,
        "canceled": s.canceled,
        "cancel": cancel_view(s),
        "version": s.version,
    }


Outputs = Callable[[Sequence[Any], ToolCallExecutionState], dict[str, Any]]


def _of(events: Sequence[Any], cls: type) -> Any:
    return next((e for e in events if isinstance(e, cls)), None)


def _claim_outputs(events: Sequence[Any], state: ToolCallExecutionState) -> dict[str, Any]:
    claimed = _of(events, ev.ToolCallClaimed)
    return {"outcome": claimed.outcome, "remaining_ms": claimed.remaining_ms}


def _record_outputs(events: Sequence[Any], state: ToolCallExecutionState) -> dict[str, Any]:
    return {"recorded": _of(events, ev.ToolCallResponseRecorded) is not None}


def _process_outputs(events: Sequence[Any], state: ToolCallExecutionState) -> dict[str, Any]:
    return {"recorded": _of(events, ev.ToolCallProcessRecorded) is not None}


def _cancel_outputs(events: Sequence[Any], state: ToolCallExecutionState) -> dict[str, Any]:
    view = cancel_view(state) or {}
    return {"recorded": _of(events, ev.ToolCallCanceled) is not None, **view}


#: the event a command's recorded span must contain (else its key was used by a different command)
_MARKER: dict[type[Command], type] = {
    ClaimToolCall: ev.ToolCallClaimed,
    RecordToolCallResponse: ev.ToolCallResponseRecorded,
    RecordToolCallProcess: ev.ToolCallProcessRecorded,
    CancelToolCall: ev.ToolCallCanceled,
}


# -- execution ------------------------------------------------------------------------------------------

def _replayed(app: Any, agg: ToolCallExecution, cmd: Command, outputs: Outputs) -> dict[str, Any] | None:
    key = cmd.idempotency_key
    span = agg.state.idempotency.get(key) if key is not None else None
    if span is None:
        return None
    first, last = span
    events = app.stream(agg.id, gt=first - 1, lte=last)
    if not check_repeat(cmd, events) and _of(events, _MARKER[type(cmd)]) is None:
        raise LedgerError(*IDEMPOTENCY_KEY_REUSED)  # a key recorded without its command's identity
    then = app.load(agg.id, version=last)
    return {**execution_row(then.state), **outputs(events, then.state)}


def _execute(app: Any, cmd: _ToolCallCommand,
             decide: Callable[[ToolCallExecutionState | None, Emitter, CallFacts, Any], list[Any]],
             outputs: Outputs) -> dict[str, Any]:
    """``decide(execution state, emitter, call facts, chat state)``."""
    def work(uow: UnitOfWork) -> dict[str, Any]:
        chat = uow.get(cmd.chat_id)
        chat_state = chat.state if isinstance(chat, Chat) else None
        facts = locate_call(chat_state, cmd.assistant_message_id, cmd.tool_call_id)
        stream_id, agg = locate(app, ToolCallExecution, facts.execution_id, uow.get)
        # the execution id a result names is the call's deterministic one (as the chat's views show it),
        # also when a stream of another kind took that id and the execution lives at a derived one
        named = {"execution_id": str(facts.execution_id)}
        if agg is not None:
            replay = _replayed(app, agg, cmd, outputs)
            if replay is not None:
                return {**replay, **named}
        em = emitter(cmd, stream_id, agg.version if agg else 0, uow.now)
        events = decide(agg.state if agg else None, em, facts, chat_state)
        if agg is None:
            agg = uow.create(ToolCallExecution, events)
        else:
            uow.record(agg, events)
        return {**execution_row(agg.state), **outputs(events, agg.state), **named}

    return run(app, work)


# -- handlers -------------------------------------------------------------------------------------------

@handles(ClaimToolCall)
def claim_tool_call(app: Any, cmd: ClaimToolCall) -> dict[str, Any]:
    return _execute(app, cmd, lambda s, em, facts, chat: core.claim(
        s, em, facts, topic=ToolCallExecution.TOPIC, tool_name=cmd.tool_name, input_sha256=cmd.input_sha256,
        policy=chat.hook_allowed_tools, always_allowed=ALWAYS_OFFERED, timeout_ms=cmd.timeout_ms,
        background=cmd.background), _claim_outputs)


@handles(RecordToolCallProcess)
def record_tool_call_process(app: Any, cmd: RecordToolCallProcess) -> dict[str, Any]:
    return _execute(app, cmd, lambda s, em, facts, chat: core.record_process(
        s, em, claim_epoch=cmd.claim_epoch, process_id=cmd.process_id, workspace_agent_id=cmd.workspace_agent_id),
        _process_outputs)


@handles(RecordToolCallResponse)
def record_tool_call_response(app: Any, cmd: RecordToolCallResponse) -> dict[str, Any]:
    unknown = cmd.outcome == "unknown"
    if not unknown and (cmd.status is None or cmd.body is None):
        raise invalid_command("record_tool_call_response needs status and body (or outcome: unknown)")
    response = ev.ToolCallResponse(status=cmd.status if cmd.status is not None else 500,
                                   content_type=cmd.content_type,
                                   body=cmd.body if cmd.body is not None else UNKNOWN_OUTCOME_BODY)
    return _execute(app, cmd, lambda s, em, facts, chat: core.record_response(s, em, response, cmd.outcome),
                    _record_outputs)


@handles(CancelToolCall)
def cancel_tool_call(app: Any, cmd: CancelToolCall) -> dict[str, Any]:
    return _execute(app, cmd, lambda s, em, facts, chat: core.cancel(
        s, em, facts, topic=ToolCallExecution.TOPIC, resolved=call_resolved(chat, facts)), _cancel_outputs)


# -- reads ----------------------------------------------------------------------------------------------

def load_execution(app: Any, execution_id: UUID) -> ToolCallExecution | None:
    """The execution of the call whose deterministic id is ``execution_id`` (wherever its stream is)."""
    return locate(app, ToolCallExecution, execution_id, app.load)[1]


def execution_events(app: Any, execution_id: UUID) -> list[Any]:
    """The events of that execution's stream (none when it has none)."""
    agg = load_execution(app, execution_id)
    return app.stream(agg.id) if agg is not None else []
