"""CLI: ``init``, ``apply`` (JSONL commands, docs/commands.md, "Results"), the human ``chat ...`` forms and ``show``."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import click

from commands.cli.context import Ctx, actor_opt, cell, emit_json, json_flag, key_opt, pass_ctx, tool_policy
from commands.handler import apply_lines, command_from_dict, execute
from commands.queries import shown_chat
from ledger.store import redact


@click.command()
@json_flag
@pass_ctx
def init(c: Ctx, as_json: bool) -> None:
    """Create the tables (and the PostgreSQL schema) if missing; link the streams recorded before hash
    chains (as ``events rehash`` does)."""
    from ledger.rehash import rehash, unhashed_rows

    app = c.app  # opening the application creates the tables (and adds the chain column to an old one)
    linked = rehash(app) if unhashed_rows(app) else None
    if as_json:
        emit_json({"ready": True, "db": redact(c.url), "linked": linked})
        return
    if linked is not None:
        click.echo(f"linked {linked['streams']} streams ({linked['events']} events) recorded before hash chains"
                   + (f"; {linked['broken']} streams have a broken chain (`events verify` names them)"
                      if linked["broken"] else ""))
    click.echo(f"ledger ready at {redact(c.url)}")


# -- apply ---------------------------------------------------------------------------------------------

@click.command()
@click.argument("file", type=click.File("rb"))
@click.option("--stop-on-error", is_flag=True, help="Stop at the first refused line.")
@click.option("--fresh-ids", is_flag=True,
              help="Give the file's chats, organizations and model configs new ids (as the demo does), so the same "
                   "file can be run again beside its first run.")
@json_flag
@pass_ctx
def apply(c: Ctx, file: Any, stop_on_error: bool, fresh_ids: bool, as_json: bool) -> None:
    """Execute a JSONL file of commands (FILE or - for stdin); one JSON result line per command, written as
    each command is run (its output is always JSON; --json makes its errors JSON too)."""
    lines = file
    if fresh_ids:
        from commands.tools.demo import fresh_ids as renamed

        lines, _ = renamed([line.decode("utf-8", "surrogateescape") for line in file])
        lines = [line.encode("utf-8", "surrogateescape") for line in lines]
    _, refused = apply_lines(c.app, lines, stop_on_error, out=emit_json)
    sys.exit(1 if refused else 0)


# -- human chat commands ----------------------------------------------------------------------------------

def run_command(c: Ctx, command: dict[str, Any], as_json: bool) -> None:
    command = {k: v for k, v in command.items() if v is not None}
    result = execute(c.app, command_from_dict(command))
    if as_json:
        emit_json(result)
        return
    line = f"{result['chat_id']}  {result['execution_state']}  status={result['status']}  v{result['version']}"
    if result.get("queue_length"):
        line += f"  queue={result['queue_length']}"
    if result.get("message_ids"):
        line += f"  messages={','.join(map(str, result['message_ids']))}"
    if "queued_message_id" in result:
        line += f"  queued={result['queued_message_id']}"
    if "promoted_queued_message_id" in result:
        line += f"  promoted={result['promoted_queued_message_id']}"
    click.echo(line)


@click.group()
def chat() -> None:
    """Human forms of the chat commands (apply takes the same commands as JSON)."""


def _chat_command(name: str, ctype: str, help: str, *params: Callable[[Any], Any],
                  build: Callable[..., dict[str, Any]] | None = None) -> None:
    def callback(c: Ctx, chat_id: str, as_json: bool, idempotency_key: str | None, actor: str | None,
                 **kw: Any) -> None:
        fields = build(**kw) if build else kw
        cid = c.chat_id(chat_id)
        run_command(c, {"type": ctype, "chat_id": str(cid), "idempotency_key": idempotency_key,
                        **c.typed_ids({"actor": actor, **fields}, c.chat_scope(cid))}, as_json)

    cmd: Any = pass_ctx(callback)
    for p in reversed(params):
        cmd = p(cmd)
    cmd = actor_opt(key_opt(json_flag(click.argument("chat_id")(cmd))))
    chat.command(name, help=help)(cmd)


@chat.command("create")
@click.option("--org", "organization_id", required=True, help="Organization id (or a unique prefix).")
@click.option("--owner", "owner_id", required=True, help="Owner user id (or a unique prefix).")
@click.option("--text", required=True, help="The first user message.")
@click.option("--chat-id", default=None, help="Mint the chat id yourself.")
@click.option("--parent", "parent_chat_id", default=None, help="Parent chat (makes a child chat).")
@click.option("--title", default=None)
@click.option("--model", "model_config_id", default=None, help="Model config id (or a unique prefix).")
@click.option("--allow-tool", "hook_allowed_tools", multiple=True, help="Initial hook tool policy (repeat).")
@click.option("--dynamic-tool", "dynamic_tools", multiple=True, help="Client-executed tool name (repeat).")
@click.option("--waiting", is_flag=True, help="Create it waiting instead of running.")
@json_flag
@key_opt
@actor_opt
@pass_ctx
def chat_create(c: Ctx, as_json: bool, idempotency_key: str | None, actor: str | None,
                hook_allowed_tools: tuple[str, ...], dynamic_tools: tuple[str, ...], waiting: bool,
                **kw: Any) -> None:
    """Create a chat with its first user message (--org, --owner, --parent, --model and --actor take unique
    prefixes too)."""
    org = c.org_id(kw["organization_id"])
    kw = c.typed_ids({**kw, "actor": actor, "organization_id": str(org)}, lambda: (org, ()))
    if kw.get("parent_chat_id"):
        kw["parent_chat_id"] = str(c.chat_id(kw["parent_chat_id"]))
    run_command(c, {"type": "create_chat", "idempotency_key": idempotency_key,
                    "hook_allowed_tools": list(hook_allowed_tools) or None,
                    "dynamic_tools": list(dynamic_tools),
                    "initial_status": "waiting" if waiting else "running", **kw}, as_json)


_text = click.option("--text", required=True, help="The user message.")
_model = click.option("--model", "model_config_id", default=None, help="Model config id (or a unique prefix).")
_by = click.option("--by", "created_by", default=None, help="User id sending it (or a unique prefix).")
_reason = click.option("--reason", default=None)


def _model_only(texts: tuple[str, ...]) -> list[dict[str, Any]]:
    """Hook prefix / suffix texts as model-only user messages."""
    return [{"role": "user", "visibility": "model", "parts": [{"type": "text", "text": t}]} for t in texts]


def _hooked(allow_tool: tuple[str, ...], prefix: tuple[str, ...], **kw: Any) -> dict[str, Any]:
    return {"hook_allowed_tools": list(allow_tool) or None, "prefix_messages": _model_only(prefix), **kw}


def _send(interrupt: bool, **kw: Any) -> dict[str, Any]:
    return _hooked(busy_behavior="interrupt" if interrupt else "queue", **kw)


_allow_tool = click.option("--allow-tool", multiple=True, help="Hook tool policy for this prompt (repeat).")
_prefix = click.option("--prefix", multiple=True, help="Hook prefix text (model-only user message; repeat).")


_chat_command("send", "send_message", "Send a user message (queued while the chat is busy).", _text, _by, _model,
              click.option("--interrupt", is_flag=True, help="Interrupt the running turn instead of queueing."),
              _allow_tool, _prefix,
              click.option("--max-queue-size", type=click.IntRange(min=1), default=None,
                           help="Refuse to queue beyond this many prompts (this send only)."),
              build=_send)
_chat_command("edit", "edit_message", "Edit a user message: later history is soft-deleted, the queue cleared.",
              click.option("--message-id", type=int, required=True), _text, _by, _model, _allow_tool, _prefix,
              build=_hooked)
_chat_command("edit-queued", "edit_queued_message",
              "Edit a queued prompt: new text or overrides, and/or begin (--editing) or end (--no-editing) an edit.",
              click.option("--queued-id", "queued_message_id", type=int, required=True),
              click.option("--text", default=None, help="The prompt's new text."), _model,
              click.option("--reasoning-effort", default=None, help="Reasoning-effort override."),
              click.option("--editing/--no-editing", "editing", default=None,
                           help="Begin or end editing (a prompt under edit is not promoted)."))
_chat_command("reconcile", "reconcile_invalid_state", "Put a chat found in an invalid state into the error state.",
              click.option("--error-message", default=None), click.option("--error-kind", default=None),
              click.option("--cancellation-reason", default=None),
              build=lambda error_message, error_kind, cancellation_reason: {
                  "error": {"message": error_message, **({"kind": error_kind} if error_kind else {})}
                  if error_message else None, "cancellation_reason": cancellation_reason})
_chat_command("interrupt", "interrupt", "Interrupt the running turn.", _reason)
_chat_command("promote", "promote_queued_message", "Promote a queued prompt.",
              click.option("--queued-id", "queued_message_id", type=int, required=True))
_chat_command("delete-queued", "delete_queued_message", "Delete a queued prompt.",
              click.option("--queued-id", "queued_message_id", type=int, required=True))
_chat_command("compact", "request_compaction", "Request a manual compaction.")
_chat_command("clear", "clear_context", "Clear the context (boundary messages).")
#: a worker command's fence (docs/commands.md, "Fences"): each option given is checked against the chat
_FENCE = (click.option("--fence-runner", default=None, metavar="RUNNER", help="Fence: the runner that owns the chat."),
          click.option("--fence-history", type=click.IntRange(min=0), default=None, metavar="N",
                       help="Fence: the chat's history version."),
          click.option("--fence-attempt", type=click.IntRange(min=0), default=None, metavar="N",
                       help="Fence: the chat's generation attempt."))


def _fenced(build: Callable[..., dict[str, Any]] | None = None) -> Callable[..., dict[str, Any]]:
    """A builder adding ``fence`` from the ``--fence-*`` options (none given: no fence)."""

    def fields(fence_runner: str | None = None, fence_history: int | None = None, fence_attempt: int | None = None,
               **kw: Any) -> dict[str, Any]:
        out = build(**kw) if build else kw
        fence = {k: v for k, v in (("runner_id", fence_runner), ("history_version", fence_history),
                                   ("generation_attempt", fence_attempt)) if v is not None}
        return {**out, "fence": fence} if fence else out

    return fields


_chat_command("finish-turn", "finish_turn", "Finish the running turn (worker).", *_FENCE, build=_fenced())
_chat_command("finish-interruption", "finish_interruption", "Finish an interruption (worker).", *_FENCE,
              build=_fenced())
_chat_command("finish-error", "finish_error", "Put a running chat in error (worker).",
              click.option("--message", "error_message", required=True), *_FENCE,
              build=_fenced(lambda error_message: {"error": {"message": error_message}}))
_chat_command("fail-idle", "fail_idle", "Put a waiting chat in error.", click.option("--error", required=True))
_chat_command("enter-requires-action", "enter_requires_action", "Wait for client tool results (worker).", *_FENCE,
              build=_fenced())
_chat_command("cancel-requires-action", "cancel_requires_action", "Cancel pending dynamic tool calls.", _reason)
_chat_command("record-attempt", "record_generation_attempt", "Record a generation attempt (worker).", *_FENCE,
              build=_fenced())
_chat_command("acquire", "acquire", "Take runner ownership.", click.option("--worker", "worker_id", required=True),
              click.option("--runner", "runner_id", required=True))
_chat_command("abandon", "abandon", "Release runner ownership.")
_chat_command("title", "set_title", "Set the title.", click.option("--title", required=True))
_chat_command("archive", "set_archived", "Archive a root chat and its family.", build=lambda: {"archived": True})
_chat_command("unarchive", "set_archived", "Unarchive a root chat and its family.", build=lambda: {"archived": False})
_chat_command("end", "end_chat", "End the chat (and its descendants).")
_chat_command("reply", "commit_step", "Commit an assistant text step (worker).",
              click.option("--text", required=True), *_FENCE,
              build=_fenced(lambda text: {"messages": [{"role": "assistant", "parts": [{"type": "text", "text": text}]}]}))
_chat_command("submit-results", "complete_requires_action", "Submit client tool results.",
              click.option("--result", "results", multiple=True, required=True, metavar="TOOL_CALL_ID=JSON"),
              click.option("--suffix", multiple=True, help="Hook suffix text (model-only user message; repeat)."),
              build=lambda results, suffix: {"results": [
                  {"tool_call_id": r.split("=", 1)[0], "output": r.split("=", 1)[1] if "=" in r else ""}
                  for r in results], "suffix_messages": _model_only(suffix)})


# -- reading -------------------------------------------------------------------------------------------

@click.command()
@click.argument("chat_id")
@click.option("--at", "at_version", type=int, default=None, help="The chat as it was at this stream version.")
@click.option("--as-of", "as_of", default=None, metavar="TIME", help="The chat as it was at TIME (ISO 8601).")
@json_flag
@pass_ctx
def show(c: Ctx, chat_id: str, at_version: int | None, as_json: bool, as_of: str | None = None) -> None:
    """Full state of one chat: messages (deleted ones included), queue, policy, unresolved tool calls."""
    if at_version is not None and as_of is not None:
        raise click.UsageError("use --at or --as-of, not both")
    cid = c.chat_id(chat_id)  # a bad id is refused before the ledger is opened
    data = shown_chat(c.app, cid, at_version, as_of)
    if as_json:
        emit_json(data)
        return
    ch = data["chat"]
    error = ch["last_error"]
    click.echo(f"chat {ch['chat_id']}  {json.dumps(ch['title'])}")
    click.echo(f"  state {ch['execution_state']} (status {ch['status']}{', archived' if ch['archived'] else ''})  "
               f"version {ch['version']}  turn {cell(ch['turn_id'])}")
    click.echo(f"  organization {ch['organization_id']}  owner {ch['owner_id']}  model {cell(ch['model_config_id'])}")
    click.echo(f"  tool policy: {tool_policy(ch['hook_allowed_tools'])}  last error: "
               + ("-" if not error else f"{error.get('message')}" + (f" ({error['kind']})" if error.get("kind") else "")))
    m, at = data["model"], data["facts_as_of"]
    when = "now" if at["notification_id"] is None else f"as of log position {at['notification_id']}"
    click.echo(f"  generation model ({when}): " + (f"{m['error']['code']}: {m['error']['message']}" if "error" in m else
               f"{m['model_config_id']} {m['provider']}/{m['model']} ({m['source']}"
               + (f", {m['reason']}" if m["reason"] else "") + f"), context limit {m['context_limit']}"))
    click.echo("messages:")
    for m in data["messages"]:
        flags = "".join(f for f, on in (("D", m["deleted"]), ("C", m["compressed"])) if on)
        click.echo(f"  {m['message_id']:>4} {m['role']:<9} {m['visibility']:<5} {flags:<2} {_summary(m['parts'])}")
    click.echo("queue:" + ("" if data["queue"] else " (empty)"))
    for q in data["queue"]:
        click.echo(f"  {q['position']:>4} #{q['queued_message_id']} {json.dumps(q['text'])}  "
                   f"tool policy: {tool_policy(q['hook_allowed_tools'])}")
    if data["unresolved"]:
        click.echo("unresolved tool calls:")
        for u in data["unresolved"]:
            ex = u.get("execution")
            click.echo(f"  {u['tool_call_id']} {u['tool_name']} ({u['kind']})"
                       + (f" [{ex['status']}, claim epoch {ex['claim_epoch']}]" if ex else ""))


def _summary(parts: list[dict[str, Any]]) -> str:
    out = []
    for p in parts:
        t = p.get("type")
        if t in ("text", "reasoning"):
            out.append(p["text"] if t == "text" else f"[reasoning] {p['text']}")
        elif t == "tool-call":
            out.append(f"[call {p['tool_name']} {p['tool_call_id']}]")
        elif t == "tool-result":
            out.append(f"[{'error' if p.get('is_error') else 'result'} {p['tool_name']} {p['tool_call_id']}: "
                       f"{json.dumps(p.get('result'))}]")
        else:
            out.append(f"[{t}]")
    text = " ".join(out).replace("\n", " ")
    return text if len(text) <= 100 else text[:99] + "…"
