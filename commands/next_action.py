"""What the worker would do next for a chat, and why (``chat-ledger next-action CHAT``; the simulator acts on it).

Runs the pure generation decision (``ledger.policy.generation.next_action``) on the chat as recorded, with
the settings ``ledger.policy.settings.generation_settings`` takes from the model catalog and the
deployment (``settings_source: catalog``): the chat's model resolved for generation (threshold, context
limit), the compaction context's limit (the smaller of the chat model's and the compaction override's),
the advisor switches. Without a usable model the defaults apply (``settings_source: defaults``). Options
override them for what-if questions (``...+options``); ``--at VERSION`` decides on the chat as it was. With a recorded generation attempt the output includes the
retry decision a retryable failure of that attempt would get (``--retry-after`` adds the provider's hint).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec

from commands.catalog import find_catalog, find_deployment, owners_of
from commands.toolcalls import load_execution
from ledger.base import fast_project
from ledger.chat.aggregate import Chat
from ledger.chat.state import ChatState
from ledger.chat.values import ToolResultPart
from ledger.chat.views import to_jsonable
from ledger.errors import LedgerError
from ledger.policy.generation import MAX_STEPS, GenerationSettings, NextAction, next_action
from ledger.policy.retry import retry_decision
from ledger.policy.settings import generation_settings
from ledger.policy.tools import ADVISOR


def catalog_facts(app: Any, state: ChatState) -> tuple[Any, Any, dict[Any, Any]]:
    """The chat organization's catalog, the deployment and the owner of the chat's model when the catalog
    lacks it (read through the aggregate cache): what ``generation_settings`` needs."""
    catalog = find_catalog(app, state.organization_id)
    return catalog, find_deployment(app), owners_of(app, catalog, [state.model_config_id])


def settings_for(app: Any, state: ChatState, *, threshold: int | None = None, context_limit: int | None = None,
                 max_steps: int | None = None, stop_after: tuple[str, ...] = ()) -> tuple[GenerationSettings, dict[str, Any]]:
    """The settings next-action uses (``ledger.policy.settings.generation_settings`` on the catalog and the
    deployment, then the options), and how each was chosen."""
    catalog, deployment, owners = catalog_facts(app, state)
    report = generation_settings(state, catalog, deployment, stop_after_tools=stop_after,
                                 max_steps=max_steps if max_steps is not None else MAX_STEPS, owners=owners)
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
    return settings, info


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


def decide_chat(app: Any, chat_id: Any, version: int | None = None, **overrides: Any) -> tuple[ChatState, NextAction, dict[str, Any]]:
    """The chat (as of ``version``, default now), the decision and the settings info: what ``next-action``
    reports and what the simulator acts on."""
    events = app.stream(chat_id, lte=version)  # one read: the state and the advisor result bodies
    chat = fast_project(None, events) if events else None
    if not isinstance(chat, Chat):
        raise LedgerError("chat_not_found", "chat not found")
    state = chat.state
    settings, info = settings_for(app, state, **overrides)
    bodies = advisor_bodies(events)
    return state, next_action(state, settings, advisor_result_bodies=bodies), info


def next_action_report(app: Any, chat_id: Any, *, retry_after: float | None = None,
                       version: int | None = None, **overrides: Any) -> dict[str, Any]:
    """Everything ``next-action --json`` prints for one chat."""
    state, action, info = decide_chat(app, chat_id, version, **overrides)
    decision = msgspec.to_builtins(action)
    for call in decision["calls"] + decision["pending_dynamic"]:
        call["execution"] = _execution_status(app, call.get("execution_id"))
    retry = None
    if state.generation_attempt > 0:
        retry = msgspec.to_builtins(retry_decision(state.generation_attempt, retry_after))
    return {
        "chat_id": str(state.chat_id),
        "status": state.status,
        "execution_state": state.execution_state,
        "runnable": state.status == "running" and not state.archived,
        "version": state.version,
        **decision,
        "retry": retry,
        "recorded_retry_state": state.retry_state,
        **info,
    }


def _execution_status(app: Any, execution_id: str | None) -> dict[str, Any] | None:
    if execution_id is None:
        return None
    agg = load_execution(app, UUID(execution_id))
    if agg is None:
        return {"status": "unclaimed", "claim_epoch": 0}
    return {"status": agg.state.status, "claim_epoch": agg.state.claim_epoch}
