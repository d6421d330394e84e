"""The audit timeline of one stream: each event with its time, type, a readable summary and a summary
of the aggregate's state after it. Works for every aggregate type (chats, organization catalogs, the
deployment, model config claims, conversations, tool-call executions): the stream's first event names
its aggregate class (``originator_topic``), whose own pure ``evolve`` folds the stream.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable
from uuid import UUID

import msgspec

from ledger.base import TOPICS
from ledger.chat.values import usage_total
from ledger.chat.views import usage_summary
from ledger.errors import LedgerError


def _s(v: Any) -> Any:
    if isinstance(v, UUID):
        return str(v)
    if isinstance(v, datetime):
        return iso(v)
    return v


def iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def short(v: Any) -> str:
    """A UUID shortened to its first 8 hex digits (enough to tell ids apart on a page)."""
    return str(v)[:8] if v is not None else "-"


def parse_time(text: str) -> datetime:
    """An RFC 3339 / ISO 8601 time (``Z`` or an offset; no offset means UTC)."""
    try:
        t = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise LedgerError("invalid_time", f"invalid time {text!r}: use ISO 8601, e.g. 2026-01-01T12:00:00Z") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def version_as_of(events: Iterable[Any], at: datetime) -> int | None:
    """The stream version as of time ``at``: the last event recorded at or before it (None: none was)."""
    version = None
    for e in events:
        if e.timestamp <= at:
            version = e.originator_version
        else:
            break
    return version


def aggregate_class(first_event: Any) -> type:
    topic = getattr(first_event, "originator_topic", None)
    cls = TOPICS.get(topic) if topic else None
    if cls is None:
        raise LedgerError("invalid_stream", f"stream {first_event.originator_id} does not start with a creation event")
    return cls


def aggregate_kind(cls_or_state: Any) -> str:
    name = type(cls_or_state).__name__ if not isinstance(cls_or_state, type) else cls_or_state.__name__
    return {
        "Chat": "chat", "ChatState": "chat",
        "OrganizationCatalog": "catalog", "CatalogState": "catalog",
        "Deployment": "deployment", "DeploymentState": "deployment",
        "ModelConfigClaim": "model_config_claim", "ClaimState": "model_config_claim",
        "Conversation": "conversation", "ConversationState": "conversation",
        "ToolCallExecution": "tool_call_execution", "ToolCallExecutionState": "tool_call_execution",
    }.get(name, name)


# -- the state after an event ----------------------------------------------------------------------------

def state_summary(state: Any) -> dict[str, Any]:
    """What an auditor reads of an aggregate's state (JSON-able), by aggregate type."""
    kind = aggregate_kind(state)
    if kind == "chat":
        return {
            "status": state.status,
            "execution_state": state.execution_state,
            "archived": state.archived,
            "queue": [q.queued_message_id for q in state.queue],
            "editing": state.editing_queued_message_id,
            "policy": list(state.hook_allowed_tools) if state.hook_allowed_tools is not None else None,
            "model": _s(state.model_config_id),
            "turn_id": _s(state.turn_id),
            "messages": len(state.messages),
            "owned": state.worker_id is not None,
            "last_error": msgspec.to_builtins(state.last_error) if state.last_error else None,
        }
    if kind == "catalog":
        return {
            "members": len(state.members),
            "configs": {str(k): {"model": c.model, "provider": c.provider, "enabled": c.enabled}
                        for k, c in state.configs.items()},
            "default": _s(state.default_model_config_id),
            "usable_default": _s(state.usable_default()),
            "providers": {k: msgspec.to_builtins(p) for k, p in state.providers.items()},
        }
    if kind == "deployment":
        return {k: v for k, v in msgspec.to_builtins(state).items() if k not in ("idempotency", "version", "updated_at")}
    if kind == "model_config_claim":
        return {"organization_id": str(state.organization_id)}
    if kind == "conversation":
        from ledger.conversation.queries import conversation_view_row

        row = conversation_view_row(state)
        row["mode"] = state.mode
        return row
    if kind == "tool_call_execution":
        return {"status": state.status, "claim_epoch": state.claim_epoch, "canceled": state.canceled,
                "cancel_outcome": state.cancel_outcome,
                "response_status": state.response.status if state.response else None}
    return msgspec.to_builtins(state) if isinstance(state, msgspec.Struct) else {}


