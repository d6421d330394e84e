"""What the worker would do next for a chat, and why (``chat-ledger next-action CHAT``; the simulator acts on it).

Runs the pure generation decision (``ledger.policy.generation.next_action``) on the chat as recorded, with
the settings ``ledger.policy.settings.generation_settings`` takes from the model catalog and the
deployment (``settings_source: catalog``): the chat's model resolved for generation (threshold, context
limit), the compaction context's limit (the smaller of the chat model's and the compaction override's),
the advisor switches. Without a usable model the defaults apply (``settings_source: defaults``). Options
override them for what-if questions (``...+options``).

``--at VERSION`` (or ``--as-of TIME``) decides on the chat as it was, with the catalog, the deployment and
the tool-call executions folded to the same log position (``commands.asof``), never today's; with
``--with-current-settings`` the report adds what today's settings would decide on that same chat state and
lists the differences (a counterfactual). With a recorded generation attempt the output includes the retry
decision a retryable failure of that attempt would get (``--retry-after`` adds the provider's hint), and
``fence`` is what a worker acting on this answer sends with its next command.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec

from commands.asof import AsOf, Positioned, chat_position, now
from commands.catalog import find_catalog, find_deployment, owners_of
from commands.queries import chat_at
from ledger.audit.redecide import differences
from ledger.chat.decide import fence_of
from ledger.chat.state import ChatState
from ledger.chat.values import AttemptSettings, ToolResultPart
from ledger.chat.views import to_jsonable
from ledger.policy.generation import GenerationSettings, NextAction, next_action
from ledger.policy.retry import retry_decision
from ledger.policy.settings import SettingsReport, attempt_settings, generation_settings
from ledger.policy.tools import ADVISOR, advisor_uses_this_turn
from ledger.toolcalls.aggregate import ToolCallExecution


def catalog_facts(facts: Positioned, state: ChatState) -> tuple[Any, Any, dict[Any, Any]]:
    """The chat organization's catalog, the deployment and the owner of the chat's model when the catalog
    lacks it, as of ``facts``' position: what ``generation_settings`` needs."""
    catalog = find_catalog(facts, state.organization_id)
    deployment = find_deployment(facts)
    return catalog, deployment, owners_of(facts, catalog, [state.model_config_id])  # type: ignore[arg-type]


def settings_report(facts: Positioned, state: ChatState, *, max_steps: int | None = None,
                    stop_after: tuple[str, ...] = ()) -> SettingsReport:
    catalog, deployment, owners = catalog_facts(facts, state)
    return generation_settings(state, catalog, deployment, stop_after_tools=stop_after, max_steps=max_steps,
                               owners=owners)


def settings_for(facts: Positioned, state: ChatState, *, threshold: int | None = None,
                 context_limit: int | None = None, max_steps: int | None = None,
                 stop_after: tuple[str, ...] = ()) -> tuple[GenerationSettings, dict[str, Any], SettingsReport]:
    """The settings next-action uses (``ledger.policy.settings.generation_settings`` on the catalog and the
    deployment as of ``facts``' position, then the options), how each was chosen, and the report."""
    report = settings_report(facts, state, max_steps=max_steps, stop_after=stop_after)
    settings = report.settings
    changes: dict[str, Any] = {}
    if threshold is not None:
        changes["threshold_percent"] = threshold
    if context_limit is not None:
        changes["context_limit"] = context_limit
        changes["compaction_context_limit"] = context_limit
    if changes:
        settings = msgspec.structs.replace(settings, **changes)
    overridden = bool(changes) or max_steps is not None or bool(stop_after)
    info = {
        "settings_source": report.source + ("+options" if overridden else ""),
        "settings_note": report.note,
        "settings": {
            **msgspec.to_builtins(settings),
            "context_limit_source": "option" if context_limit is not None else report.context_limit_source,
            "model": report.model,
            "compaction_model": report.compaction_model,
            "advisor_model": report.advisor_model,
        },
    }
    return settings, info, report


def advisor_bodies(events: Any) -> dict[str, Any]:
    """tool_call_id -> result body of every advisor tool result in a chat's events (what
    ``advisor_result_bodies(message_rows(events))`` gives, without building every message row)."""
    bodies: dict[str, Any] = {}
    for e in events:
        for m in getattr(e, "messages", ()) or ():
            for p in m.parts:
                if isinstance(p, ToolResultPart) and p.tool_name == ADVISOR:
                    bodies[p.tool_call_id] = to_jsonable(p.result)
    return bodies


