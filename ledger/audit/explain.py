"""Explanations from recorded facts (pure): a tool call, a queued prompt, a turn.

Every answer quotes what the events recorded — the tool policy before and after each narrowing, the
cancellation reasons, the model resolutions, what each generation attempt ran with and the fence each
worker command committed under, the tool-call execution's claims and response — and cites the stream
version of each fact. Nothing is re-derived from current settings: where an old event recorded no
settings, the caller's ``settings_at`` gives them as of that event's log position (time-aligned facts);
``current_settings`` (optional) gives what today's settings would be, for a counterfactual.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable
from uuid import UUID

import msgspec

from ledger.audit.timeline import iso
from ledger.chat import events as ev
from ledger.chat.evolve import evolve
from ledger.chat.values import ToolCallPart, ToolResultPart, message_text
from ledger.chat.views import tool_call_execution_ids
from ledger.errors import LedgerError


def _policy(p: list[str] | None) -> Any:
    return list(p) if p is not None else None


def _policy_text(p: list[str] | None) -> str:
    return "every tool (no policy)" if p is None else ("[" + ", ".join(p) + "]" if p else "no tool")


def _fact(e: Any) -> dict[str, Any]:
    return {"version": e.originator_version, "time": iso(e.timestamp), "type": type(e).__name__}


def _resolution(r: Any) -> dict[str, Any] | None:
    return msgspec.to_builtins(r) if r is not None else None


def _worker(e: Any) -> dict[str, Any]:
    """What a worker event records of its command: the attempt and runner it belongs to, its fence."""
    return {"generation_attempt": getattr(e, "generation_attempt", None),
            "runner_id": str(e.runner_id) if getattr(e, "runner_id", None) else None,
            "fence": _resolution(getattr(e, "fence", None))}


def settings_text(s: dict[str, Any] | None) -> str:
    """One line for an attempt's settings (``AttemptSettings`` as JSON)."""
    if s is None:
        return "settings unknown"
    m = s.get("model")
    model = (f"model {m['provider']}/{m['model']} ({m['model_config_id']}, {m['source']}"
             + (f", {m['reason']}" if m.get("reason") else "") + ")") if m else "no model resolves (defaults)"
    advisor = "advisor eligible" if s["advisor_eligible"] else f"advisor not eligible ({s.get('advisor_reason')})"
    return (f"{model}; context limit {s['context_limit']}; compaction at {s['compaction_threshold']}% of "
            f"{s['compaction_trigger_limit']}; {advisor}, {s['advisor_remaining_uses']} use(s) left")


def fence_text(f: dict[str, Any] | None) -> str:
    return "no fence" if not f else "fence " + ", ".join(f"{k} {v}" for k, v in f.items())


def _resolution_text(r: Any) -> str:
    if r is None:
        return "no model resolution was recorded"
    text = {"explicit": "chosen explicitly", "personal_override": "the owner's personal override",
            "org_default": "the organization's default", "chat_model": "the chat's model",
            "fallback_default": "the organization's default as a fallback",
            "admin_override": "an admin override"}.get(r.source, r.source)
    out = f"model {r.model_config_id}: {text}"
    if r.reason:
        out += f", because the requested model {r.requested_model_config_id} was {r.reason.replace('_', ' ')}"
    return out


class _Policy:
    """The policy changes recorded so far (each with the event that made it)."""

    def __init__(self) -> None:
        self.changes: list[dict[str, Any]] = []

    def record(self, e: Any) -> None:
        if isinstance(e, ev.ChatCreated):
            self.changes.append({**_fact(e), "cause": "chat created", "before": None,
                                 "incoming": _policy(e.hook_allowed_tools), "after": _policy(e.hook_allowed_tools),
                                 "removed": [], "turn_id": str(e.turn_id)})
        elif isinstance(e, (ev.TurnStarted, ev.QueuedPromptPromoted)):
            before, after = _policy(e.tool_policy_before), _policy(e.tool_policy)
            cause = (f"queued prompt #{e.queued_message_id} promoted" if isinstance(e, ev.QueuedPromptPromoted)
                     else f"prompt sent ({e.cause})")
            removed = [t for t in (before or []) if after is not None and t not in after]
            self.changes.append({**_fact(e), "cause": cause, "before": before, "incoming": _policy(e.hook_allowed_tools),
                                 "after": after, "removed": removed, "turn_id": str(e.turn_id)})

    @property
    def current(self) -> dict[str, Any] | None:
        return self.changes[-1] if self.changes else None


