"""Cross-stream truth (``events verify``): each chat's committed tool results against the tool-call
execution streams (``ledger/toolcalls``).

While verify folds a chat, ``ChatResults`` notes each assistant message's calls and each tool result a
worker committed (``StepCommitted``, ``TurnFinished``, ``TurnFailed``, ``InterruptionFinished``: the
results a runner chose; the ledger's own synthetic results of ``ToolCallsCanceled`` are not a runner's
claim). Then ``check`` reads the executions of that chat's calls (one query per chat, up to verify's head)
and reports, naming both streams and versions (check ``cross_stream``):

* a result for a call whose execution says it was **canceled before it ran** (``not_run``) that is not
  the "canceled before it ran" error;
* a result that **contradicts the saved response** (its body — parsed when JSON — and ``is_error`` =
  status >= 400); for an ``execute`` stopped by a cancel the canceled JSON (``"canceled": true``) is true
  as well;
* a **second run**: an execution with more than one claim of outcome ``run``.

A call whose execution has neither a response nor a cancel outcome that says what happened (running, or
a ``pending`` cancel) is not judged. Memory: one chat's calls and results at a time.
"""

from __future__ import annotations

from typing import Any, Callable
from uuid import UUID

from ledger.chain import scan
from ledger.chat import events as cev
from ledger.chat.values import ToolCallPart, ToolResultPart
from ledger.chat.views import tool_call_execution_ids
from ledger.toolcalls import events as tev
from ledger.toolcalls.state import NOT_RUN_TEXT, evolve, response_result

#: chat events whose tool results a runner committed
_RUNNER_RESULTS = (cev.StepCommitted, cev.TurnFinished, cev.TurnFailed, cev.InterruptionFinished)

Report = Callable[[dict[str, Any]], None]


class ChatResults:
    """One chat's calls (assistant message id -> provider call ids) and the results runners committed."""

    def __init__(self) -> None:
        self.chat_id: UUID | None = None
        self.calls: dict[int, list[str]] = {}
        self.latest: dict[str, int] = {}  # provider call id -> the latest assistant message holding it
        self.results: list[tuple[int, int, str, int, ToolResultPart]] = []  # version, nid, event, amid, part

    def add(self, n: Any, event: Any) -> None:
        """Note the calls and results of one decoded chat event (in version order)."""
        if isinstance(event, cev.ChatCreated):
            self.chat_id = event.originator_id
        for m in getattr(event, "messages", None) or ():
            if m.role == "assistant":
                ids = [p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart) and not p.provider_executed]
                if ids:
                    self.calls[m.message_id] = ids
                    for pid in ids:
                        self.latest[pid] = m.message_id
            if isinstance(event, _RUNNER_RESULTS):
                for p in m.parts:
                    amid = self.latest.get(p.tool_call_id) if isinstance(p, ToolResultPart) else None
                    if amid is not None:
                        self.results.append((n.originator_version, n.id, type(event).__name__, amid, p))


class _Execution:
    __slots__ = ("state", "runs", "cancel_version", "response_version", "stream_id")

    def __init__(self) -> None:
        self.state: Any = None
        self.runs: list[int] = []
        self.cancel_version = self.response_version = 0
        self.stream_id: UUID | None = None


def _executions(app: Any, head: int, ids: list[UUID]) -> dict[UUID, _Execution]:
    """The executions at these natural ids, folded up to ``head`` (one read; a stream of another kind at an
    id — its execution moved, ``ledger.streams`` — is looked up on its own)."""
    out: dict[UUID, _Execution] = {}
    moved: list[UUID] = []
    unreadable: set[UUID] = set()  # (an execution whose events cannot be decoded: its own stream's check names
    # the event; nothing is concluded from it here)
    for n in scan(app, head, ids):
        sid = n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id))
        if n.originator_version == 1 and n.topic != tev.ToolCallExecutionOpened.TOPIC:
            moved.append(sid)
        if sid in moved or sid in unreadable:
            continue
        try:
            event = app.mapper.to_domain_event(n)
        except Exception:  # noqa: BLE001 - any broken payload
            unreadable.add(sid)
            out.pop(sid, None)
            continue
        _fold(out.setdefault(sid, _Execution()), sid, event)
    for natural in moved:
        from commands.toolcalls import load_execution

        agg = load_execution(app, natural)
        if agg is not None:
            ex = out.setdefault(natural, _Execution())
            for n in scan(app, head, agg.id):
                _fold(ex, agg.id, app.mapper.to_domain_event(n))
    return out


