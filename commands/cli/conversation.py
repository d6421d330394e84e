"""``chat-ledger conversation ...``: human forms of the Codex-style conversation commands, the
``conversations`` view (``status``) and ``show`` (boxes as the codec projects them, at any version)."""

from __future__ import annotations

import json
from typing import Any

import click

from commands import views
from commands.cli.context import Ctx, caught_up, emit_json, json_option, pass_ctx, print_rows
from commands.conversation import show_conversation
from commands.handler import command_from_dict, execute
from commands.queries import cut_version, stream_events

VIEW_COLUMNS = ("conversation_id", "status", "restartable", "box_count", "current_job", "pending_steer",
                "last_sequence", "version")


@click.group()
def conversation() -> None:
    """Codex-style conversations: boxes, rounds, stages, steering, stall and restart, recovery."""


def _run(c: Ctx, command: dict[str, Any], as_json: bool) -> None:
    if command["type"] != "conversation_start":  # an existing conversation: a unique prefix names it too
        command["conversation_id"] = str(c.conversation_id(command["conversation_id"]))
    result = execute(c.app, command_from_dict({k: v for k, v in command.items() if v is not None}))
    if as_json:
        emit_json(result)
        return
    keys = ("conversation_id", "status", "version", "job", "box_ids", "tool_calls", "outcome", "error", "steer",
            "committed", "queued")
    click.echo("  ".join(f"{k}={json.dumps(result[k]) if not isinstance(result[k], str) else result[k]}"
                         for k in keys if k in result and result[k] not in (None, [], {})))


_json = json_option()
_key = click.option("--idempotency-key", default=None)


@conversation.command("start")
@click.option("--id", "conversation_id", default=None, help="Mint the conversation id yourself.")
@click.option("--session", default=None, help="12-byte session as 24 hex characters (default: random).")
@_json
@_key
@pass_ctx
def start(c: Ctx, conversation_id: str | None, session: str | None, as_json: bool, idempotency_key: str | None) -> None:
    """Start a conversation."""
    _run(c, {"type": "conversation_start", "conversation_id": conversation_id, "session": session,
             "idempotency_key": idempotency_key}, as_json)


@conversation.command("arrive")
@click.argument("conversation_id")
@click.option("--user", "user_text", default=None, help="User text.")
@click.option("--system", "system_text", default=None, help="System text.")
@click.option("--tool-return", nargs=3, default=None, metavar="SESSION SEQUENCE RESULT",
              help="A tool return for call (SESSION, SEQUENCE).")
@click.option("--error", "is_error", is_flag=True, help="With --tool-return: the tool failed.")
@_json
@_key
@pass_ctx
def arrive(c: Ctx, conversation_id: str, user_text: str | None, system_text: str | None,
           tool_return: tuple[str, str, str] | None, is_error: bool, as_json: bool, idempotency_key: str | None) -> None:
    """External input: appended while idle, queued during a round."""
    if sum(x is not None for x in (user_text, system_text, tool_return)) != 1:
        raise click.UsageError("give exactly one of --user, --system, --tool-return")
    if user_text is not None:
        arrival: dict[str, Any] = {"type": "user", "text": user_text}
    elif system_text is not None:
        arrival = {"type": "system", "text": system_text}
    else:
        session, sequence, result = tool_return  # type: ignore[misc]
        arrival = {"type": "tool_return", "tool_call_id": {"session": session, "sequence": int(sequence)},
                   "result": result, "is_error": is_error}
    _run(c, {"type": "conversation_arrive", "conversation_id": conversation_id, "arrival": arrival,
             "idempotency_key": idempotency_key}, as_json)


def _simple(name: str, ctype: str, help: str, *options: Any) -> None:
    def callback(c: Ctx, conversation_id: str, as_json: bool, idempotency_key: str | None, **kw: Any) -> None:
        _run(c, {"type": ctype, "conversation_id": conversation_id, "idempotency_key": idempotency_key, **kw}, as_json)

    cmd: Any = pass_ctx(callback)
    for o in reversed(options):
        cmd = o(cmd)
    conversation.command(name, help=help)(_key(_json(click.argument("conversation_id")(cmd))))


_job = click.option("--job", type=int, required=True)
_simple("begin", "conversation_begin", "Begin an inference round: the job number and the boxes to send.")
_simple("steer", "conversation_prepare_steer", "Prepare a steer for the running job (the token to send).", _job)
_simple("fail", "conversation_fail", "The round failed.", _job, click.option("--message", required=True),
        click.option("--restartable-before-launch", is_flag=True))