def explain_tool_call(chat_events: Iterable[Any], tool_call_id: str,
                      execution_events: Callable[[UUID], list[Any]] | None = None) -> dict[str, Any]:
    """Why tool call ``tool_call_id`` (the provider's id, or its execution UUID) was offered, how it closed
    and its execution record. ``execution_events(execution_id)`` returns the execution stream, if any."""
    events = list(chat_events)
    if not events:
        raise LedgerError("chat_not_found", "chat not found")
    chat_id = events[0].originator_id
    policy = _Policy()
    state = None
    found: dict[str, Any] | None = None
    closed: dict[str, Any] | None = None
    later_narrowings: list[dict[str, Any]] = []
    for e in events:
        policy.record(e)
        if found is not None and isinstance(e, (ev.TurnStarted, ev.QueuedPromptPromoted)):
            change = policy.current
            if change and found["tool_name"] in change["removed"]:
                later_narrowings.append(change)
        for m in getattr(e, "messages", None) or ():
            for p in m.parts:
                if found is None and isinstance(p, ToolCallPart) and m.role == "assistant":
                    ids = tool_call_execution_ids(chat_id, m.message_id,
                                                  [q.tool_call_id for q in m.parts if isinstance(q, ToolCallPart)])
                    exec_id = ids.get(p.tool_call_id)
                    if tool_call_id in (p.tool_call_id, str(exec_id) if exec_id else None):
                        found = {"tool_call_id": p.tool_call_id, "tool_name": p.tool_name,
                                 "args": msgspec.to_builtins(p.args), "provider_executed": p.provider_executed,
                                 "assistant_message_id": m.message_id, "execution_id": str(exec_id) if exec_id else None,
                                 "turn_id": str(m.turn_id) if m.turn_id else None, "recorded": _fact(e),
                                 "policy_in_force": _policy(state.hook_allowed_tools) if state else None,
                                 "dynamic": p.tool_name in (state.dynamic_tools if state else [])}
                        found["policy_set_by"] = policy.current
                elif (found is not None and closed is None and isinstance(p, ToolResultPart)
                      and p.tool_call_id == found["tool_call_id"]):
                    closed = {**_fact(e), "how": "error result" if p.is_error else "result",
                              "result": msgspec.to_builtins(p.result), "is_error": p.is_error}
                    if isinstance(e, ev.ToolCallsCanceled):
                        closed.update(how="canceled", reason=e.reason, dynamic_only=e.dynamic_only)
                    elif isinstance(e, ev.ToolResultsSubmitted):
                        closed["how"] = "client result" + (" (error)" if p.is_error else "")
        if found is not None and closed is None and isinstance(e, ev.MessageEdited) \
                and found["assistant_message_id"] in e.deleted_message_ids:
            closed = {**_fact(e), "how": "deleted by an edit", "reason": f"message {e.edited_message_id} was edited"}
        state = evolve(state, e)
    if found is None:
        raise LedgerError("tool_call_not_found", f"no tool call {tool_call_id!r} in chat {chat_id}")
    if closed is None:
        closed = {"how": "open", "reason": "no result or cancellation is recorded"}
    found["closed"] = closed
    found["later_narrowings"] = later_narrowings
    in_force = found["policy_in_force"]
    allowed = in_force is None or found["tool_name"] in in_force
    found["offered_by_policy"] = allowed
    set_by = found["policy_set_by"]
    lines = [f"tool call {found['tool_call_id']} ({found['tool_name']}) was made in assistant message "
             f"{found['assistant_message_id']} at version {found['recorded']['version']} ({found['recorded']['time']})"
             + (f", turn {found['turn_id']}" if found["turn_id"] else "")]
    if set_by is not None:
        lines.append(f"the tool policy in force was {_policy_text(in_force)}, set at version {set_by['version']} "
                     f"by {set_by['cause']}" + (f": {_policy_text(set_by['before'])} narrowed by the hook policy "
                                                f"{_policy_text(set_by['incoming'])}" if set_by["before"] is not None
                                                or set_by["cause"] != "chat created" else ""))
        if found["tool_name"] in set_by["removed"]:
            lines.append(f"{found['tool_name']} was removed from the policy by that narrowing: the model was not "
                         "offered this tool")
    if not allowed and (set_by is None or found["tool_name"] not in set_by["removed"]):
        lines.append(f"{found['tool_name']} was not in the policy in force: the model was not offered this tool")
    elif allowed:
        lines.append(f"{found['tool_name']} was allowed by that policy")
    for n in later_narrowings:
        lines.append(f"a later narrowing at version {n['version']} ({n['cause']}) removed {found['tool_name']}")
    if closed["how"] == "open":
        lines.append("it is still open: no result or cancellation is recorded")
    else:
        lines.append(f"it closed at version {closed['version']} ({closed['type']}): {closed['how']}"
                     + (f", reason {closed['reason']!r}" if closed.get("reason") else ""))
    execution = None
    if execution_events is not None and found["execution_id"]:
        execution = _execution(execution_events(UUID(found["execution_id"])))
    found["execution"] = execution
    if execution is None:
        lines.append("no tool-call execution was recorded for it")
    else:
        lines.append("execution record: " + "; ".join(f"v{x['version']} {x['what']}" for x in execution["events"]))
    found["chat_id"] = str(chat_id)
    found["explanation"] = lines
    return found


