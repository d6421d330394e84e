"""The state of one tool-call execution, and ``evolve`` (pure, in place, linear in the events)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import msgspec

from ledger.base import remember_idempotency_key
from ledger.toolcalls import events as ev

Status = Literal["running", "done", "canceled"]
#: chatd's execution statuses (``chat_tool_call_executions.status``), as the events leave the call
ExecutionStatus = Literal["reserved", "starting", "running", "exited", "detached", "cancel_requested", "canceled",
                          "unknown", "no_effect"]
#: the statuses of a run the chat may still have to stop or account for
LIVE_STATUSES = frozenset({"reserved", "starting", "running", "detached"})

#: docs/chatd.md §5.3 cancel outcome texts (exact)
NOT_RUN_TEXT = "tool call was canceled before it ran; no changes were made"
CANCELED_WHILE_RUNNING_TEXT = "tool call was canceled while running"
#: tools whose running call is stopped by a cancel (its result is the canceled JSON below)
STOPPABLE_TOOLS = frozenset({"execute"})
#: the only tools a cancel may name (reference 002: the acting tools, the ones that send a tool call id)
CANCELABLE_TOOLS = frozenset({"execute", "edit_files", "write_file"})
#: the body of the 500 a runner saves when its handler crashed (reference 002: "the outcome is unknown")
UNKNOWN_OUTCOME_BODY = '{"error": "tool call handler crashed: the outcome is unknown"}'



def execute_canceled_result() -> dict[str, Any]:
    return {"success": False, "exit_code": -1, "error": CANCELED_WHILE_RUNNING_TEXT, "canceled": True}


class ToolCallExecutionState(msgspec.Struct, kw_only=True):
    execution_id: UUID
    chat_id: UUID
    assistant_message_id: int
    tool_call_id: str
    tool_name: str
    created_at: datetime
    claim_epoch: int = 0
    input_sha256: str | None = None
    first_claimed_at: datetime | None = None
    timeout_ms: int | None = None
    response: ev.ToolCallResponse | None = None
    response_outcome: str | None = None
    wall_duration_ms: int | None = None
    canceled: bool = False
    received: bool | None = None
    cancel_outcome: str | None = None
    cancel_result: Any = None
    cancel_is_error: bool = False
    #: chatd's status (``ExecutionStatus``), set by each event (docs/commands.md, "Tool-call execution statuses")
    execution_status: str = "reserved"
    background: bool = False
    process_id: str | None = None
    workspace_agent_id: UUID | None = None
    #: when the chat last committed a result for the call that it gave up on or detached (chatd's anchor)
    result_committed_at: datetime | None = None
    idempotency: dict[str, list[int]] = msgspec.field(default_factory=dict)
    version: int = 0
    updated_at: datetime | None = None

    @property
    def claimed(self) -> bool:
        return self.claim_epoch > 0

    @property
    def deadline_at(self) -> datetime | None:
        """When the run's timeout ends: the first claim plus its ``timeout_ms`` (None without one)."""
        if self.first_claimed_at is None or self.timeout_ms is None:
            return None
        return self.first_claimed_at + timedelta(milliseconds=self.timeout_ms)

    def remaining_ms(self, now: datetime) -> int | None:
        """What is left of the timeout at ``now`` (0 once past; None without a timeout)."""
        deadline = self.deadline_at
        return None if deadline is None else max(0, _ms(deadline - now))

    @property
    def status(self) -> Status:
        """``canceled`` wins (no later claim runs); else ``done`` once a response is saved; else ``running``."""
        if self.canceled:
            return "canceled"
        return "done" if self.response is not None else "running"


def _ms(delta: timedelta) -> int:
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def wall_duration_ms(state: "ToolCallExecutionState", now: datetime) -> int | None:
    """Milliseconds from the first claim to ``now`` (None before any claim)."""
    return None if state.first_claimed_at is None else max(0, _ms(now - state.first_claimed_at))


def response_result(response: ev.ToolCallResponse) -> tuple[Any, bool]:
    """The tool result a saved response gives: its body (parsed when the content type is JSON) and
    whether it is an error (status >= 400)."""
    body: Any = response.body
    ctype = response.content_type.split(";", 1)[0].strip().lower()
    if ctype == "application/json" or ctype.endswith("+json"):
        try:
            body = json.loads(response.body)
        except ValueError:
            pass
    return body, response.status >= 400


def cancel_view(state: ToolCallExecutionState) -> dict[str, Any] | None:
    """The cancel outcome as of now: a ``pending`` cancel becomes ``completed`` once the response is saved."""
    if not state.canceled:
        return None
    outcome, result, is_error = state.cancel_outcome, state.cancel_result, state.cancel_is_error
    if outcome == "pending" and state.response is not None:
        outcome = "completed"
        result, is_error = response_result(state.response)
    return {"received": bool(state.received), "outcome": outcome, "result": result, "is_error": is_error}


#: a cancel's outcome -> chatd's status (``completed``: the run had ended, the status stays ``exited``)
_CANCELED_STATUS = {"not_run": "no_effect", "canceled_while_running": "canceled", "pending": "cancel_requested"}


def evolve(state: ToolCallExecutionState | None, event: Any) -> ToolCallExecutionState:
    t = type(event)
    if t is ev.ToolCallExecutionOpened:
        state = ToolCallExecutionState(
            execution_id=event.originator_id, chat_id=event.chat_id,
            assistant_message_id=event.assistant_message_id, tool_call_id=event.tool_call_id,
            tool_name=event.tool_name, created_at=event.timestamp,
        )
    else:
        assert state is not None, "only ToolCallExecutionOpened starts a tool-call stream"
        if t is ev.ToolCallClaimed:
            state.claim_epoch = event.claim_epoch
            if state.input_sha256 is None:
                state.input_sha256 = event.input_sha256
            if state.first_claimed_at is None:
                state.first_claimed_at = event.timestamp
                state.timeout_ms = event.timeout_ms
            if event.outcome == "run":
                # (a claim recorded before the statuses existed: its run was going from the claim on)
                state.execution_status = "running" if event.background is None else "reserved"
                state.background = bool(event.background)
        elif t is ev.ToolCallProcessRecorded:
            state.process_id = event.process_id
            state.workspace_agent_id = event.workspace_agent_id
            state.execution_status = "running" if event.process_id else "starting"
        elif t is ev.ToolCallResponseRecorded:
            state.response = event.response
            state.response_outcome = event.outcome
            state.wall_duration_ms = event.wall_duration_ms
            state.execution_status = "unknown" if event.outcome == "unknown" else "exited"
        elif t is ev.ToolCallCanceled:
            state.canceled = True
            state.received = event.received
            state.cancel_outcome = event.outcome
            state.cancel_result = event.result
            state.cancel_is_error = event.is_error
            state.execution_status = _CANCELED_STATUS.get(event.outcome, state.execution_status)
        elif t is ev.ToolCallCancelRequested:
            state.execution_status = "cancel_requested"
            state.result_committed_at = event.timestamp
        elif t is ev.ToolCallDetached:
            state.execution_status = "detached"
            state.result_committed_at = event.timestamp
        else:  # pragma: no cover - every event class is handled above
            raise TypeError(f"unexpected event {t.__name__}")
    state.version = event.originator_version
    state.updated_at = event.timestamp
    remember_idempotency_key(state.idempotency, event)
    return state