def _fold(ex: _Execution, stream_id: UUID, event: Any) -> None:
    ex.stream_id = stream_id
    ex.state = evolve(ex.state, event)
    if isinstance(event, tev.ToolCallClaimed) and event.outcome == "run":
        ex.runs.append(event.originator_version)
    elif isinstance(event, tev.ToolCallCanceled):
        ex.cancel_version = event.originator_version
    elif isinstance(event, tev.ToolCallResponseRecorded):
        ex.response_version = event.originator_version


def _untruthful(ex: _Execution, part: ToolResultPart) -> tuple[int, str] | None:
    """(the execution's version that says otherwise, why) when the result is not what the execution says."""
    s = ex.state
    if s.response is not None:
        body, is_error = response_result(s.response)
        if (part.result, part.is_error) == (body, is_error):
            return None
        if s.cancel_outcome == "canceled_while_running" and isinstance(part.result, dict) \
                and part.result.get("canceled") is True:
            return None
        return ex.response_version, (f"the saved response (status {s.response.status}) says "
                                     f"{_short(body)}{' (an error)' if is_error else ''}")
    if s.canceled and s.cancel_outcome == "not_run":
        if part.result == NOT_RUN_TEXT and part.is_error:
            return None
        return ex.cancel_version, "it was canceled before it ran (never claimed): nothing ran"
    if s.canceled and s.cancel_outcome == "canceled_while_running":
        if isinstance(part.result, dict) and part.result.get("canceled") is True:
            return None
        return ex.cancel_version, "it was stopped while running (the canceled result, \"canceled\": true)"
    return None


def check(app: Any, head: int, chat: ChatResults, report: Report) -> None:
    """Report the chat's results that the executions contradict, and executions run more than once."""
    if chat.chat_id is None or not chat.calls:
        return
    ids_of = {amid: tool_call_execution_ids(chat.chat_id, amid, pids) for amid, pids in chat.calls.items()}
    wanted = sorted({eid for ids in ids_of.values() for eid in ids.values()}, key=str)
    executions = _executions(app, head, wanted)
    if not executions:
        return
    committed: dict[UUID, int] = {}
    for version, nid, kind, amid, part in chat.results:
        eid = ids_of[amid].get(part.tool_call_id)
        ex = executions.get(eid) if eid is not None else None
        if ex is None or ex.state is None:
            continue
        committed.setdefault(eid, version)  # type: ignore[arg-type]
        found = _untruthful(ex, part)
        if found is not None:
            ex_version, why = found
            report(_anomaly(chat.chat_id, version, nid, ex, ex_version,
                            f"{kind} committed {_short(part.result)}{' (an error)' if part.is_error else ''} as the "
                            f"result of tool call {part.tool_call_id!r} ({part.tool_name}, assistant message "
                            f"{amid}), but execution {ex.stream_id} version {ex_version} says {why}"))
    for eid, ex in executions.items():
        if len(ex.runs) > 1 and ex.state is not None:
            s = ex.state
            report(_anomaly(chat.chat_id, committed.get(eid), None, ex, ex.runs[1],
                            f"tool call {s.tool_call_id!r} ({s.tool_name}, assistant message "
                            f"{s.assistant_message_id}) ran {len(ex.runs)} times: execution {ex.stream_id} "
                            f"claims at versions {', '.join(map(str, ex.runs))} all have outcome run"))


def _anomaly(chat_id: UUID, version: int | None, nid: int | None, ex: _Execution, ex_version: int,
             reason: str) -> dict[str, Any]:
    return {"stream_id": str(chat_id), "version": version, "notification_id": nid, "check": "cross_stream",
            "execution_id": str(ex.stream_id), "execution_version": ex_version, "reason": reason}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"