def _execution(events: list[Any]) -> dict[str, Any] | None:
    if not events:
        return None
    from ledger.toolcalls import events as tev
    from ledger.toolcalls.state import cancel_view, evolve as tevolve

    state = None
    out = []
    for e in events:
        state = tevolve(state, e)
        if isinstance(e, tev.ToolCallExecutionOpened):
            what = "opened"
        elif isinstance(e, tev.ToolCallClaimed):
            what = f"claim {e.claim_epoch} ({e.outcome})"
        elif isinstance(e, tev.ToolCallResponseRecorded):
            what = f"response status {e.response.status}"
        elif isinstance(e, tev.ToolCallCanceled):
            what = f"canceled ({e.outcome})"
        else:  # pragma: no cover
            what = type(e).__name__
        out.append({**_fact(e), "what": what})
    return {"execution_id": str(events[0].originator_id), "status": state.status, "claims": state.claim_epoch,
            "response": msgspec.to_builtins(state.response) if state.response else None,
            "cancel": cancel_view(state), "events": out}


def explain_queued(chat_events: Iterable[Any], queued_message_id: int) -> dict[str, Any]:
    """When a queued prompt was queued, by whom, its prefix and policy; how it was edited (new content,
    overrides, editing begun and ended) and where the chat paused at it; when and why it left the queue."""
    events = list(chat_events)
    if not events:
        raise LedgerError("chat_not_found", "chat not found")
    chat_id = events[0].originator_id
    out: dict[str, Any] | None = None
    state = None
    for e in events:
        if isinstance(e, ev.ChatResumed) and out is not None and out["pauses"] and out["pauses"][-1]["resumed"] is None:
            # (the pause at this prompt ends here, also when its deletion or promotion ended it)
            out["pauses"][-1]["resumed"] = {**_fact(e), "cause": e.cause, "status": e.status,
                                            "queued_message_id": e.queued_message_id}
        if isinstance(e, ev.PromptQueued) and e.prompt.queued_message_id == queued_message_id:
            q = e.prompt
            out = {"chat_id": str(chat_id), "queued_message_id": queued_message_id, "queued": _fact(e),
                   "created_by": str(q.created_by), "actor": str(e.actor) if e.actor else None,
                   "text": message_text(q.parts), "turn_id": str(q.turn_id),
                   "hook_prefix": msgspec.to_builtins(q.hook_prefix),
                   "hook_allowed_tools": _policy(q.hook_allowed_tools),
                   "model_config_id": str(q.model_config_id) if q.model_config_id else None,
                   "chat_state_when_queued": state.execution_state if state else None,
                   "moves": [], "edits": [], "pauses": [], "under_edit": False, "outcome": None}
        elif out is not None and out["outcome"] is None:
            if isinstance(e, ev.QueuedPromptMovedToHead) and e.queued_message_id == queued_message_id:
                out["moves"].append({**_fact(e), "position": e.position})
            elif isinstance(e, ev.QueuedPromptEdited) and e.queued_message_id == queued_message_id:
                out["edits"].append({**_fact(e), "what": "content", "text": message_text(e.parts),
                                     "model_config_id": str(e.model_config_id) if e.model_config_id else None,
                                     "reasoning_effort": e.reasoning_effort,
                                     "actor": str(e.actor) if e.actor else None})
            elif isinstance(e, ev.QueuedPromptEditBegun) and e.queued_message_id == queued_message_id:
                out["edits"].append({**_fact(e), "what": "editing begun", "actor": str(e.actor) if e.actor else None})
                out["under_edit"] = True
            elif isinstance(e, ev.QueuedPromptEditEnded) and e.queued_message_id == queued_message_id:
                out["edits"].append({**_fact(e), "what": f"editing ended ({e.cause})",
                                     "actor": str(e.actor) if e.actor else None})
                out["under_edit"] = False
            elif isinstance(e, ev.ChatPaused) and e.queued_message_id == queued_message_id:
                out["pauses"].append({**_fact(e), "resumed": None})
            elif isinstance(e, ev.QueuedPromptPromoted) and e.queued_message_id == queued_message_id:
                why = _promotion_cause(events, e)
                out["outcome"] = {**_fact(e), "how": "promoted", "why": why, "turn_id": str(e.turn_id),
                                  "prompt_message_id": e.prompt_message_id,
                                  "tool_policy_before": _policy(e.tool_policy_before),
                                  "tool_policy_after": _policy(e.tool_policy),
                                  "model_config_id": str(e.model_config_id) if e.model_config_id else None,
                                  "model_resolution": _resolution(e.model_resolution),
                                  "model_explanation": _resolution_text(e.model_resolution),
                                  "reasoning_effort": e.reasoning_effort,
                                  "prefix_message_ids": [m.message_id for m in e.messages
                                                         if m.message_id != e.prompt_message_id]}
            elif isinstance(e, ev.QueuedPromptDeleted) and e.queued_message_id == queued_message_id:
                out["outcome"] = {**_fact(e), "how": "deleted", "why": "a delete_queued_message command",
                                  "actor": str(e.actor) if e.actor else None}
            elif isinstance(e, ev.MessageEdited) and queued_message_id in e.deleted_queued_message_ids:
                out["outcome"] = {**_fact(e), "how": "dropped",
                                  "why": f"message {e.edited_message_id} was edited (the queue is cleared)"}
            elif isinstance(e, ev.ChatEnded) and queued_message_id in e.deleted_queued_message_ids:
                out["outcome"] = {**_fact(e), "how": "dropped", "why": "the chat was ended"}
        state = evolve(state, e)
    if out is None:
        raise LedgerError("queued_message_not_found", f"no queued message {queued_message_id} in chat {chat_id}")
    lines = [f"prompt #{queued_message_id} {out['text']!r} was queued at version {out['queued']['version']} "
             f"({out['queued']['time']}) by {out['created_by']} while the chat was {out['chat_state_when_queued']}",
             f"hook prefix: {len(out['hook_prefix'])} message(s); hook tool policy {_policy_text(out['hook_allowed_tools'])}"
             + (f"; requested model {out['model_config_id']}" if out["model_config_id"] else "")]
    for mv in out["moves"]:
        lines.append(f"moved to the head at version {mv['version']} (position {mv['position']})")
    for ed in out["edits"]:
        if ed["what"] == "content":
            lines.append(f"content replaced at version {ed['version']}: {ed['text']!r}"
                         + (f"; model {ed['model_config_id']}" if ed["model_config_id"] else "")
                         + (f"; reasoning effort {ed['reasoning_effort']}" if ed["reasoning_effort"] else ""))
        else:
            lines.append(f"{ed['what']} at version {ed['version']} ({ed['time']})")
    for pz in out["pauses"]:
        r = pz["resumed"]
        lines.append(f"the chat paused at it at version {pz['version']} (a turn ended while it was under edit)"
                     + ("" if r is None else f"; resumed at version {r['version']} ({r['cause'].replace('_', ' ')})"))
    o = out["outcome"]
    if o is None:
        lines.append("it is still queued" + (", under edit" if out["under_edit"] else ""))
    elif o["how"] == "promoted":
        lines.append(f"promoted at version {o['version']} ({o['time']}) because {o['why']}: turn {o['turn_id']}, "
                     f"prompt message {o['prompt_message_id']}")
        lines.append(f"tool policy {_policy_text(o['tool_policy_before'])} -> {_policy_text(o['tool_policy_after'])}")
        lines.append(o["model_explanation"])
        if o["reasoning_effort"]:
            lines.append(f"reasoning effort {o['reasoning_effort']} carried into history")
    else:
        lines.append(f"{o['how']} at version {o['version']} ({o['time']}): {o['why']}")
    out["explanation"] = lines
    return out


