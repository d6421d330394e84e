"""``chat-ledger erase``, ``hold set|clear`` and ``retention set|run``: people's data (docs/privacy.md). Human forms
of ``erase_subject``, ``set_legal_hold`` and ``set_retention_policy`` (``apply`` takes the same commands as JSON),
and the retention run (``commands.protection``)."""

from __future__ import annotations

from typing import Any

import click

from commands.cli.context import Ctx, actor_opt, cell, emit_json, json_flag, key_opt, pass_ctx
from commands.handler import command_from_dict, execute


def _run(c: Ctx, command: dict[str, Any], as_json: bool, line: Any) -> None:
    """Run the command; print its result as JSON, or the line ``line(result)`` makes."""
    result = execute(c.app, command_from_dict({k: v for k, v in command.items() if v is not None
                                               or k == "content_days"}))
    if as_json:
        emit_json(result)
    else:
        click.echo(line(result))


@click.command()
@click.argument("user_id")
@click.option("--reason", required=True, help="Why (the request's basis): recorded with the erasure.")
@click.option("--org", default=None, help="Erase only the user's content in this organization's chats.")
@json_flag
@key_opt
@actor_opt
@pass_ctx
def erase(c: Ctx, user_id: str, reason: str, org: str | None, as_json: bool, idempotency_key: str | None,
          actor: str | None) -> None:
    """Erase a user's content: destroy their data keys (every chat's and conversation's, or --org's) and record
    it; their content reads [erased] from then on, and the views are rewritten."""
    org_id = c.org_id(org) if org else None
    _run(c, {"type": "erase_subject", "user_id": user_id, "reason": reason,
             "organization_id": None if org_id is None else str(org_id), "idempotency_key": idempotency_key,
             "actor": actor}, as_json,
         lambda r: f"erased user {r['user_id']}: {r['keys_destroyed']} keys destroyed, {len(r['streams'])} chats "
                   f"and conversations rewritten (recorded: {r['recorded']})")


@click.group()
def hold() -> None:
    """Legal holds: a held chat, user or organization is never erased (erasure and retention: legal_hold)."""


def _hold(c: Ctx, target: str, on: bool, reason: str, as_json: bool, key: str | None, actor: str | None) -> None:
    _run(c, {"type": "set_legal_hold", "target": target, "hold": on, "reason": reason, "idempotency_key": key,
             "actor": actor}, as_json,
         lambda r: f"{r['kind']} {r['target']}: {'on legal hold' if r['held'] else 'not held'} (v{r['version']}, "
                   f"recorded: {r['recorded']})")


def _hold_command(name: str, on: bool, doc: str) -> None:
    @hold.command(name, help=doc)
    @click.argument("target")
    @click.option("--reason", required=True, help="Why (recorded).")
    @json_flag
    @key_opt
    @actor_opt
    @pass_ctx
    def command(c: Ctx, target: str, reason: str, as_json: bool, idempotency_key: str | None,
                actor: str | None) -> None:
        _hold(c, target, on, reason, as_json, idempotency_key, actor)


_hold_command("set", True, "Put a chat, a user or an organization (an id) on legal hold.")
_hold_command("clear", False, "Clear a legal hold.")


@click.group()
def retention() -> None:
    """Retention: an organization's chats' content is erased some days after their last activity."""


@retention.command("set")
@click.argument("org")
@click.option("--content-days", required=True, help="Days after a chat's last activity its content is erased "
                                                    "('none': kept).")
@json_flag
@key_opt
@actor_opt
@pass_ctx
def retention_set(c: Ctx, org: str, content_days: str, as_json: bool, idempotency_key: str | None,
                  actor: str | None) -> None:
    """Set an organization's retention policy."""
    days: int | None = None if content_days.lower() == "none" else _days(content_days)
    _run(c, {"type": "set_retention_policy", "organization_id": str(c.org_id(org)), "content_days": days,
             "idempotency_key": idempotency_key, "actor": actor}, as_json,
         lambda r: f"organization {r['organization_id']}: content "
                   + ("kept" if r["content_days"] is None else f"erased {r['content_days']} days after last activity")
                   + f" (v{r['version']}, recorded: {r['recorded']})")


def _days(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a number of days (or 'none')", param_hint="--content-days")


@retention.command("run")
@click.option("--now", "now", default=None, metavar="TIME",
              help="Run as of this time (ISO 8601; default: now) — to rehearse what a later run will erase.")
@json_flag
@pass_ctx
def retention_run(c: Ctx, now: str | None, as_json: bool) -> None:
    """Erase the content of every chat past its organization's retention (held ones skipped); idempotent."""
    from commands.protection import run_retention

    from ledger.audit.timeline import parse_time
    from ledger.errors import LedgerError

    try:
        at = parse_time(now) if now is not None else None
    except LedgerError:
        raise click.BadParameter(f"{now!r} is not an ISO 8601 time", param_hint="--now") from None
    result = run_retention(c.app, c.backend, at)
    if as_json:
        emit_json(result)
        return
    for e in result["expired"]:
        click.echo(f"expired  chat {e['chat_id']} (org {e['organization_id']}, last activity "
                   f"{e['last_activity']}): {e['keys']} keys destroyed")
    for h in result["held"]:
        click.echo(f"held     chat {h['chat_id']}: " + ", ".join(f"{t['kind']} {t['target']}" for t in h["targets"]))
    click.echo(f"{len(result['expired'])} chats expired, {len(result['held'])} held, "
               f"{cell(result['organizations'])} organizations with content")