# -- readable summaries -----------------------------------------------------------------------------------

def _policy(p: list[str] | None) -> str:
    return "all tools" if p is None else ("[" + ", ".join(p) + "]" if p else "no tools")


def _resolution(r: Any) -> str:
    if r is None:
        return ""
    text = f"model {r.model_config_id} ({r.source}"
    if r.reason:
        text += f": requested {r.requested_model_config_id} was {r.reason}"
    return text + ")"


def _text(messages: Any) -> str:
    from ledger.chat.values import message_text

    for m in messages or ():
        if m.role == "user" and m.visibility != "model":
            t = message_text(m.parts)
            return t if len(t) <= 60 else t[:59] + "…"
    return ""


def _calls(messages: Any) -> list[str]:
    from ledger.chat.values import ToolCallPart

    return [f"{p.tool_name}({p.tool_call_id})" for m in messages or () for p in m.parts if isinstance(p, ToolCallPart)]


def _results(messages: Any) -> list[str]:
    from ledger.chat.values import ToolResultPart

    return [f"{p.tool_call_id}{' error' if p.is_error else ''}"
            for m in messages or () for p in m.parts if isinstance(p, ToolResultPart)]


def _msgs(messages: Any) -> str:
    if not messages:
        return ""
    ids = [m.message_id for m in messages]
    text = f"message{'s' if len(ids) > 1 else ''} {ids[0]}" + (f"-{ids[-1]}" if len(ids) > 1 else "")
    calls, results = _calls(messages), _results(messages)
    if calls:
        text += "; calls " + ", ".join(calls)
    if results:
        text += "; results " + ", ".join(results)
    return text


def summarize(e: Any) -> str:
    """One readable line about what the event records."""
    name = type(e).__name__
    f = _SUMMARIES.get(name)
    if f is not None:
        try:
            return f(e)
        except Exception:  # a summary never hides an event
            pass
    fields = {k: v for k, v in vars(e).items()
              if k not in ("originator_id", "originator_version", "timestamp", "idempotency_key", "actor",
                           "idempotency_command", "originator_topic")}
    return name + (" " + ", ".join(f"{k}={_s(v)}" for k, v in fields.items()) if fields else "")