def _promotion_cause(events: list[Any], promoted: Any) -> str:
    """The command that promoted it: the events recorded just before it in the same command (same
    timestamp and idempotency key) say which."""
    same = [e for e in events if e.timestamp == promoted.timestamp and e.originator_version < promoted.originator_version
            and e.idempotency_key == promoted.idempotency_key]
    kinds = {type(e).__name__ for e in same}
    resumed = [e for e in same if isinstance(e, ev.ChatResumed)]
    if resumed:
        return f"the paused chat resumed ({resumed[-1].cause.replace('_', ' ')}): the ready head is promoted"
    if "TurnFinished" in kinds:
        return "the running turn finished (the queue head is promoted automatically)"
    if "InterruptionFinished" in kinds:
        return "the interruption finished (the queue head is promoted automatically)"
    if "InterruptRequested" in kinds:
        return "it was promoted explicitly while the chat ran (the running turn was interrupted)"
    if "TurnStarted" in kinds:
        return "a new message was sent"
    return "a promote_queued_message command (or the chat became idle with a queue)"


def explain_turn(chat_events: Iterable[Any], turn_id: str,
                 settings_at: Callable[[Any, int], dict[str, Any] | None] | None = None,
                 current_settings: Callable[[Any], dict[str, Any] | None] | None = None) -> dict[str, Any]:
    """The model of a turn and why, its attempts (with what each ran with) and retries, each step with its
    model and settings as of then and the fence it committed under, its tool calls and how it ended.

    A step's settings are those its attempt recorded (``settings_from: recorded``); for steps of older
    ledgers, or steps no attempt was recorded for, ``settings_at(state_before, version)`` gives them as of
    the step's log position (``resolved``). ``current_settings(state_before)`` adds what today's catalog
    and deployment would give, and the differences."""
    events = list(chat_events)
    if not events:
        raise LedgerError("chat_not_found", "chat not found")
    chat_id = events[0].originator_id
    try:
        tid = UUID(turn_id)
    except ValueError:
        raise LedgerError("invalid_command", f"invalid turn id: {turn_id!r}") from None
    reports, state = _turn_reports(events, {tid}, settings_at, current_settings)
    if tid not in reports:
        raise LedgerError("turn_not_found", f"no turn {turn_id} in chat {chat_id}")
    return _with_lines(reports[tid], state)


