"""decide: (execution state or None, facts, command input) -> events, or a refusal and nothing recorded.

The handler locates the call in its chat (``identity.locate_call``) and loads the execution stream inside
one unit of work; these functions only decide. Exactly one ``run`` under concurrency comes from the store:
two first claims both try to write version 1 of the same stream, one save wins, and the other attempt is
re-decided on the fresh stream, where it finds the claim and gets ``saved``.

Claim (the agent's table, reference 002 §3):

| record | claim |
|---|---|
| none, tool not allowed by the chat's policy in force | refused ``tool_not_allowed`` |
| none | ``run`` (epoch 1) |
| running or done | ``saved`` (epoch + 1) with the saved response (None while running) |
| canceled | refused ``tool_call_canceled`` |

Cancel: no record -> canceled, ``received: false``, "canceled before it ran" (error result); a finished
run -> ``received: true`` with its response; an ``execute`` still running -> stopped, the canceled JSON;
another tool still running -> ``pending`` (its response, recorded when the run ends, is the result).
A cancel of a canceled call records nothing and reports the outcome as it now stands.
"""

from __future__ import annotations

from typing import Any

from ledger.base import Emitter
from ledger.errors import invalid_command
from ledger.toolcalls import events as ev
from ledger.toolcalls.errors import (
    TOOL_CALL_CANCELED,
    TOOL_CALL_INPUT_MISMATCH,
    TOOL_CALL_NOT_CLAIMED,
    TOOL_CALL_RESPONSE_RECORDED,
    refuse,
    tool_not_allowed,
)
from ledger.toolcalls.identity import CallFacts
from ledger.toolcalls.state import (
    NOT_RUN_TEXT,
    STOPPABLE_TOOLS,
    ToolCallExecutionState,
    execute_canceled_result,
    response_result,
)


def _open(em: Emitter, facts: CallFacts, topic: str) -> None:
    em.emit(ev.ToolCallExecutionOpened, originator_topic=topic, chat_id=facts.chat_id,
            assistant_message_id=facts.assistant_message_id, tool_call_id=facts.tool_call_id,
            tool_name=facts.tool_name)


def claim(state: ToolCallExecutionState | None, em: Emitter, facts: CallFacts, *, topic: str,
          tool_name: str, input_sha256: str | None = None, policy: list[str] | None = None,
          always_allowed: frozenset[str] = frozenset()) -> list[Any]:
    """``policy``: the chat's tool policy in force (its ``hook_allowed_tools``; None: every tool);
    ``always_allowed``: tools offered whatever the policy (the advisor). Only a claim that would run the
    tool is checked against the policy: a later claim runs nothing (it gets the saved response)."""
    if tool_name != facts.tool_name:
        raise invalid_command(f"tool_name {tool_name!r} does not match the call's tool {facts.tool_name!r}")
    if state is None and policy is not None and tool_name not in policy and tool_name not in always_allowed:
        raise tool_not_allowed(tool_name, policy)
    if state is None:
        _open(em, facts, topic)
        em.emit(ev.ToolCallClaimed, claim_epoch=1, outcome="run", input_sha256=input_sha256)
        return em.events
    if state.canceled:
        raise refuse(TOOL_CALL_CANCELED)
    if input_sha256 is not None and state.input_sha256 is not None and input_sha256 != state.input_sha256:
        raise refuse(TOOL_CALL_INPUT_MISMATCH)
    em.emit(ev.ToolCallClaimed, claim_epoch=state.claim_epoch + 1, outcome="saved", input_sha256=input_sha256)
    return em.events


def record_response(state: ToolCallExecutionState | None, em: Emitter, response: ev.ToolCallResponse) -> list[Any]:
    """Save the run's response, once. Allowed after a cancel that found the call running (the run still
    ends and its response is the truth); an identical repeat records nothing."""
    if not 100 <= response.status <= 599:
        raise invalid_command(f"response status must be 100..599, not {response.status}")
    if state is None:
        raise refuse(TOOL_CALL_NOT_CLAIMED)
    if not state.claimed:
        raise refuse(TOOL_CALL_CANCELED)
    if state.response is not None:
        if state.response == response:
            return em.events
        raise refuse(TOOL_CALL_RESPONSE_RECORDED)
    em.emit(ev.ToolCallResponseRecorded, response=response)
    return em.events


def cancel(state: ToolCallExecutionState | None, em: Emitter, facts: CallFacts, *, topic: str) -> list[Any]:
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
