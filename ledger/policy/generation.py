"""The generation decision: what the worker does next for a running chat (docs/chatd.md §7).

``next_action(state, settings)`` reproduces chatd's ``decideGenerationAction`` and its history helpers
(``unresolvedToolCallsFromHistory``, ``historyHasStopAfterToolResult``, ``currentHistoryComplete``,
``currentTurnStepCount``, ``compactionStatusFromHistory``) and the preparation inputs it reads
(``latestPromptUsage`` over the prompt window, ``shouldCompactPromptUsage``). First match wins:

1. unresolved local calls -> ``execute_local_tools`` (dynamic calls are folded into the local batch when
   the batch holds an exclusive tool, so the exclusive-tool policy rejects the whole batch instead of the
   chat waiting for client results);
2. unresolved dynamic calls -> ``enter_requires_action``;
3. a manual compaction request with an uncompressed assistant message after the latest boundary ->
   ``compact`` (forced); otherwise the request is ignored (the turn's terminal transition clears it);
4. a non-error result of a stop-after tool in the current turn (in plan mode ``propose_plan`` too) -> ``finish_turn`` (``stop_after_tool``);
5. the last active message is an assistant message without a non-provider-executed tool call ->
   ``finish_turn`` (``complete``);
6. ``max_steps`` > 0 assistant rows in the current turn -> ``finish_turn`` (``max_steps``);
7. compaction status: needed -> ``compact``; after compaction or not needed -> ``generate_assistant``;
   still over the limit -> ``error`` (terminal, kind ``config``, the STILL_OVER text).

"Active" rows are neither deleted nor compressed. The current turn is the rows after the last active user
row whose visibility is not ``model`` (hook model-context rows do not start a turn).

Settings are plain values (``GenerationSettings``); ``ledger.policy.settings.generation_settings`` takes
them from the model catalog and the deployment: the resolved model's threshold and context limit, the
compaction context's limit, the advisor switches (stop-after and exclusive tool names are options).
Dynamic tool names come from the chat (``state.dynamic_tools``).
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence
from uuid import UUID

import msgspec

from ledger.catalog.values import DEFAULT_LIMITS
from ledger.chat.state import (
    ChatState,
    MessageInfo,
    active,
    has_compactable_history,
    latest_boundary_index,
    outstanding_tool_calls,
)
from ledger.chat.values import Usage
from ledger.chat.views import tool_call_execution_ids
from ledger.policy.tools import (
    ADVISOR,
    AdvisorSettings,
    AdvisorStatus,
    PolicyResult,
    advisor_status,
    apply_exclusive_policy,
    current_turn_start,
)

Action = Literal["execute_local_tools", "enter_requires_action", "compact", "finish_turn",
                 "generate_assistant", "error"]
FinishReason = Literal["stop_after_tool", "complete", "max_steps"]
CompactionStatus = Literal["needed", "after_compaction", "not_needed", "still_over_limit"]

#: chatd ``maxChatSteps``: the absolute upper bound on LLM round-trips per chat turn.
#: the steps a turn may take when the deployment sets no limit (``limits.max_steps_per_turn``)
MAX_STEPS = DEFAULT_LIMITS["max_steps_per_turn"]
DEFAULT_THRESHOLD_PERCENT = 70
STILL_OVER_LIMIT_MESSAGE = (
    "Conversation compaction could not reduce the history below the configured limit. "
    "Raise the compaction limit in settings, or start a new conversation."
)


class GenerationSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the decision needs besides the chat (chatd's prepared generation inputs).

    ``exclusive_tools`` None means "derived": ``{"advisor"}`` when the advisor is eligible, else none.
    ``context_limit`` is the resolved model's limit (the still-over-limit check uses it);
    ``compaction_context_limit`` is the trigger's limit (the stricter of the chat model's and the
    compaction override's), defaulting to ``context_limit``.
    """

    stop_after_tools: list[str] = []
    exclusive_tools: list[str] | None = None
    max_steps: int = MAX_STEPS
    #: the deployment's other limits a generation runs under (``limits.max_generation_retries``,
    #: ``limits.max_tool_output_bytes``), carried into what an attempt records
    max_generation_retries: int = DEFAULT_LIMITS["max_generation_retries"]
    max_tool_output_bytes: int = DEFAULT_LIMITS["max_tool_output_bytes"]
    compaction_enabled: bool = True
    threshold_percent: int = DEFAULT_THRESHOLD_PERCENT
    context_limit: int = 0
    compaction_context_limit: int | None = None
    advisor: AdvisorSettings = AdvisorSettings()


class PlannedCall(msgspec.Struct, frozen=True, kw_only=True):
    """An unresolved tool call of the latest assistant message. ``kind`` is what the chat declares it
    (``dynamic``: a client-executed tool), even when folded into a local batch. ``execution_id`` is the
    deterministic tool-call UUID (None for empty or repeated provider ids)."""

    tool_call_id: str
    tool_name: str
    kind: Literal["local", "dynamic"]
    args: dict[str, Any] = {}
    execution_id: UUID | None = None


class CompactionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The compaction inputs and the status the history gives (reported whatever the action is)."""

    status: CompactionStatus
    needed: bool
    context_tokens: int
    usage_percent: float | None
    threshold_percent: int
    context_limit: int


class GenerationError(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    kind: str


class NextAction(msgspec.Struct, frozen=True, kw_only=True):
    """The decision, with what the worker needs to carry it out.

    ``calls``: the local batch (``execute_local_tools``). ``pending_dynamic``: the dynamic calls the chat
    waits for (``enter_requires_action``), or those left waiting beside a local batch. ``policy_results``: when the
    batch breaks the exclusive-tool rule, the error result of each call (no tool runs). ``allowed_tools``:
    the chat's hook tool policy (None = no restriction). ``forced``: a manual compaction request.
    """

    action: Action
    finish_reason: FinishReason | None = None
    forced: bool = False
    calls: list[PlannedCall] = []
    pending_dynamic: list[PlannedCall] = []
    policy_results: list[PolicyResult] = []
    error: GenerationError | None = None
    allowed_tools: list[str] | None = None
    exclusive_tools: list[str] = []
    step_count: int = 0
    max_steps: int = MAX_STEPS
    advisor: AdvisorStatus
    compaction: CompactionInfo


# -- usage arithmetic (PREP shouldCompactPromptUsage) ---------------------------------------------------

def usage_empty(usage: Usage | None) -> bool:
    return usage is None or usage == Usage()


def context_tokens(usage: Usage | None) -> int:
    """input + cache_read + cache_creation (the positive ones); the total when none of those is > 0."""
    if usage is None:
        return 0
    parts = [t for t in (usage.input_tokens, usage.cache_read_tokens, usage.cache_creation_tokens) if t > 0]
    if parts:
        return sum(parts)
    return usage.total_tokens if usage.total_tokens > 0 else 0


def should_compact(usage: Usage | None, context_limit: int, threshold_percent: int) -> bool:
    """False when the threshold is >= 100 (automatic compaction off), the limit is unknown (<= 0) or
    the usage carries no context tokens; else ``tokens / limit * 100 >= threshold``."""
    if threshold_percent >= 100 or context_limit <= 0:
        return False
    tokens = context_tokens(usage)
    if tokens <= 0:
        return False
    return tokens / context_limit * 100 >= threshold_percent


def prompt_rows(state: ChatState) -> list[MessageInfo]:
    """The prompt window (chatd ``GetChatMessagesForPromptByChatID``): model-visible, non-deleted rows
    that are uncompressed system rows, or uncompressed rows after the latest compressed model-only row
    (the compaction summary or clear sentinel), or that row itself."""
    msgs = state.messages
    anchor = -1
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if m.compressed and not m.deleted and m.visibility == "model":
            anchor = i
            break
    return [
        m for i, m in enumerate(msgs)
        if m.visibility != "user" and not m.deleted
        and ((m.role == "system" and not m.compressed) or (not m.compressed and i > anchor) or i == anchor)
    ]


def latest_prompt_usage(state: ChatState) -> Usage | None:
    """The latest non-empty usage in the prompt window (PREP ``latestPromptUsage``): ``prompt_rows`` read from the
    end and stopped at the first row with usage — usually the last assistant row — instead of built whole (a
    long chat's audit page asks this at every step: it was quadratic in the chat's length). Rows after the anchor
    (the latest compressed model-only row) count, then the anchor, then before it only uncompressed system rows."""
    msgs = state.messages
    past_anchor = False
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        anchor = not past_anchor and m.compressed and not m.deleted and m.visibility == "model"
        if (m.visibility != "user" and not m.deleted
                and ((m.role == "system" and not m.compressed) or (not past_anchor and not m.compressed) or anchor)
                and not usage_empty(m.usage)):
            return m.usage
        past_anchor = past_anchor or anchor
    return None


def compaction_status(state: ChatState, needed: bool, threshold_percent: int,
                      context_limit: int) -> CompactionStatus:
    """HIST ``compactionStatusFromHistory``."""
    msgs = state.messages
    b = latest_boundary_index(state)
    after = [m for m in msgs[b + 1:] if active(m)] if b >= 0 else []
    if needed:
        if b < 0:
            return "needed"
        first = next((m for m in after if m.role == "assistant"), None)
        if first is not None and should_compact(first.usage, context_limit, threshold_percent):
            return "still_over_limit"
        return "needed" if after else "after_compaction"
    if b >= 0 and not after:
        return "after_compaction"
    return "not_needed"


# -- history helpers (HIST) ------------------------------------------------------------------------------

def current_turn(state: ChatState) -> list[MessageInfo]:
    """Active rows of the current turn."""
    msgs = state.messages
    return [m for m in msgs[current_turn_start(msgs):] if active(m)]


def step_count(state: ChatState) -> int:
    """Assistant rows in the current turn (HIST ``currentTurnStepCount``)."""
    return sum(1 for m in current_turn(state) if m.role == "assistant")


#: the tools whose result ends a plan turn (chatd's plan mode: the plan is presented for review)
PLAN_TURN_STOP_AFTER = ("propose_plan",)


def stop_after_tools(state: ChatState, configured: Sequence[str]) -> list[str]:
    """The stop-after tools of the chat's next step: the configured ones, and in plan mode ``propose_plan``."""
    names = list(configured)
    if state.plan_mode == "plan":
        names += [t for t in PLAN_TURN_STOP_AFTER if t not in names]
    return names