_simple("restart", "conversation_restart", "Restart a restartable stall.")
_simple("recover", "conversation_recover", "Recover after a crash: idle, the whole transcript to resend.",
        click.option("--force", is_flag=True, help="Schedule an inference."))


@conversation.command("stage")
@click.argument("conversation_id")
@_job
@click.option("--text", default="", help="Agent text of the stage.")
@click.option("--call", "calls", multiple=True, metavar="NAME=JSON_ARGUMENTS", help="A tool call (repeat).")
@_json
@_key
@pass_ctx
def stage(c: Ctx, conversation_id: str, job: int, text: str, calls: tuple[str, ...], as_json: bool,
          idempotency_key: str | None) -> None:
    """Prepare a stage: its tool calls get ids only when the stage is accepted."""
    values = [{"type": "call", "name": spec.split("=", 1)[0], "arguments": spec.split("=", 1)[1] if "=" in spec else "{}"}
              for spec in calls]
    _run(c, {"type": "conversation_prepare_stage", "conversation_id": conversation_id, "job": job, "text": text,
             "values": values, "idempotency_key": idempotency_key}, as_json)


@conversation.command("commit-steer")
@click.argument("conversation_id")
@click.option("--token", required=True, help="The steer token JSON printed by `steer`.")
@_json
@pass_ctx
def commit_steer(c: Ctx, conversation_id: str, token: str, as_json: bool) -> None:
    """Commit a steer the provider confirmed (exactly once)."""
    _run(c, {"type": "conversation_commit_steer", "conversation_id": conversation_id, "steer": json.loads(token)}, as_json)


@conversation.command("complete")
@click.argument("conversation_id")
@_job
@click.option("--text", required=True, help="The agent's final text.")
@_json
@_key
@pass_ctx
def complete(c: Ctx, conversation_id: str, job: int, text: str, as_json: bool, idempotency_key: str | None) -> None:
    """Complete the round with the agent's final text."""
    _run(c, {"type": "conversation_complete", "conversation_id": conversation_id, "job": job, "text": text,
             "idempotency_key": idempotency_key}, as_json)


@conversation.command("status")
@click.argument("conversation_id", required=False)
@click.option("--status", "status_filter", type=click.Choice(["Running", "Quiet", "Stalled"]), default=None)
@_json
@pass_ctx
def status(c: Ctx, conversation_id: str | None, status_filter: str | None, as_json: bool) -> None:
    """The conversations view: status Running/Quiet/Stalled, restartable, boxes, job, steer, sequence."""
    rows = views.conversations(caught_up(c, ("conversations",)),
                               c.conversation_id(conversation_id) if conversation_id else None,
                               status_filter)
    print_rows(rows, as_json, VIEW_COLUMNS)


@conversation.command("show")
@click.argument("conversation_id")
@click.option("--at", "at_version", type=int, default=None, help="As it was at this stream version.")
@click.option("--as-of", "as_of", default=None, metavar="TIME",
              help="As it was at its last event recorded at or before TIME (ISO 8601).")
@_json
@pass_ctx
def show(c: Ctx, conversation_id: str, at_version: int | None, as_json: bool, as_of: str | None = None) -> None:
    """One conversation: its row, every box as the codec projects it, queued arrivals, the pending steer."""
    if at_version is not None and as_of is not None:
        raise click.UsageError("use --at or --as-of, not both")
    cid = c.conversation_id(conversation_id)
    if as_of is not None:
        at_version = cut_version(stream_events(c.app, cid), None, as_of)
    data = show_conversation(c.app, cid, at_version)
    if as_json:
        emit_json(data)
        return
    conv = data["conversation"]
    click.echo(f"conversation {conv['conversation_id']}  session {conv['session']}  v{conv['version']}")
    click.echo(f"  {conv['status']}  restartable={conv['restartable']}  job={conv['current_job']}  "
               f"steer pending={conv['pending_steer']}  last sequence={conv['last_sequence']}")
    for i, box in enumerate(data["boxes"], start=1):
        click.echo(f"  {i:>4} {json.dumps(box)}")
    if data["queued"]:
        click.echo(f"  queued: {json.dumps(data['queued'])}")