_SUMMARIES: dict[str, Any] = {
    # chats
    "ChatCreated": lambda e: (f"chat created ({e.status}) by {short(e.owner_id)}: {_text(e.messages)!r}; "
                              f"policy {_policy(e.hook_allowed_tools)}; {_resolution(e.model_resolution)}"
                              + (f"; child of {short(e.parent_chat_id)}" if e.parent_chat_id else "")),
    "ChildChatCreated": lambda e: f"child chat {short(e.child_chat_id)} created",
    "TitleSet": lambda e: f"title set to {e.title!r}" + (" (generated)" if e.source == "generated" else ""),
    "PlanModeSet": lambda e: "plan mode on" if e.plan_mode else "plan mode off",
    "PinSet": lambda e: "pinned" if e.pinned else "unpinned",
    "WorkspaceBound": lambda e: (f"bound to workspace {short(e.workspace_id)}"
                                 + (f", build {short(e.build_id)}" if e.build_id else "")
                                 + (f", agent {short(e.agent_id)}" if e.agent_id else "")
                                 if e.workspace_id else "workspace binding cleared"),
    "SharingSet": lambda e: ("shared read-only with the organization" if e.shared else "no longer shared"),
    "LabelsSet": lambda e: "labels: " + (", ".join(f"{k}={v}" for k, v in e.labels.items()) or "(none)"),
    "TurnStarted": lambda e: (f"turn {short(e.turn_id)} started ({e.cause}): prompt #{e.prompt_message_id} "
                              f"{_text(e.messages)!r}; policy {_policy(e.tool_policy_before)} -> {_policy(e.tool_policy)}; "
                              f"{_resolution(e.model_resolution)}"),
    "MessageEdited": lambda e: (f"message {e.edited_message_id} edited: messages {e.deleted_message_ids} deleted"
                                + (f", queued {e.deleted_queued_message_ids} dropped" if e.deleted_queued_message_ids else "")),
    "PromptQueued": lambda e: (f"prompt queued #{e.prompt.queued_message_id} by {short(e.prompt.created_by)}: "
                               f"{_text([_as_msg(e.prompt)])!r}; prefix {len(e.prompt.hook_prefix)} message(s); "
                               f"policy {_policy(e.prompt.hook_allowed_tools)}"
                               + (f"; model {e.prompt.model_config_id}" if e.prompt.model_config_id else "")),
    "QueuedPromptDeleted": lambda e: f"queued prompt #{e.queued_message_id} deleted",
    "QueuedPromptMovedToHead": lambda e: f"queued prompt #{e.queued_message_id} moved to the head (position {e.position})",
    "QueuedPromptPromoted": lambda e: (f"queued prompt #{e.queued_message_id} promoted: turn {short(e.turn_id)}, "
                                       f"prompt #{e.prompt_message_id}; policy {_policy(e.tool_policy_before)} -> "
                                       f"{_policy(e.tool_policy)}; {_resolution(e.model_resolution)}"
                                       + (f"; reasoning effort {e.reasoning_effort}" if e.reasoning_effort else "")),
    "QueuedPromptEdited": lambda e: (f"queued prompt #{e.queued_message_id} edited: {_text([_as_msg(e)])!r}"
                                     + (f"; model {e.model_config_id}" if e.model_config_id else "")
                                     + (f"; reasoning effort {e.reasoning_effort}" if e.reasoning_effort else "")),
    "QueuedPromptEditBegun": lambda e: f"editing of queued prompt #{e.queued_message_id} begun",
    "QueuedPromptEditEnded": lambda e: f"editing of queued prompt #{e.queued_message_id} ended ({e.cause})",
    "ChatPaused": lambda e: f"paused at queued prompt #{e.queued_message_id} (under edit): nothing promoted",
    "ChatResumed": lambda e: (f"resumed ({e.cause.replace('_', ' ')}"
                              + (f" #{e.queued_message_id}" if e.queued_message_id is not None else "")
                              + f") -> {e.status}"),
    "InvalidStateReconciled": lambda e: (f"invalid state reconciled (was {e.status_before}"
                                         + (", archived" if e.archived_before else "")
                                         + f"): {e.last_error.message}"),
    "ToolCallsCanceled": lambda e: (f"{'dynamic ' if e.dynamic_only else ''}tool calls canceled ({e.reason}): "
                                    + ", ".join(_results(e.messages))),
    "InterruptRequested": lambda e: f"interrupt requested ({e.reason})",
    "InterruptionFinished": lambda e: "interruption finished" + (f"; {_msgs(e.messages)}" if e.messages else ""),
    "TurnFinished": lambda e: "turn finished" + (f"; {_msgs(e.messages)}" if e.messages else ""),
    "TurnFailed": lambda e: f"turn failed: {e.last_error.message}" + (f" ({e.last_error.kind})" if e.last_error.kind else ""),
    "IdleChatFailed": lambda e: f"idle chat failed: {e.last_error.message}",
    "RequiresActionEntered": lambda e: f"waiting for client results of {', '.join(e.tool_call_ids)} until {iso(e.deadline)}",
    "ToolResultsSubmitted": lambda e: f"client tool results submitted; {_msgs(e.messages)}",
    "RequiresActionCanceled": lambda e: f"requires-action canceled ({e.reason})",
    "CompactionRequested": lambda e: "compaction requested",
    "ContextCleared": lambda e: "context cleared",
    "StepCommitted": lambda e: "step committed: " + _msgs(e.messages),
    "GenerationAttemptRecorded": lambda e: f"generation attempt {e.generation_attempt}",
    "RetryStateRecorded": lambda e: f"retry state recorded: {e.retry_state}",
    "ChatEnded": lambda e: "chat ended" + (f" (cascaded from {short(e.cascaded_from)})" if e.cascaded_from else "")
    + (f"; queued {e.deleted_queued_message_ids} dropped" if e.deleted_queued_message_ids else ""),
    "ArchivedSet": lambda e: ("archived" if e.archived else "unarchived")
    + (f" (cascaded from {short(e.cascaded_from)})" if e.cascaded_from else ""),
    "ChatAcquired": lambda e: f"acquired by worker {short(e.worker_id)} (runner {short(e.runner_id)})",
    "ChatAbandoned": lambda e: "ownership released",
    "OwnershipCleared": lambda e: f"ownership cleared: the idle chat resumed ({e.cause}); worker "
                                  f"{short(e.worker_id)} released, admission runs again",
    # catalogs
    "CatalogStarted": lambda e: f"catalog of organization {short(e.organization_id)} started",
    "MemberAdded": lambda e: f"member {short(e.user_id)} added",
    "MemberRemoved": lambda e: f"member {short(e.user_id)} removed",
    "ModelConfigCreated": lambda e: (f"model config {short(e.config.model_config_id)} created: {e.config.provider}/"
                                     f"{e.config.model}{'' if e.config.enabled else ' (disabled)'}"),
    "ModelConfigUpdated": lambda e: f"model config {short(e.config.model_config_id)} updated: {', '.join(e.changed)}",
    "ModelConfigDeleted": lambda e: f"model config {short(e.model_config_id)} deleted",
    "DefaultModelConfigChanged": lambda e: (f"default model {short(e.previous_model_config_id)} -> "
                                            f"{short(e.model_config_id)} ({e.reason})"),
    "ProviderSet": lambda e: f"provider {e.provider}: enabled={e.enabled}, credentials={e.credentials_available}",
    "AdminModelOverrideSet": lambda e: f"admin override for {e.context}: {short(e.model_config_id)}",
    "UserModelOverrideSet": lambda e: f"user {short(e.user_id)} override for {e.context}: {e.mode} {short(e.model_config_id)}",
    "DeploymentSettingsChanged": lambda e: f"deployment settings changed: {', '.join(e.changed)}",
    "ModelConfigClaimed": lambda e: f"model config id claimed by organization {short(e.organization_id)}",
    # tool-call executions
    "ToolCallExecutionOpened": lambda e: (f"tool call {e.tool_call_id} ({e.tool_name}) of message "
                                          f"{e.assistant_message_id} in chat {short(e.chat_id)} opened"),
    "ToolCallClaimed": lambda e: f"claim {e.claim_epoch}: {e.outcome}" + (" (background)" if e.background else ""),
    "ToolCallProcessRecorded": lambda e: (f"claim {e.claim_epoch} running as process {e.process_id}"
                                          if e.process_id else f"claim {e.claim_epoch} starting"),
    "ToolCallCancelRequested": lambda e: f"cancel requested: {e.reason}",
    "ToolCallDetached": lambda e: f"detached: process {e.process_id} spared ({e.reason})",
    "ToolCallResponseRecorded": lambda e: f"response recorded: status {e.response.status} ({e.response.content_type})",
    "ToolCallCanceled": lambda e: f"canceled ({e.outcome}; received={e.received})",
}