def explain_turns(chat_events: Iterable[Any],
                  settings_at: Callable[[Any, int], dict[str, Any] | None] | None = None) -> list[dict[str, Any]]:
    """``explain_turn`` of every turn of the chat, in the order they started, from one pass over its events (the
    audit page's turns: a long chat has thousands)."""
    reports, state = _turn_reports(list(chat_events), None, settings_at, None)
    return [_with_lines(out, state) for out in reports.values()]


def _turn_reports(events: list[Any], wanted: set[UUID] | None,
                  settings_at: Callable[[Any, int], dict[str, Any] | None] | None,
                  current_settings: Callable[[Any], dict[str, Any] | None] | None) -> tuple[dict[UUID, dict[str, Any]], Any]:
    """The reports of the ``wanted`` turns (None: every turn), by turn id in the order they started, and the chat's
    state after ``events``: one fold of the chat, each event given to the turn open at it."""
    from ledger.audit.redecide import differences

    chat_id = events[0].originator_id
    reports: dict[UUID, dict[str, Any]] = {}
    out: dict[str, Any] | None = None
    state = None
    ran_with: dict[str, Any] | None = None  # what the latest attempt of this history version ran with
    for e in events:
        starts = isinstance(e, (ev.ChatCreated, ev.TurnStarted, ev.QueuedPromptPromoted))
        if starts:
            if out is not None and out["ended"] is None and not isinstance(e, ev.ChatCreated):
                out["ended"] = {**_fact(e), "how": "superseded by the next turn", "next_turn_id": str(e.turn_id)}
            out = None
        if starts and (wanted is None or e.turn_id in wanted):
            if isinstance(e, ev.ChatCreated):
                cause, resolution, policy = "chat created", e.model_resolution, _policy(e.hook_allowed_tools)
                model = e.model_config_id
            elif isinstance(e, ev.TurnStarted):
                cause, resolution, policy = f"prompt sent ({e.cause})", e.model_resolution, _policy(e.tool_policy)
                model = e.model_config_id or (state.model_config_id if state else None)
            else:
                cause = f"queued prompt #{e.queued_message_id} promoted"
                resolution, policy, model = e.model_resolution, _policy(e.tool_policy), e.model_config_id
            if e.model_resolution is not None:
                model = e.model_resolution.model_config_id
            out = reports[e.turn_id] = {
                "chat_id": str(chat_id), "turn_id": str(e.turn_id), "started": {**_fact(e), "cause": cause},
                "model_config_id": str(model) if model else None, "model_resolution": _resolution(resolution),
                "model_explanation": _resolution_text(resolution), "tool_policy": policy,
                "attempts": [], "retries": [], "steps": 0, "step_details": [], "tool_calls": [],
                "cancellations": [], "interrupts": [], "ended": None}
        elif out is not None and out["ended"] is None:
            if isinstance(e, ev.GenerationAttemptRecorded):
                ran_with = _resolution(e.settings)
                out["attempts"].append({**_fact(e), "attempt": e.generation_attempt, "settings": ran_with,
                                        "runner_id": str(e.runner_id) if e.runner_id else None,
                                        "fence": _resolution(e.fence)})
            elif isinstance(e, ev.RetryStateRecorded):
                out["retries"].append({**_fact(e), "retry_state": msgspec.to_builtins(e.retry_state), **_worker(e)})
            elif isinstance(e, ev.StepCommitted):
                out["steps"] += 1
                step = {**_fact(e), **_worker(e), "message_ids": [m.message_id for m in e.messages]}
                if step["generation_attempt"] is None and state is not None:
                    step["generation_attempt"] = state.generation_attempt
                step["settings"], step["settings_from"] = ran_with, "recorded"
                if ran_with is None:
                    step["settings"] = settings_at(state, e.originator_version) if settings_at else None
                    step["settings_from"] = "resolved" if step["settings"] is not None else None
                if current_settings is not None:
                    now = current_settings(state)
                    step["current_settings"] = now
                    step["differences"] = differences(_comparable(step["settings"]), _comparable(now),
                                                      ("as_of", "current"))
                out["step_details"].append(step)
                for m in e.messages:
                    for p in m.parts:
                        if isinstance(p, ToolCallPart):
                            out["tool_calls"].append({"tool_call_id": p.tool_call_id, "tool_name": p.tool_name,
                                                      "version": e.originator_version})
            elif isinstance(e, ev.ToolCallsCanceled):
                out["cancellations"].append({**_fact(e), "reason": e.reason,
                                             "tool_call_ids": [p.tool_call_id for m in e.messages for p in m.parts
                                                               if isinstance(p, ToolResultPart)]})
            elif isinstance(e, ev.InterruptRequested):
                out["interrupts"].append({**_fact(e), "reason": e.reason})
            elif isinstance(e, ev.TurnFinished):
                out["ended"] = {**_fact(e), "how": "finished", **_worker(e)}
            elif isinstance(e, ev.InterruptionFinished):
                out["ended"] = {**_fact(e), "how": "interrupted", **_worker(e)}
            elif isinstance(e, ev.TurnFailed):
                out["ended"] = {**_fact(e), "how": "failed", "error": msgspec.to_builtins(e.last_error), **_worker(e)}
            elif isinstance(e, ev.ChatEnded):
                out["ended"] = {**_fact(e), "how": "chat ended"}
            elif isinstance(e, ev.ContextCleared):
                out["ended"] = {**_fact(e), "how": "context cleared"}
            elif isinstance(e, ev.MessageEdited):
                out["ended"] = {**_fact(e), "how": f"message {e.edited_message_id} edited"}
        history = state.history_version if state is not None else None
        state = evolve(state, e)
        if state.history_version != history:
            ran_with = None  # a new history version: the next step belongs to a new attempt
    return reports, state


