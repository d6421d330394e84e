"""``chat-ledger next-action CHAT``: print what the worker would do next for a chat, and why
(``commands.next_action`` decides)."""

from __future__ import annotations

from typing import Any

import click

from commands.cli.context import as_of_options, check_as_of, emit_json, json_option, pass_ctx, print_differences
from commands.next_action import next_action_report


@click.command("next-action")
@click.argument("chat_id")
@click.option("--retry-after", type=float, default=None, metavar="SECONDS",
              help="The provider's retry-after hint for the retry decision.")
@click.option("--threshold", type=click.IntRange(0, 100), default=None, help="Compaction threshold percent.")
@click.option("--context-limit", type=click.IntRange(min=0), default=None, help="The model's context limit (tokens).")
@click.option("--max-steps", type=click.IntRange(min=0), default=None, help="Steps per turn (0 = unlimited).")
@click.option("--stop-after", multiple=True, metavar="TOOL", help="A stop-after tool name (repeat).")
@as_of_options("Decide on the chat as it was at this stream version, with the catalog, the deployment and "
               "the tool-call executions as they were then.")
@json_option("Print the decision as JSON.")
@pass_ctx
def next_action_cmd(c: Any, chat_id: str, retry_after: float | None, threshold: int | None,
                    context_limit: int | None, max_steps: int | None, stop_after: tuple[str, ...],
                    version: int | None, as_of: str | None, with_current_settings: bool, as_json: bool) -> None:
    """What the worker does next for a chat: action, finish reason, calls, tool policy, advisor, retry."""
    check_as_of(version, as_of, with_current_settings)
    report = next_action_report(c.app, c.chat_id(chat_id), retry_after=retry_after, version=version, as_of=as_of,
                                with_current_settings=with_current_settings, threshold=threshold,
                                context_limit=context_limit, max_steps=max_steps, stop_after=stop_after)
    if as_json:
        emit_json(report)
        return
    _print_report(report)
    if with_current_settings:
        cur = report["current_settings"]
        click.echo(f"with today's settings: {cur['action']}"
                   + (f" ({cur['finish_reason']})" if cur["finish_reason"] else ""))
        print_differences(report["differences"], "then", "today")


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
    m = r["settings"].get("model")
    model = f"; model {m['model_config_id']} ({m['source']}{', ' + m['reason'] if m['reason'] else ''})" if m else ""
    note = f" ({r['settings_note']})" if r["settings_note"] else ""
    click.echo(f"settings: {r['settings_source']}{note}{model}")
    at = r["facts_as_of"]
    click.echo("facts: as of now" if at["notification_id"] is None else
               f"facts: as of version {at['chat_version']} (log position {at['notification_id']})")
    f = r["fence"]
    click.echo("fence: " + ", ".join(f"{k} {v}" for k, v in f.items()))
