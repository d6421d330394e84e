"""CLI commands of the catalog (docs/commands.md, "CLI" ``models``, ``resolve-model``) and human forms of the catalog
and deployment commands."""

from __future__ import annotations

from typing import Any

import click

from commands import views
from commands.cli.context import (
    Ctx, actor_opt, as_of_options, caught_up, cell, check_as_of, emit_json, json_flag, key_opt, pass_ctx,
    print_differences, print_table,
)
from commands.handler import command_from_dict, execute
from commands.queries import resolve_chat_model
from ledger.catalog.values import ADMIN_CONTEXTS, CONTEXTS, EFFORT_SCALE, USER_CONTEXTS


@click.command()
@click.option("--org", required=True, help="Organization id (or a unique prefix).")
@click.option("--user", default=None, help="Add this user's personal overrides and effective models.")
@json_flag
@pass_ctx
def models(c: Ctx, org: str, user: str | None, as_json: bool) -> None:
    """The organization's model view: configs, default, admin overrides, members (and a user's view)."""
    org_id = c.org_id(org)
    user_id = c.user_id(user, org_id) if user else None
    view = views.organization_models(c.app, caught_up(c, ("org_models",)), org_id, user_id)
    if as_json:
        emit_json(view)
        return
    click.echo(f"organization {view['organization_id']}  default {view['default_model_config_id'] or '-'}")
    print_table(view["configs"], ("model_config_id", "provider", "model", "display_name", "enabled", "usable",
                                  "is_default", "context_limit", "compression_threshold"))
    if view["providers"]:
        click.echo("providers: " + ", ".join(
            f"{n} (enabled: {cell(p['enabled'])}, credentials: {cell(p['credentials_available'])})"
            for n, p in view["providers"].items()))
    click.echo("admin overrides:" + ("" if view["admin_overrides"] else " (none)"))
    for ctx, o in view["admin_overrides"].items():
        click.echo(f"  {ctx:<17} {cell(o['model_config_id'])}  usable: {cell(o['usable'])}")
    click.echo(f"members ({len(view['members'])}): " + (", ".join(view["members"]) or "(none)"))
    if user_id is not None:
        click.echo(f"personal overrides of {user_id} "
                   f"({'enabled' if view['personal_model_overrides_enabled'] else 'disabled'} on this deployment):"
                   + ("" if view["personal_overrides"] else " (none)"))
        for ctx, o in view["personal_overrides"].items():
            click.echo(f"  {ctx:<8} {o['mode']:<18} {o['model_config_id'] or '-'}  usable: {cell(o['usable'])}")
        click.echo("effective:")
        for ctx, e in view["effective"].items():
            detail = e.get("error") or f"{e['model_config_id']}  {e['source']}" + (f" ({e['reason']})" if e["reason"] else "")
            click.echo(f"  {ctx:<17} {detail}")


@click.command("resolve-model")
@click.argument("chat_id")
@click.option("--context", type=click.Choice(list(CONTEXTS)), default="root", show_default=True,
              help="What the model is for: the chat's turns (root), a subagent, title, compaction, advisor.")
@click.option("--user", default=None, help="Whose personal overrides apply (default: the chat's owner).")
@as_of_options("Resolve for the chat as it was at this stream version, with the catalog and the deployment as "
               "they were then.")
@json_flag
@pass_ctx
def resolve_model_cmd(c: Ctx, chat_id: str, context: str, user: str | None, version: int | None,
                      as_of: str | None, with_current_settings: bool, as_json: bool) -> None:
    """The model a chat's generation would run on (now, or as of --at/--as-of), and why. Records nothing."""
    check_as_of(version, as_of, with_current_settings)
    cid = c.chat_id(chat_id)
    row = resolve_chat_model(c.app, cid, context,
                             c.typed_ids({"user_id": user}, c.chat_scope(cid))["user_id"] if user else None,
                             version=version, as_of=as_of, with_current_settings=with_current_settings)
    if as_json:
        emit_json(row)
        return
    _print_resolved(row)
    at = row["facts_as_of"]
    if at["notification_id"] is not None:
        click.echo(f"  as of version {at['chat_version']} (log position {at['notification_id']})")
    if with_current_settings:
        click.echo("with today's catalog:")
        _print_resolved(row["current_settings"])
        print_differences(row["differences"], "then", "today")


