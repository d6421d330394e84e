"""decide: (execution state or None, facts, command input) -> events, or a refusal and nothing recorded.

The handler locates the call in its chat (``identity.locate_call``) and loads the execution stream inside
one unit of work; these functions only decide. Exactly one ``run`` under concurrency comes from the store:
two first claims both try to write version 1 of the same stream, one save wins, and the other attempt is
re-decided on the fresh stream, where it finds the claim and gets ``saved``.

Claim (docs/chatd.md §5.3):

| record | claim |
|---|---|
| none, tool not allowed by the chat's policy in force | refused ``tool_not_allowed`` |
| none | ``run`` (epoch 1), its ``timeout_ms`` recorded |
| running or done | ``saved`` (epoch + 1) with the saved response (None while running) |
| running, past the first claim's timeout | ``timed_out`` (epoch + 1): do not wait for the run |
| canceled | refused ``tool_call_canceled`` |

The timeout counts from the first claim (reference 002, US5): a later claim never restarts it; it is told
what is left (``remaining_ms``).

Response: once; ``wall_duration_ms`` is the time from the first claim (not from this runner's start);
``outcome: unknown`` when the handler crashed (a 500 saying the outcome is unknown).

Cancel: only ``execute``, ``edit_files`` and ``write_file`` (``tool_call_not_cancelable``), and never a call
the chat already has a result for (``tool_call_resolved``). No record -> canceled, ``received: false``, "canceled before it ran" (error result); a finished
run -> ``received: true`` with its response; an ``execute`` still running -> stopped, the canceled JSON;
another tool still running -> ``pending`` (its response, recorded when the run ends, is the result).
A cancel of a canceled call records nothing and reports the outcome as it now stands.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ledger.base import Emitter
from ledger.errors import LedgerError, invalid_command
from ledger.toolcalls import events as ev
from ledger.toolcalls.errors import (
    TOOL_CALL_CANCELED,
    TOOL_CALL_CLAIM_STALE,
    TOOL_CALL_NOT_RUNNING,
    TOOL_CALL_INPUT_MISMATCH,
    TOOL_CALL_NOT_CANCELABLE,
    TOOL_CALL_NOT_CLAIMED,
    TOOL_CALL_RESOLVED,
    TOOL_CALL_RESPONSE_RECORDED,
    refuse,
    tool_not_allowed,
)
from ledger.toolcalls.identity import CallFacts
from ledger.toolcalls.state import (
    CANCELABLE_TOOLS,
    NOT_RUN_TEXT,
    STOPPABLE_TOOLS,
    ToolCallExecutionState,
    execute_canceled_result,
    response_result,
    wall_duration_ms,
)


def _open(em: Emitter, facts: CallFacts, topic: str) -> None:
    em.emit(ev.ToolCallExecutionOpened, originator_topic=topic, chat_id=facts.chat_id,
            assistant_message_id=facts.assistant_message_id, tool_call_id=facts.tool_call_id,
            tool_name=facts.tool_name)


#: the longest timeout a first claim may give (a day)
MAX_TIMEOUT_MS = 86_400_000


def claim(state: ToolCallExecutionState | None, em: Emitter, facts: CallFacts, *, topic: str,
          tool_name: str, input_sha256: str | None = None, policy: list[str] | None = None,
          always_allowed: frozenset[str] = frozenset(), timeout_ms: int | None = None,
          background: bool = False) -> list[Any]:
    """``policy``: the chat's tool policy in force (its ``hook_allowed_tools``; None: every tool);
    ``always_allowed``: tools offered whatever the policy (the advisor). Only a claim that would run the
    tool is checked against the policy: a later claim runs nothing (it gets the saved response).
    ``timeout_ms`` counts only on the first claim; a later claim's is ignored (the deadline never moves)."""
    if tool_name != facts.tool_name:
        raise invalid_command(f"tool_name {tool_name!r} does not match the call's tool {facts.tool_name!r}")
    if timeout_ms is not None and not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
        raise invalid_command(f"timeout_ms must be 1..{MAX_TIMEOUT_MS}, not {timeout_ms}")
    if state is None and policy is not None and tool_name not in policy and tool_name not in always_allowed:
        raise tool_not_allowed(tool_name, policy)
    if state is None:
        _open(em, facts, topic)
        em.emit(ev.ToolCallClaimed, claim_epoch=1, outcome="run", input_sha256=input_sha256, timeout_ms=timeout_ms,
                remaining_ms=timeout_ms, background=background)
        return em.events
    if state.canceled:
        raise refuse(TOOL_CALL_CANCELED)
    if input_sha256 is not None and state.input_sha256 is not None and input_sha256 != state.input_sha256:
        raise refuse(TOOL_CALL_INPUT_MISMATCH)
    remaining = state.remaining_ms(em.timestamp)
    outcome = "timed_out" if state.response is None and remaining == 0 else "saved"
    em.emit(ev.ToolCallClaimed, claim_epoch=state.claim_epoch + 1, outcome=outcome, input_sha256=input_sha256,
            remaining_ms=remaining)
    return em.events