def _with_lines(out: dict[str, Any], state: Any) -> dict[str, Any]:
    """The report with its ``explanation``: what it says, in lines."""
    lines = [f"turn {out['turn_id']} started at version {out['started']['version']} ({out['started']['time']}): "
             f"{out['started']['cause']}",
             out["model_explanation"],
             f"tool policy {_policy_text(out['tool_policy'])}",
             f"{out['steps']} step(s), {len(out['tool_calls'])} tool call(s), {len(out['attempts'])} generation "
             f"attempt(s) recorded, {len(out['retries'])} retry state(s)"]
    for st in out["step_details"]:
        how = {"recorded": "as its attempt recorded", "resolved": "resolved as of then"}.get(st["settings_from"] or "", "")
        lines.append(f"step at version {st['version']} (attempt {st['generation_attempt']}, runner "
                     f"{st['runner_id'] or '-'}, {fence_text(st['fence'])}): {settings_text(st['settings'])}"
                     + (f" [{how}]" if how else ""))
        for d in st.get("differences") or []:
            lines.append(f"  with today's settings {d['field']} would be {d['current']!r} (then {d['as_of']!r})")
    for c in out["cancellations"]:
        lines.append(f"tool calls {', '.join(c['tool_call_ids'])} canceled at version {c['version']}: {c['reason']}")
    for i in out["interrupts"]:
        lines.append(f"interrupt requested at version {i['version']}: {i['reason']}")
    end = out["ended"]
    if end is None:
        lines.append(f"it has not ended (the chat is {state.execution_state if state else '?'})")
    else:
        lines.append(f"it ended at version {end['version']} ({end['time']}): {end['how']}"
                     + (f": {end['error']['message']}" if end.get("error") else "")
                     + (f" ({fence_text(end['fence'])})" if "fence" in end else ""))
    out["explanation"] = lines
    return out


def _comparable(s: dict[str, Any] | None) -> dict[str, Any] | None:
    """Settings without who supplied them (``source``) nor the action (a counterfactual keeps the step)."""
    if s is None:
        return None
    return {k: v for k, v in s.items() if k not in ("source", "action")}