def has_stop_after_result(state: ChatState, stop_after_tools: Sequence[str]) -> bool:
    """A non-error result of a stop-after tool in a tool row of the current turn."""
    if not stop_after_tools:
        return False
    names = frozenset(stop_after_tools)
    return any(
        not r.is_error and r.tool_name in names
        for m in current_turn(state) if m.role == "tool" for r in m.results
    )


def history_complete(state: ChatState) -> bool:
    """The last active message is an assistant message with no non-provider-executed tool call."""
    last = next((m for m in reversed(state.messages) if active(m)), None)
    if last is None or last.role != "assistant":
        return False
    return not any(not c.provider_executed for c in last.calls)


def unresolved_calls(state: ChatState) -> tuple[list[PlannedCall], list[PlannedCall]]:
    """(local, dynamic) unresolved calls of the latest active assistant message (docs/chatd.md §5.1):
    provider-executed calls and calls with a result in a later active tool row are resolved."""
    calls = outstanding_tool_calls(state, count_own_results=False)
    if not calls:
        return [], []
    assistant = next(m for m in reversed(state.messages) if m.role == "assistant" and active(m))
    ids = tool_call_execution_ids(state.chat_id, assistant.message_id, [c.tool_call_id for c in assistant.calls])
    dynamic_names = frozenset(state.dynamic_tools)
    local: list[PlannedCall] = []
    dynamic: list[PlannedCall] = []
    for c in calls:
        kind: Literal["local", "dynamic"] = "dynamic" if c.tool_name in dynamic_names else "local"
        planned = PlannedCall(tool_call_id=c.tool_call_id, tool_name=c.tool_name, kind=kind,
                              args=dict(c.args), execution_id=ids.get(c.tool_call_id))
        (dynamic if kind == "dynamic" else local).append(planned)
    return local, dynamic


# -- the decision ----------------------------------------------------------------------------------------

def next_action(state: ChatState, settings: GenerationSettings | None = None, *,
                advisor_result_bodies: Mapping[str, Any] | None = None) -> NextAction:
    """What the worker does next (see the module docstring for the procedure).

    ``advisor_result_bodies`` (tool_call_id -> result body, from the chat's events) makes the advisor
    use count exact; without it the count is conservative (see ``tools.advisor_uses_this_turn``).
    """
    s = settings or GenerationSettings()
    advisor = advisor_status(state, s.advisor, advisor_result_bodies)
    if s.exclusive_tools is not None:
        exclusive = list(dict.fromkeys(s.exclusive_tools))
    else:
        exclusive = [ADVISOR] if advisor.eligible else []
    trigger_limit = s.compaction_context_limit if s.compaction_context_limit is not None else s.context_limit
    usage = latest_prompt_usage(state)
    needed = s.compaction_enabled and should_compact(usage, trigger_limit, s.threshold_percent)
    tokens = context_tokens(usage)
    compaction = CompactionInfo(
        status=compaction_status(state, needed, s.threshold_percent, s.context_limit), needed=needed,
        context_tokens=tokens, usage_percent=tokens / trigger_limit * 100 if trigger_limit > 0 else None,
        threshold_percent=s.threshold_percent, context_limit=trigger_limit,
    )
    common: dict[str, Any] = {
        "allowed_tools": list(state.hook_allowed_tools) if state.hook_allowed_tools is not None else None,
        "exclusive_tools": exclusive, "step_count": step_count(state), "max_steps": s.max_steps,
        "advisor": advisor, "compaction": compaction,
    }

    local, dynamic = unresolved_calls(state)
    if local:
        if dynamic and any(c.tool_name in exclusive for c in local):
            local, dynamic = local + dynamic, []
        return NextAction(action="execute_local_tools", calls=local, pending_dynamic=dynamic,
                          policy_results=apply_exclusive_policy(local, exclusive), **common)
    if dynamic:
        return NextAction(action="enter_requires_action", pending_dynamic=dynamic, **common)
    if state.compaction_requested_at is not None and has_compactable_history(state):
        return NextAction(action="compact", forced=True, **common)
    if has_stop_after_result(state, stop_after_tools(state, s.stop_after_tools)):
        return NextAction(action="finish_turn", finish_reason="stop_after_tool", **common)
    if history_complete(state):
        return NextAction(action="finish_turn", finish_reason="complete", **common)
    if s.max_steps > 0 and common["step_count"] >= s.max_steps:
        return NextAction(action="finish_turn", finish_reason="max_steps", **common)
    if compaction.status == "needed":
        return NextAction(action="compact", **common)
    if compaction.status == "still_over_limit":
        return NextAction(action="error", error=GenerationError(message=STILL_OVER_LIMIT_MESSAGE, kind="config"),
                          **common)
    return NextAction(action="generate_assistant", **common)