def _print_resolved(row: dict[str, Any]) -> None:
    if "error" in row:
        click.echo(f"{row['context']}: no model resolves ({row['error']['code']}: {row['error']['message']})")
        return
    line = f"{row['context']}: {row['model_config_id']} ({row['provider']}/{row['model']})  source={row['source']}"
    if row["reason"]:
        line += f"  reason={row['reason']} (instead of {row['requested_model_config_id']})"
    line += f"  context_limit={row['context_limit']}  reasoning_effort={row['reasoning_effort'] or '-'}"
    click.echo(line)
    for ig in row.get("ignored") or []:
        click.echo(f"  ignored {ig['source']} {ig['model_config_id']}: {ig['reason']}")


# -- human forms of the catalog and deployment commands ---------------------------------------------------------

def run_catalog_command(c: Ctx, command: dict[str, Any], as_json: bool) -> None:
    # An admin override's model_config_id is required and null clears it; other nulls mean "not given".
    keep = "model_config_id" if command["type"] == "set_admin_model_override" else None
    command = {k: v for k, v in command.items() if v is not None or k == keep}
    result = execute(c.app, command_from_dict(command))
    if as_json:
        emit_json(result)
        return
    if "organization_id" not in result:
        click.echo(f"deployment v{result['version']}  recorded: {cell(result['recorded'])}  "
                   + "  ".join(f"{k}={cell(v)}" for k, v in result["settings"].items()))
        return
    line = (f"{result['organization_id']}  v{result['version']}  recorded: {cell(result['recorded'])}  "
            f"default={result['default_model_config_id'] or '-'}")
    if "model_config_id" in result:
        line += f"  model_config={result['model_config_id']}"
    click.echo(line)
    for ch in result["default_changes"]:
        click.echo(f"  default {ch['previous_model_config_id'] or '-'} -> {ch['model_config_id'] or '-'} ({ch['reason']})")


@click.group()
def catalog() -> None:
    """Human forms of the catalog commands (apply takes the same commands as JSON)."""


def _catalog_command(name: str, ctype: str, help: str, *params: Any, build: Any = None) -> None:
    def callback(c: Ctx, org: str, as_json: bool, idempotency_key: str | None, actor: str | None, **kw: Any) -> None:
        fields = build(**kw) if build else kw
        org_id = c.org_id(org)
        minted = {"model_config_id": fields.pop("model_config_id", None)} if ctype == "create_model_config" else {}
        run_catalog_command(c, {"type": ctype, "organization_id": str(org_id), "idempotency_key": idempotency_key,
                                **c.typed_ids({"actor": actor, **fields}, lambda: (org_id, ())), **minted},
                            as_json)  # create mints the model config's id: given whole

    cmd: Any = pass_ctx(callback)
    for p in reversed(params):
        cmd = p(cmd)
    cmd = actor_opt(key_opt(json_flag(click.option("--org", required=True, help="Organization id (or a unique prefix).")(cmd))))
    catalog.command(name, help=help)(cmd)


_user = click.option("--user", "user_id", required=True, help="User id (or a unique prefix of a member).")
_model_id = click.option("--model-config", "model_config_id", required=True, help="Model config id (or a unique prefix).")
_effort = click.option("--reasoning-effort", type=click.Choice(list(EFFORT_SCALE)), default=None)


def _efforts(effort_default: str | None, effort_max: str | None, **kw: Any) -> dict[str, Any]:
    if effort_default or effort_max:
        kw["reasoning_effort"] = {"default": effort_default, "max": effort_max}
    return kw


def _create(default: bool, disabled: bool, **kw: Any) -> dict[str, Any]:
    return _efforts(is_default=default or None, enabled=False if disabled else None, **kw)