def _as_msg(prompt: Any) -> Any:
    from ledger.chat.values import Message

    return Message(message_id=0, role="user", parts=prompt.parts)


def _event_type(e: Any) -> str:
    return type(e).__name__


def timeline(events: Iterable[Any], upto: int | None = None) -> dict[str, Any]:
    """The audit of one stream (events in version order), up to stream version ``upto``."""
    events = list(events)
    if not events:
        raise LedgerError("stream_not_found", "stream has no events")
    cls = aggregate_class(events[0])
    evolve = cls.evolve
    state = None
    entries = []
    for e in events:
        if upto is not None and e.originator_version > upto:
            break
        state = evolve(state, e)
        entry = {
            "version": e.originator_version,
            "time": iso(e.timestamp),
            "type": _event_type(e),
            "topic": type(e).TOPIC,
            "actor": _s(e.actor),
            "idempotency_key": e.idempotency_key,
            "summary": summarize(e),
            "state": state_summary(state),
        }
        step = usage_total(getattr(e, "messages", None) or ())
        if step is not None:  # what this step's messages cost (the usage the worker reported with them)
            entry["usage"] = step
        entries.append(entry)
    out = {"stream_id": str(events[0].originator_id), "aggregate": aggregate_kind(cls),
           "version": entries[-1]["version"] if entries else 0, "events": entries}
    if cls.__name__ == "Chat":  # the chat's and each turn's totals, as of the version shown
        out["usage"] = usage_summary(events[:len(entries)])
    return out
