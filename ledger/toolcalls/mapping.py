"""How a chat's cancellations and edits map its tool-call executions (chatd's execution ledger; pure).

A chat command that gives up on tool calls says so in its own events: ``ToolCallsCanceled`` (synthetic results
for the outstanding calls of the latest assistant message) and ``MessageEdited`` (the messages an edit
deleted). chatd maps its execution ledger in the same transaction (``synthetic_cancellation_ledger_test.go``);
so does the ledger, on each execution's own stream, in the same unit of work:

* a synthetically canceled call whose run is live: a background run with a recorded process is spared —
  ``ToolCallDetached``, and the chat's synthetic result carries the process handle instead of the error (so
  the process stays addressable); any other live run (reserved, starting, running) is
  ``ToolCallCancelRequested``, for the sweep to kill;
* an edit inserts no synthetic history for the turn it deletes, so every live run anchored in a deleted
  assistant message, and every run whose carrier result (the tool message that held its result or handle) was
  deleted — a detached run, or a running one whose detach was never recorded — is ``ToolCallCancelRequested``.
  A detached run whose carrier survives the edit stays detached.

Calls never claimed have no stream and nothing is recorded for them; finished runs (exited, unknown,
canceled, no_effect) are left as they are. Each mapping event's time is the call's ``result_committed_at``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import msgspec

from ledger.base import Emitter
from ledger.chat import events as cev
from ledger.chat.state import ChatState
from ledger.chat.values import ToolCallPart, ToolResultPart
from ledger.chat.views import tool_call_execution_ids
from ledger.toolcalls import events as ev
from ledger.toolcalls.state import LIVE_STATUSES, ToolCallExecutionState

#: the reason an edit gives up on the runs of the turn it deletes
EDIT_REASON = "the message edit deleted the turn that held this tool call"


class Affected(msgspec.Struct, frozen=True):
    """A call the command gave up on: ``canceled`` (a synthetic result in this command) or ``deleted`` (an
    edit deleted its assistant message or its carrier result)."""

    assistant_message_id: int
    tool_call_id: str
    kind: str
    reason: str


def affected_calls(before: ChatState, events: list[Any]) -> list[Affected]:
    """The calls ``events`` (one command's, on the chat ``before`` them) give up on, in order, each once."""
    out: dict[str, Affected] = {}
    added: list[Any] = []  # messages inserted by earlier events of the command
    for e in events:
        if isinstance(e, cev.ToolCallsCanceled):
            for m in e.messages:
                for p in m.parts:
                    if isinstance(p, ToolResultPart):
                        amid = _anchor(before, added, p.tool_call_id, len(before.messages) + len(added))
                        if amid is not None:
                            out.setdefault(p.tool_call_id, Affected(amid, p.tool_call_id, "canceled", e.reason))
        elif isinstance(e, cev.MessageEdited):
            for mid in e.deleted_message_ids:
                m = before.messages[mid - 1]
                if m.role == "assistant":
                    for c in m.calls:
                        if not c.provider_executed:
                            out.setdefault(c.tool_call_id, Affected(mid, c.tool_call_id, "deleted", EDIT_REASON))
                elif m.role == "tool":
                    for r in m.results:
                        amid = _anchor(before, [], r.tool_call_id, mid - 1)
                        if amid is not None:
                            out.setdefault(r.tool_call_id, Affected(amid, r.tool_call_id, "deleted", EDIT_REASON))
        added.extend(getattr(e, "messages", None) or ())
    return list(out.values())


def _anchor(before: ChatState, added: list[Any], call_id: str, upto: int) -> int | None:
    """The id of the latest assistant message before message ``upto`` + 1 that holds call ``call_id``."""
    for m in reversed(added):
        if m.role == "assistant" and any(isinstance(p, ToolCallPart) and p.tool_call_id == call_id for p in m.parts):
            return int(m.message_id)
    for i in range(min(upto, len(before.messages)) - 1, -1, -1):
        m = before.messages[i]
        if m.role == "assistant" and any(c.tool_call_id == call_id for c in m.calls):
            return int(m.message_id)
    return None


def execution_ids(before: ChatState, events: list[Any], affected: Iterable[Affected]) -> dict[str, Any]:
    """tool_call_id -> the execution id of each affected call (calls without one are left out)."""
    calls: dict[int, list[str]] = {}
    for e in events:
        for m in getattr(e, "messages", None) or ():
            if m.role == "assistant":
                calls[m.message_id] = [p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart)]
    out: dict[str, Any] = {}
    for a in affected:
        ids = calls.get(a.assistant_message_id)
        if ids is None:
            ids = [c.tool_call_id for c in before.messages[a.assistant_message_id - 1].calls]
        found = tool_call_execution_ids(before.chat_id, a.assistant_message_id, ids).get(a.tool_call_id)
        if found is not None:
            out[a.tool_call_id] = found
    return out


def detached_result(process_id: str, reason: str) -> dict[str, Any]:
    """The synthetic result of a spared background run: its handle, not an error."""
    return {"background_process_id": process_id, "detached": True, "message": reason}


def map_executions(affected: list[Affected], executions: dict[str, ToolCallExecutionState | None],
                   emitter_of: Callable[[ToolCallExecutionState], Emitter]) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """(tool_call_id -> the events of its execution stream, tool_call_id -> process id of each detached run)."""
    out: dict[str, list[Any]] = {}
    detached: dict[str, str] = {}
    for a in affected:
        s = executions.get(a.tool_call_id)
        if s is None or s.execution_status not in LIVE_STATUSES:
            continue
        em = emitter_of(s)
        if a.kind == "canceled":
            if s.execution_status == "detached":
                continue  # (already spared; its carrier is an earlier result)
            if s.background and s.process_id and s.execution_status == "running":
                em.emit(ev.ToolCallDetached, process_id=s.process_id, reason=a.reason)
                detached[a.tool_call_id] = s.process_id
            else:
                em.emit(ev.ToolCallCancelRequested, reason=a.reason)
        else:
            em.emit(ev.ToolCallCancelRequested, reason=a.reason)
        out[a.tool_call_id] = em.events
    return out, detached


def with_handles(events: list[Any], detached: dict[str, str]) -> list[Any]:
    """The command's events with each detached run's synthetic result carrying its handle (not an error)."""
    if not detached:
        return events
    out = []
    for e in events:
        if isinstance(e, cev.ToolCallsCanceled) and any(
                isinstance(p, ToolResultPart) and p.tool_call_id in detached for m in e.messages for p in m.parts):
            messages = [msgspec.structs.replace(m, parts=[
                msgspec.structs.replace(p, result=detached_result(detached[p.tool_call_id], e.reason), is_error=False)
                if isinstance(p, ToolResultPart) and p.tool_call_id in detached else p for p in m.parts])
                for m in e.messages]
            e = dataclasses.replace(e, messages=messages)
        out.append(e)
    return out