def _admin(clear: bool, model_config_id: str | None, **kw: Any) -> dict[str, Any]:
    if clear == bool(model_config_id):
        raise click.UsageError("give --model-config or --clear")
    return {"model_config_id": None if clear else model_config_id, **kw}


def _update(enable: bool | None, default: bool | None, **kw: Any) -> dict[str, Any]:
    return _efforts(enabled=enable, is_default=default, **kw)


_catalog_command("add-member", "add_organization_member", "Add a member to the organization.", _user)
_catalog_command("remove-member", "remove_organization_member", "Remove a member from the organization.", _user)
_catalog_command(
    "create-model", "create_model_config", "Create a model config (the first one becomes the default).",
    click.option("--model-config", "model_config_id", default=None, help="Mint the id yourself."),
    click.option("--provider", required=True), click.option("--model", required=True),
    click.option("--display-name", default=None), click.option("--context-limit", type=int, required=True),
    click.option("--compression-threshold", type=int, default=None),
    click.option("--default", is_flag=True, help="Make it the organization's default."),
    click.option("--disabled", is_flag=True, help="Create it disabled."),
    click.option("--effort-default", type=click.Choice(list(EFFORT_SCALE)), default=None),
    click.option("--effort-max", type=click.Choice(list(EFFORT_SCALE)), default=None),
    build=_create)
_catalog_command(
    "update-model", "update_model_config", "Change fields of a model config.", _model_id,
    click.option("--provider", default=None), click.option("--model", default=None),
    click.option("--display-name", default=None), click.option("--context-limit", type=int, default=None),
    click.option("--compression-threshold", type=int, default=None),
    click.option("--enable/--disable", "enable", default=None),
    click.option("--default/--not-default", "default", default=None),
    click.option("--effort-default", type=click.Choice(list(EFFORT_SCALE)), default=None),
    click.option("--effort-max", type=click.Choice(list(EFFORT_SCALE)), default=None),
    build=_update)
_catalog_command("delete-model", "delete_model_config", "Delete a model config.", _model_id)
_catalog_command("set-default", "set_default_model_config", "Make a usable model config the default.", _model_id)
_catalog_command("set-provider", "set_provider", "Enable or disable a provider, or mark its credentials.",
                 click.option("--provider", required=True),
                 click.option("--enable/--disable", "enabled", default=None),
                 click.option("--credentials/--no-credentials", "credentials_available", default=None))
_catalog_command("admin-override", "set_admin_model_override", "Set (or --clear) an admin model override.",
                 click.option("--context", type=click.Choice(list(ADMIN_CONTEXTS)), required=True),
                 click.option("--model-config", "model_config_id", default=None),
                 click.option("--clear", is_flag=True), _effort, build=lambda **kw: _admin(**kw))
_catalog_command("user-override", "set_user_model_override", "Set a user's personal model override.", _user,
                 click.option("--context", type=click.Choice(list(USER_CONTEXTS)), required=True),
                 click.option("--mode", type=click.Choice(["chat_default", "model", "deployment_default"]),
                              required=True),
                 click.option("--model-config", "model_config_id", default=None), _effort)


@click.group()
def deployment() -> None:
    """Deployment-wide settings."""


@deployment.command("set")
@click.option("--personal-overrides/--no-personal-overrides", "personal_model_overrides_enabled", default=None)
@click.option("--advisor/--no-advisor", "advisor_enabled", default=None)
@click.option("--advisor-max-uses", "advisor_max_uses_per_turn", type=int, default=None)
@click.option("--advisor-max-output-tokens", "advisor_max_output_tokens", type=int, default=None)
@json_flag
@key_opt
@actor_opt
@pass_ctx
def deployment_set(c: Ctx, as_json: bool, idempotency_key: str | None, actor: str | None, **kw: Any) -> None:
    """Change deployment settings (personal model overrides, advisor limits)."""
    run_catalog_command(c, {"type": "set_deployment_settings", "idempotency_key": idempotency_key,
                            "actor": actor, **kw}, as_json)
