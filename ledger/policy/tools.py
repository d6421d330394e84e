"""Tool-batch policy: the exclusive-tool rule (docs/chatd.md §5.2) and the advisor's eligibility and budget.

Exclusive tools (chatloop ``applyExclusiveToolPolicy``): a batch of at most one call always runs.
Otherwise, when any call of the batch names an exclusive tool, **no tool of the batch runs**: every call
gets a synthesized error result, in call order, which the runner commits in one step like real results.
The exclusive call (each one, when the same exclusive tool is called twice) gets "must be called alone";
every other call gets "skipped because <the first exclusive tool in the batch> must run alone".

Advisor (the advisor plan, PR 4 "single eligibility boolean"): one answer — enabled for the deployment
AND a root chat AND a usable model resolves for the ``advisor`` context — drives both whether the tool
is offered and whether the parent guidance is included, and makes ``advisor`` an exclusive tool. Uses are
capped per turn (``advisor_max_uses_per_turn``); a use is an ``advice`` result. ``limit_reached`` and
``error`` results are not uses (the reference refunds a failed or empty nested run). Every variant is a
non-error tool result whose body is ``{"type": ..., "remaining_uses": n, ...}``; a nested call's token
``usage`` rides on its ``advice`` or ``error`` body. The question is validated first (the advisor plan:
non-empty after trimming, at most ``ADVISOR_QUESTION_MAX_CHARS``): an invalid one is an error tool result
(the text of ``advisor_question``'s refusal), no nested call is made and no use is spent.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol, Sequence

import msgspec

from ledger.chat.messageinfo import MessageInfo
from ledger.chat.state import ChatState, active
from ledger.chat.values import MessageInput, OfferedTools, ToolResultPart, Usage
from ledger.errors import LedgerError

ADVISOR = "advisor"
#: Used when no deployment settings are given (the catalog's ``advisor_max_uses_per_turn`` replaces it).
DEFAULT_ADVISOR_MAX_USES_PER_TURN = 3
#: the longest question the parent agent may ask (chatadvisor ``advisorQuestionMaxRunes``; a Python
#: string's length counts code points, as runes do)
ADVISOR_QUESTION_MAX_CHARS = 2000

def exclusive_call_error(tool_name: str) -> str:
    """The error result of an exclusive call that shares its batch (exact reference text)."""
    return (f"{tool_name} must be called alone, without other tools in the same batch. "
            f"Retry with only the {tool_name} call.")


def skipped_call_error(blocking_tool: str) -> str:
    """The error result of a call skipped because an exclusive tool shares its batch (exact text)."""
    return (f"this tool was skipped because {blocking_tool} must run alone in its batch. "
            f"Retry your tool calls without {blocking_tool}, or call {blocking_tool} separately first.")


class _Call(Protocol):
    tool_call_id: str
    tool_name: str


class PolicyResult(msgspec.Struct, frozen=True, kw_only=True):
    """A synthesized error result for one call of a rejected batch (``result`` is the error text)."""

    tool_call_id: str
    tool_name: str
    result: str
    is_error: bool = True


def blocking_exclusive_tool(calls: Sequence[_Call], exclusive_tools: Iterable[str]) -> str | None:
    """The exclusive tool that rejects this batch (the first one in call order), or None if it may run."""
    exclusive = frozenset(exclusive_tools)
    if len(calls) <= 1 or not exclusive:
        return None
    for c in calls:
        if c.tool_name in exclusive:
            return c.tool_name
    return None


def apply_exclusive_policy(calls: Sequence[_Call], exclusive_tools: Iterable[str]) -> list[PolicyResult]:
    """[] when the batch may run; otherwise one error result per call, in call order (no tool runs)."""
    exclusive = frozenset(exclusive_tools)
    blocking = blocking_exclusive_tool(calls, exclusive)
    if blocking is None:
        return []
    return [
        PolicyResult(
            tool_call_id=c.tool_call_id, tool_name=c.tool_name,
            result=exclusive_call_error(c.tool_name) if c.tool_name in exclusive else skipped_call_error(blocking),
        )
        for c in calls
    ]


def offered_tools(state: ChatState, exclusive_tools: Sequence[str], advisor_offered: bool) -> OfferedTools:
    """The tool set a generation step offers: the hook policy in force, the chat's client (dynamic) tools
    that policy allows, the advisor when it is offered, and the exclusive tools of the batch rule."""
    policy = state.hook_allowed_tools
    return OfferedTools(
        allowed_tools=list(policy) if policy is not None else None,
        dynamic_tools=[t for t in state.dynamic_tools if policy is None or t in policy],
        advisor=advisor_offered, exclusive_tools=list(exclusive_tools))


def policy_result_messages(results: Sequence[PolicyResult]) -> list[MessageInput]:
    """The tool messages a runner commits (one ``commit_step``) for a rejected batch: one row per call."""
    return [
        MessageInput(role="tool", parts=[ToolResultPart(
            tool_call_id=r.tool_call_id, tool_name=r.tool_name, result=r.result, is_error=True)])
        for r in results
    ]


# -- advisor ---------------------------------------------------------------------------------------------

class AdvisorSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Deployment advisor switches plus whether a usable model resolves for the ``advisor`` context."""

    enabled: bool = False
    model_usable: bool = False
    max_uses_per_turn: int = DEFAULT_ADVISOR_MAX_USES_PER_TURN


class AdvisorStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The advisor as the next generation step sees it.

    ``eligible`` is the one answer; ``tool_offered`` and ``guidance_included`` always equal it.
    ``reason`` says why it is not eligible: ``disabled``, ``child_chat``, ``plan_mode`` or ``no_usable_model``
    (first failing condition, in that order). ``uses_this_turn`` counts ``advice`` results in the current turn;
    ``remaining_uses`` = max(0, max_uses_per_turn - uses_this_turn).
    """

    eligible: bool
    reason: str | None
    tool_offered: bool
    guidance_included: bool
    max_uses_per_turn: int
    uses_this_turn: int
    remaining_uses: int
    limit_reached: bool


def advisor_eligibility(settings: AdvisorSettings, root_chat: bool,
                        plan_mode: str | None = None) -> tuple[bool, str | None]:
    """(eligible, reason it is not). A plan turn never offers the advisor (chatd builds no advisor runtime
    when ``isPlanModeTurn``)."""
    if not settings.enabled:
        return False, "disabled"
    if not root_chat:
        return False, "child_chat"
    if plan_mode == "plan":
        return False, "plan_mode"
    if not settings.model_usable:
        return False, "no_usable_model"
    return True, None


def current_turn_start(messages: Sequence[MessageInfo]) -> int:
    """Index of the first row of the current turn: the row after the last active user row whose
    visibility is not ``model`` (hook model-context rows do not start a turn); 0 when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and m.visibility != "model" and active(m):
            return i + 1
    return 0


def advisor_uses_this_turn(state: ChatState, result_bodies: Mapping[str, Any] | None = None) -> int:
    """``advice`` results of the ``advisor`` tool in active tool rows of the current turn.

    ``result_bodies`` maps tool_call_id -> result body of advisor results (read from the chat's events,
    see ``advisor_result_bodies``). Without it only the message index is known, which records no result
    bodies: then every non-error advisor result counts, which can only overcount (``limit_reached`` and
    ``error`` results), so the cap is never exceeded.
    """
    msgs = state.messages
    uses = 0
    for m in msgs[current_turn_start(msgs):]:
        if m.role != "tool" or not active(m):
            continue
        for r in m.results:
            if r.tool_name != ADVISOR or r.is_error:
                continue
            if result_bodies is None:
                uses += 1
            else:
                body = result_bodies.get(r.tool_call_id)
                if isinstance(body, dict) and body.get("type") == "advice":
                    uses += 1
    return uses


