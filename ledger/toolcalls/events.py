"""Events of a tool-call execution (one stream per tool call, id = the deterministic tool-call UUID).

A stream starts with ``ToolCallExecutionOpened`` (the call's identity), followed in the same command by
the first ``ToolCallClaimed`` (outcome ``run``) or by ``ToolCallCanceled`` (a cancel that arrived before
any claim: the call never runs). Every later claim is recorded too, with its epoch and outcome ``saved``,
so an audit shows each attempt a runner made and that only the first one ran.
"""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

import msgspec

from ledger.base import LedgerCreated, LedgerEvent

TOOL_CALL_EXECUTION_TOPIC = "chat-ledger:toolcalls.ToolCallExecution"

ClaimOutcome = Literal["run", "saved", "timed_out"]
ResponseOutcome = Literal["completed", "unknown"]
CancelOutcome = Literal["not_run", "canceled_while_running", "completed", "pending"]


class ToolCallResponse(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The saved response of a tool call's run: HTTP-style status, Content-Type and body text."""

    status: int
    content_type: str
    body: str


class ToolCallExecutionOpened(LedgerCreated):
    """The ledger started tracking tool call ``tool_call_id`` of assistant message
    ``assistant_message_id`` in chat ``chat_id`` (validated against the chat when recorded)."""

    TOPIC = "chat-ledger:toolcalls.ToolCallExecutionOpened"

    chat_id: UUID
    assistant_message_id: int
    tool_call_id: str
    tool_name: str


class ToolCallClaimed(LedgerEvent):
    """A runner claimed the call. ``claim_epoch`` counts claims from 1; only epoch 1 has outcome ``run``
    (the claimer runs the tool); every later claim has outcome ``saved`` (answered with the saved
    response, never a second run), or ``timed_out`` when the run's timeout, counted from the first claim,
    had passed with no response. ``input_sha256`` is what the claimer asserted, if anything.

    ``timeout_ms``: the run's timeout, given on the first claim (never moved by a later one);
    ``remaining_ms``: what was left of it at this claim (None without a timeout)."""

    TOPIC = "chat-ledger:toolcalls.ToolCallClaimed"

    claim_epoch: int
    outcome: ClaimOutcome
    input_sha256: str | None = None
    timeout_ms: int | None = None
    remaining_ms: int | None = None
    #: a first claim's run in the background (chatd's ``background``: its process outlives the turn). None
    #: on claims recorded before the execution ledger kept chatd's statuses: those runs were ``running``
    #: from the claim on; a claim that records it starts ``reserved``
    background: bool | None = None


class ToolCallProcessRecorded(LedgerEvent):
    """The run of claim ``claim_epoch`` is being dispatched (no ``process_id``: ``starting``) or runs as
    ``process_id`` on ``workspace_agent_id`` (``running``) — chatd's ``UpdateChatToolCallExecutionProcess``."""

    TOPIC = "chat-ledger:toolcalls.ToolCallProcessRecorded"
    claim_epoch: int
    process_id: str | None = None
    workspace_agent_id: UUID | None = None


class ToolCallCancelRequested(LedgerEvent):
    """The chat gave up on the run (its synthetic result committed, or an edit deleted the turn that held
    it or the result that carried its handle): ``cancel_requested``, for the sweep to kill. The event's
    time is the call's ``result_committed_at`` (the give-up anchor restarts at each mapping)."""

    TOPIC = "chat-ledger:toolcalls.ToolCallCancelRequested"
    reason: str


class ToolCallDetached(LedgerEvent):
    """A background run spared by a cancellation: the chat's synthetic result carries its process handle
    (``process_id``) instead of an error, so the process stays addressable (``detached``). The event's
    time is the call's ``result_committed_at``."""

    TOPIC = "chat-ledger:toolcalls.ToolCallDetached"
    process_id: str
    reason: str


class ToolCallResponseRecorded(LedgerEvent):
    """The run finished and its response was saved (once). ``outcome``: ``completed``, or ``unknown``
    when the runner's handler crashed (the response is then a 500 saying the outcome is unknown).
    ``wall_duration_ms``: the true wall time from the first claim to this response (across takeovers)."""

    TOPIC = "chat-ledger:toolcalls.ToolCallResponseRecorded"

    response: ToolCallResponse
    outcome: ResponseOutcome = "completed"
    wall_duration_ms: int | None = None


class ToolCallCanceled(LedgerEvent):
    """The call was canceled; no later claim runs it.

    ``received`` is whether it had been claimed (the tool received it). ``outcome``:
    ``not_run`` (never claimed; ``result`` is the "canceled before it ran" text, an error),
    ``canceled_while_running`` (an ``execute`` run was stopped; ``result`` is its canceled JSON),
    ``completed`` (the run had finished; ``result`` is its response), ``pending`` (another tool still
    running; its response, recorded when the run finishes, is the result).
    """

    TOPIC = "chat-ledger:toolcalls.ToolCallCanceled"

    received: bool
    outcome: CancelOutcome
    result: Any = None
    is_error: bool = False


# -- people's data in these events (issue 28, point 1: ``ledger.privacy``, docs/privacy.md) ----------------------
# An execution's output and its cancellation's words are its chat owner's (the execution belongs to the chat).

#: event class -> field path -> whose data it is (``ledger.privacy.Whose``)
PERSONAL: dict[type, dict[str, str]] = {
    ToolCallResponseRecorded: {"response.body": "owner"}, ToolCallCanceled: {"result": "owner"},
    ToolCallCancelRequested: {"reason": "owner"}, ToolCallDetached: {"reason": "owner"},
}
#: event class -> text field path -> why it is not personal
NOT_PERSONAL: dict[type, dict[str, str]] = {
    ToolCallExecutionOpened: {"tool_call_id": "the provider's id of the call", "tool_name": "a tool's name"},
    ToolCallClaimed: {"input_sha256": "a digest of the call's input"},
    ToolCallProcessRecorded: {"process_id": "an operating-system process id"},
    ToolCallDetached: {"process_id": "an operating-system process id"},
    ToolCallResponseRecorded: {"response.content_type": "a MIME type"},
}