def decide_chat(app: Any, chat_id: Any, version: int | None = None, *, position: int | None = None,
                **overrides: Any) -> tuple[ChatState, NextAction, dict[str, Any]]:
    """The chat (as of ``version``, default now), the decision and the settings info: what ``next-action``
    reports and what the simulator acts on. The other streams are read as of the log position of the
    chat's event at ``version`` (``position`` overrides it: the position a decision was made at); as of
    now when neither is given."""
    state, events = chat_at(app, chat_id, version)
    if position is None and version is not None:
        position = chat_position(app, state.chat_id, state.version)
    return (state, *decide_on(AsOf(app).at(position), state, events, **overrides))


def decide_on(facts: Positioned, state: ChatState, events: list[Any],
              **overrides: Any) -> tuple[NextAction, dict[str, Any]]:
    """The decision on ``state`` with the other streams as of ``facts``' position, and the settings info."""
    settings, info, report = settings_for(facts, state, **overrides)
    decision = next_action(state, settings, advisor_result_bodies=advisor_bodies(events))
    info["facts_as_of"] = {"chat_version": state.version, "notification_id": facts.position}
    ran = msgspec.to_builtins(attempt_settings(state, settings, report.recorded_model, decision, "runner"))
    del ran["source"]
    info["attempt_settings"] = ran  # what a runner carrying out this decision passes to record_generation_attempt
    return decision, info


def attempt_settings_now(app: Any, state: ChatState) -> AttemptSettings:
    """What a generation attempt on the chat as it is runs with, resolved by the ledger now
    (``record_generation_attempt`` without ``settings``). The advisor's remaining uses are exact: the
    chat's events are read for the result bodies only when the current turn has an advisor result."""
    report = settings_report(now(app), state)
    bodies = None
    if advisor_uses_this_turn(state) > 0:
        bodies = advisor_bodies(app.stream(state.chat_id, lte=state.version))
    decision = next_action(state, report.settings, advisor_result_bodies=bodies)
    return attempt_settings(state, report.settings, report.recorded_model, decision, "ledger")


#: the parts of a next-action report that compare a decision under two sets of facts
DECISION_FIELDS = ("action", "finish_reason", "forced", "calls", "pending_dynamic", "policy_results", "error",
                   "exclusive_tools", "advisor", "compaction", "settings_source", "settings")


def next_action_report(app: Any, chat_id: Any, *, retry_after: float | None = None,
                       version: int | None = None, as_of: str | None = None,
                       with_current_settings: bool = False, **overrides: Any) -> dict[str, Any]:
    """Everything ``next-action --json`` prints for one chat."""
    state, events = chat_at(app, chat_id, version, as_of)
    reader = AsOf(app)
    past = version is not None or as_of is not None
    facts = reader.at(chat_position(app, state.chat_id, state.version) if past else None)
    action, info = decide_on(facts, state, events, **overrides)
    report = _report(facts, state, action, info, retry_after)
    if with_current_settings:
        current_action, current_info = decide_on(reader.at(None), state, events, **overrides)
        current = _report(reader.at(None), state, current_action, current_info, retry_after)
        report["current_settings"] = {k: current[k] for k in DECISION_FIELDS}
        report["differences"] = differences({k: report[k] for k in DECISION_FIELDS}, report["current_settings"],
                                            ("as_of", "current"))
    return report


def _report(facts: Positioned, state: ChatState, action: NextAction, info: dict[str, Any],
            retry_after: float | None) -> dict[str, Any]:
    decision = msgspec.to_builtins(action)
    for call in decision["calls"] + decision["pending_dynamic"]:
        call["execution"] = _execution_status(facts, call.get("execution_id"))
    retry = None
    if state.generation_attempt > 0:
        retry = msgspec.to_builtins(retry_decision(state.generation_attempt, retry_after,
                                                   max_attempts=info["settings"]["max_generation_retries"]))
    return {
        "chat_id": str(state.chat_id),
        "status": state.status,
        "execution_state": state.execution_state,
        "runnable": state.status == "running" and not state.archived,
        "version": state.version,
        **decision,
        "retry": retry,
        "recorded_retry_state": state.retry_state,
        "fence": msgspec.to_builtins(fence_of(state)),
        **info,
    }


def _execution_status(facts: Positioned, execution_id: str | None) -> dict[str, Any] | None:
    if execution_id is None:
        return None
    agg = facts.load(UUID(execution_id))
    if not isinstance(agg, ToolCallExecution):
        return {"status": "unclaimed", "claim_epoch": 0}
    return {"status": agg.state.status, "claim_epoch": agg.state.claim_epoch}