def advisor_result_bodies(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """tool_call_id -> result body of every advisor tool result in message rows (``views.message_rows``)."""
    bodies: dict[str, Any] = {}
    for row in rows:
        for p in row.get("parts", ()):
            if p.get("type") == "tool-result" and p.get("tool_name") == ADVISOR:
                bodies[p["tool_call_id"]] = p.get("result")
    return bodies


def advisor_status(state: ChatState, settings: AdvisorSettings,
                   result_bodies: Mapping[str, Any] | None = None) -> AdvisorStatus:
    eligible, reason = advisor_eligibility(settings, state.parent_chat_id is None, state.plan_mode)
    cap = max(settings.max_uses_per_turn, 0)
    used = advisor_uses_this_turn(state, result_bodies)
    remaining = max(cap - used, 0)
    return AdvisorStatus(
        eligible=eligible, reason=reason, tool_offered=eligible, guidance_included=eligible,
        max_uses_per_turn=cap, uses_this_turn=used, remaining_uses=remaining, limit_reached=remaining == 0,
    )


def advisor_question(question: Any) -> str:
    """The parent agent's question, trimmed; ``advisor_question_invalid`` when it is not a non-empty
    string (after trimming) of at most ``ADVISOR_QUESTION_MAX_CHARS`` characters."""
    text = question.strip() if isinstance(question, str) else ""
    if not text:
        raise LedgerError("advisor_question_invalid", "question is required")
    if len(text) > ADVISOR_QUESTION_MAX_CHARS:
        raise LedgerError("advisor_question_invalid",
                          f"question must be at most {ADVISOR_QUESTION_MAX_CHARS} characters, got {len(text)}")
    return text


def advisor_result(remaining_uses: int, *, advice: str | None = None, error: str | None = None,
                   advisor_model: str | None = None, usage: Usage | None = None) -> dict[str, Any]:
    """The result body of one advisor call, given the uses left before it (all variants are non-errors).

    * no use left: ``{"type": "limit_reached", "remaining_uses": 0}`` (the nested call is not made);
    * the nested call failed or produced no text: ``{"type": "error", "error", "usage"?, "remaining_uses"}``
      — not a use, so ``remaining_uses`` is unchanged;
    * otherwise ``{"type": "advice", "advice", "advisor_model"?, "usage"?, "remaining_uses": remaining - 1}``.

    ``usage`` is the nested call's token usage (the ``Usage`` fields; left out when not given).
    """
    if remaining_uses <= 0:
        return {"type": "limit_reached", "remaining_uses": 0}
    if error is not None or not (advice or "").strip():
        body: dict[str, Any] = {"type": "error", "error": error or "advisor produced no text output",
                                "remaining_uses": remaining_uses}
    else:
        body = {"type": "advice", "advice": advice, "remaining_uses": remaining_uses - 1}
        if advisor_model:
            body["advisor_model"] = advisor_model
    if usage is not None:
        body["usage"] = msgspec.to_builtins(usage)
    return body


class AdvisorToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a runner commits for one ``advisor`` call: ``result`` (a body of ``advisor_result``, or the
    question's refusal text) and whether it is an error result."""

    result: Any
    is_error: bool = False


def advisor_tool_result(args: Mapping[str, Any], remaining_uses: int, *, advice: str | None = None,
                        error: str | None = None, advisor_model: str | None = None,
                        usage: Usage | None = None) -> AdvisorToolResult:
    """The tool result of an ``advisor`` call with arguments ``args`` (``{"question": ...}``): an error
    result with the refusal text when the question is invalid (no nested call, no use), else the
    ``advisor_result`` body of the nested call's outcome."""
    try:
        advisor_question(args.get("question"))
    except LedgerError as e:
        return AdvisorToolResult(result=e.message, is_error=True)
    return AdvisorToolResult(result=advisor_result(remaining_uses, advice=advice, error=error,
                                                   advisor_model=advisor_model, usage=usage))