def record_response(state: ToolCallExecutionState | None, em: Emitter, response: ev.ToolCallResponse,
                    outcome: str = "completed") -> list[Any]:
    """Save the run's response, once, with the wall time since the first claim. Allowed after a cancel
    that found the call running (the run still ends and its response is the truth); an identical repeat
    records nothing. ``outcome: unknown``: the handler crashed; the response must be an error (>= 500)."""
    if outcome not in ("completed", "unknown"):
        raise invalid_command(f"outcome must be completed or unknown, not {outcome!r}")
    if outcome == "unknown" and response.status < 500:
        raise invalid_command(f"an unknown outcome is saved as a server error (status >= 500), not {response.status}")
    if not 100 <= response.status <= 599:
        raise invalid_command(f"response status must be 100..599, not {response.status}")
    if state is None:
        raise refuse(TOOL_CALL_NOT_CLAIMED)
    if not state.claimed:
        raise refuse(TOOL_CALL_CANCELED)
    if state.response is not None:
        if state.response == response and (state.response_outcome or "completed") == outcome:
            return em.events
        raise refuse(TOOL_CALL_RESPONSE_RECORDED)
    em.emit(ev.ToolCallResponseRecorded, response=response, outcome=outcome,
            wall_duration_ms=wall_duration_ms(state, em.timestamp))
    return em.events


def record_process(state: ToolCallExecutionState | None, em: Emitter, *, claim_epoch: int,
                   process_id: str | None = None, workspace_agent_id: UUID | None = None) -> list[Any]:
    """The run of the current claim is starting (no ``process_id``) or running as ``process_id`` (chatd's
    ``UpdateChatToolCallExecutionProcess``: only the claim that runs it, only while it is live)."""
    if state is None or not state.claimed:
        raise refuse(TOOL_CALL_NOT_CLAIMED)
    if claim_epoch != state.claim_epoch:
        raise LedgerError(TOOL_CALL_CLAIM_STALE[0], f"claim epoch {claim_epoch} is not the call's current claim "
                                                    f"({state.claim_epoch})")
    if state.execution_status not in ("reserved", "starting", "running"):
        raise refuse(TOOL_CALL_NOT_RUNNING)
    if process_id is not None and not process_id:
        raise invalid_command("process_id must not be empty")
    if (state.process_id, state.workspace_agent_id, state.execution_status) == (
            process_id, workspace_agent_id, "running" if process_id else "starting"):
        return em.events  # (the same report again)
    em.emit(ev.ToolCallProcessRecorded, claim_epoch=claim_epoch, process_id=process_id,
            workspace_agent_id=workspace_agent_id)
    return em.events


def cancel(state: ToolCallExecutionState | None, em: Emitter, facts: CallFacts, *, topic: str,
           resolved: bool = False) -> list[Any]:
    """``resolved``: the chat already has a result for the call (read by the handler from the chat)."""
    if facts.tool_name not in CANCELABLE_TOOLS:
        raise refuse(TOOL_CALL_NOT_CANCELABLE)
    if resolved:
        raise refuse(TOOL_CALL_RESOLVED)
    if state is None:
        _open(em, facts, topic)
        em.emit(ev.ToolCallCanceled, received=False, outcome="not_run", result=NOT_RUN_TEXT, is_error=True)
        return em.events
    if state.canceled:
        return em.events
    if state.response is not None:
        result, is_error = response_result(state.response)
        em.emit(ev.ToolCallCanceled, received=True, outcome="completed", result=result, is_error=is_error)
    elif state.tool_name in STOPPABLE_TOOLS:
        em.emit(ev.ToolCallCanceled, received=True, outcome="canceled_while_running",
                result=execute_canceled_result(), is_error=False)
    else:
        em.emit(ev.ToolCallCanceled, received=True, outcome="pending", result=None, is_error=False)
    return em.events
