"""``chat-ledger next-action CHAT``: what the worker would do next for a chat, and why.

Runs the pure generation decision (``ledger.policy.generation.next_action``) on the chat as recorded.
Until the model catalog is wired in, the settings are defaults — compaction threshold 70%, the context
limit of the latest message that records one, the advisor disabled — which ``settings_source`` says;
options override them for what-if questions. With a recorded generation attempt the output includes the
retry decision a retryable failure of that attempt would get (``--retry-after`` adds the provider's hint).
"""

from __future__ import annotations

from typing import Any

import click
import msgspec

from commands.cli import emit_json, main, parse_uuid, pass_ctx
from commands.queries import load_chat
from commands.toolcalls import load_execution
from ledger.chat.state import ChatState
from ledger.chat.views import message_rows
from ledger.policy.generation import DEFAULT_THRESHOLD_PERCENT, MAX_STEPS, GenerationSettings, next_action
from ledger.policy.retry import retry_decision
from ledger.policy.tools import AdvisorSettings, advisor_result_bodies

DEFAULTS_NOTE = ("model catalog not wired yet: compaction threshold 70%, context limit from the latest "
                 "message's context_limit, advisor disabled")


def latest_context_limit(state: ChatState) -> int | None:
    """The context limit recorded on the latest non-deleted message that has one."""
    for m in reversed(state.messages):
        if not m.deleted and m.context_limit:
            return m.context_limit
    return None


def default_settings(state: ChatState, *, threshold: int | None = None, context_limit: int | None = None,
                     max_steps: int | None = None, stop_after: tuple[str, ...] = ()) -> tuple[GenerationSettings, dict[str, Any]]:
    """The settings next-action uses before the catalog lands, and how each was chosen."""
    recorded_limit = latest_context_limit(state)
    limit = context_limit if context_limit is not None else (recorded_limit or 0)
    settings = GenerationSettings(
        stop_after_tools=list(stop_after),
        max_steps=max_steps if max_steps is not None else MAX_STEPS,
        threshold_percent=threshold if threshold is not None else DEFAULT_THRESHOLD_PERCENT,
        context_limit=limit,
        advisor=AdvisorSettings(enabled=False),
    )
    overridden = threshold is not None or context_limit is not None or max_steps is not None or bool(stop_after)
    info = {
        "settings_source": "defaults+options" if overridden else "defaults",
        "settings_note": DEFAULTS_NOTE,
        "settings": {
            **msgspec.to_builtins(settings),
            "context_limit_source": "option" if context_limit is not None
            else ("latest_message" if recorded_limit else "none"),
        },
    }
    return settings, info


def next_action_report(app: Any, chat_id: Any, *, retry_after: float | None = None,
                       **overrides: Any) -> dict[str, Any]:
    """Everything ``next-action --json`` prints for one chat."""
    chat = load_chat(app, chat_id)
    state = chat.state
    settings, info = default_settings(state, **overrides)
    bodies = advisor_result_bodies(message_rows(app.stream(chat_id, lte=chat.version)))
    decision = msgspec.to_builtins(next_action(state, settings, advisor_result_bodies=bodies))
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
    agg = load_execution(app, parse_uuid(execution_id, "execution id"))
    if agg is None:
        return {"status": "unclaimed", "claim_epoch": 0}
    return {"status": agg.state.status, "claim_epoch": agg.state.claim_epoch}


@main.command("next-action")
@click.argument("chat_id")
@click.option("--retry-after", type=float, default=None, metavar="SECONDS",
              help="The provider's retry-after hint for the retry decision.")
@click.option("--threshold", type=click.IntRange(0, 100), default=None, help="Compaction threshold percent.")
@click.option("--context-limit", type=click.IntRange(min=0), default=None, help="The model's context limit (tokens).")
@click.option("--max-steps", type=click.IntRange(min=0), default=None, help="Steps per turn (0 = unlimited).")
@click.option("--stop-after", multiple=True, metavar="TOOL", help="A stop-after tool name (repeat).")
@click.option("--json", "as_json", is_flag=True, help="Print the decision as JSON.")
@pass_ctx
def next_action_cmd(c: Any, chat_id: str, retry_after: float | None, threshold: int | None,
                    context_limit: int | None, max_steps: int | None, stop_after: tuple[str, ...],
                    as_json: bool) -> None:
    """What the worker does next for a chat: action, finish reason, calls, tool policy, advisor, retry."""
    report = next_action_report(c.app, parse_uuid(chat_id), retry_after=retry_after, threshold=threshold,
                                context_limit=context_limit, max_steps=max_steps, stop_after=stop_after)
    if as_json:
        emit_json(report)
        return
    _print_report(report)


def _print_report(r: dict[str, Any]) -> None:
    click.echo(f"chat {r['chat_id']}  {r['execution_state']} (status {r['status']})"
               + ("" if r["runnable"] else "  [not running: the worker decides only for running chats]"))
    line = f"next action: {r['action']}"
    if r["finish_reason"]:
        line += f" ({r['finish_reason']})"
    if r["forced"]:
        line += " (manual request)"
    click.echo(line)
    for label, calls in (("call", r["calls"]), ("pending dynamic", r["pending_dynamic"])):
        for call in calls:
            ex = call["execution"]
            state = f"{ex['status']}, claim epoch {ex['claim_epoch']}" if ex else "no execution id"
            click.echo(f"  {label} {call['tool_call_id']} {call['tool_name']} ({call['kind']}) [{state}]")
    if r["policy_results"]:
        click.echo("  exclusive-tool rule: the batch does not run; each call gets an error result:")
        for p in r["policy_results"]:
            click.echo(f"    {p['tool_call_id']}: {p['result']}")
    if r["error"]:
        click.echo(f"  error ({r['error']['kind']}): {r['error']['message']}")
    allowed = r["allowed_tools"]
    click.echo(f"allowed tools: {'any' if allowed is None else ', '.join(allowed) or '(none)'}")
    a = r["advisor"]
    advisor = "eligible" if a["eligible"] else f"not eligible ({a['reason']})"
    click.echo(f"advisor: {advisor}; uses this turn {a['uses_this_turn']}/{a['max_uses_per_turn']}, "
               f"remaining {a['remaining_uses']}")
    cp = r["compaction"]
    pct = f"{cp['usage_percent']:.1f}%" if cp["usage_percent"] is not None else "unknown"
    click.echo(f"compaction: {cp['status']} (context {cp['context_tokens']} of {cp['context_limit'] or 'unknown'} "
               f"tokens = {pct}; threshold {cp['threshold_percent']}%)")
    click.echo(f"steps this turn: {r['step_count']} of {r['max_steps'] or 'unlimited'}")
    retry = r["retry"]
    if retry is not None:
        verdict = f"retry after {retry['delay']:g}s" if retry["retry"] else "no retry (finish with error)"
        click.echo(f"retry after a retryable failure of attempt {retry['attempt']}: {verdict}")
    click.echo(f"settings: {r['settings_source']} ({r['settings_note']})")
