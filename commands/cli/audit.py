"""``chat-ledger audit`` and ``chat-ledger explain``: a stream's timeline and the explanation of a tool call,
queued prompt or turn, by replay of the recorded events (``ledger.audit``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from commands.cli.context import (
    Ctx, as_of_options, cell, check_as_of, emit_json, json_option, output_option, pass_ctx, print_differences,
    write_output,
)
from commands.queries import audit_timeline, cut_version, stream_events
from ledger.chain import text as chain_text


@click.command()
@click.argument("stream_id")
@click.option("--at", "at_version", type=int, default=None, help="Stop at this stream version.")
@click.option("--as-of", "as_of", default=None, metavar="TIME",
              help="Stop at the last event recorded at or before TIME (ISO 8601, e.g. 2026-01-01T12:00:00Z).")
@json_option("JSON Lines: one JSON object per event.")
@click.option("--html", "html_file", is_flag=False, flag_value="", default=None, metavar="[FILE]",
              help="The audit as a self-contained HTML page, written to FILE or to --output (- or no FILE "
                   "and no --output: standard output).")
@output_option("the timeline (or the page)")
@click.option("--bundle", "bundle_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Write the evidence bundle of a chat to DIR: the audit page, the chat's events as stored, an "
                   "inclusion proof of each and the checkpoint (proof verify --bundle checks it offline).")
@click.option("--checkpoint", "checkpoint_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              metavar="FILE", help="With --bundle: the checkpoint to prove against (default: the latest published).")
@click.option("--key", "key_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), metavar="FILE",
              help="With --bundle: sign a checkpoint of the log now with this private key and prove against it.")
@pass_ctx
def audit(c: Ctx, stream_id: str, at_version: int | None, as_of: str | None, as_json: bool,
          html_file: str | None, output: str | None, bundle_dir: Path | None, checkpoint_file: Path | None,
          key_file: Path | None) -> None:
    """Timeline of a chat, catalog or conversation: each event, a summary and the state after it."""
    if at_version is not None and as_of is not None:
        raise click.UsageError("use --at or --as-of, not both")
    if html_file and output:
        raise click.UsageError("give the page's file once: --html FILE or --output FILE")
    if (checkpoint_file or key_file) and bundle_dir is None:
        raise click.UsageError("--checkpoint and --key go with --bundle")
    if bundle_dir is not None and (html_file is not None or as_json or output or at_version is not None or as_of):
        raise click.UsageError("--bundle writes its own page, of the chat as the checkpoint covers it: give it alone")
    sid = c.stream_id(stream_id)
    events = stream_events(c.app, sid)
    if bundle_dir is not None:
        _bundle(c, sid, events, bundle_dir, checkpoint_file, key_file)
        return
    upto = cut_version(events, at_version, as_of)
    data = audit_timeline(c.app, sid, events, upto)
    if html_file is not None:
        from commands.audit_page import audit_page

        target = html_file or output or "-"
        write_output(target, audit_page(c.app, sid, events, upto, data))
        if target != "-":
            click.echo(f"wrote {target} ({data['aggregate']} {data['stream_id']}, {len(data['events'])} events)")
        return
    lines: list[str] = []
    if as_json:
        lines = [json.dumps({"stream_id": data["stream_id"], "aggregate": data["aggregate"], **entry})
                 for entry in data["events"]]
    else:
        lines.append(f"{data['aggregate']} {data['stream_id']}: {len(data['events'])} events")
        lines.append(chain_text(data["chain"]))
        for entry in data["events"]:
            lines.append(f"v{entry['version']:<4} {entry['time']}  {entry['type']}")
            lines.append(f"      {entry['summary']}")
            lines.append(f"      -> {_state_line(data['aggregate'], entry['state'])}")
    write_output(output or "-", "\n".join(lines) + "\n")


def _bundle(c: Ctx, sid: Any, events: list[Any], directory: Path, checkpoint_file: Path | None,
            key_file: Path | None) -> None:
    from commands.audit_page import bundle_page
    from commands.evidence import EvidenceError, bundle_checkpoint, write_bundle

    if not events or audit_timeline(c.app, sid, events[:1], None)["aggregate"] != "chat":
        raise click.UsageError(f"{sid} is not a chat: a bundle is a chat's")
    try:
        made = write_bundle(c.app, sid, events[-1].originator_version, directory,
                            bundle_checkpoint(c.app, checkpoint_file, key_file), bundle_page(c.app, sid, events))
    except EvidenceError as e:
        raise click.ClickException(str(e)) from None
    later = f"; {made['events_after']} later events are not covered yet" if made["events_after"] else ""
    click.echo(f"wrote {directory}: chat {sid} versions 1-{made['versions']}, their inclusion proofs in the log of "
               f"{made['log_size']} events, the checkpoint and the page{later}")


def _state_line(kind: str, s: dict[str, Any]) -> str:
    if kind == "chat":
        q = ",".join(f"#{i}" for i in s["queue"]) or "-"
        policy = "all" if s["policy"] is None else ("[" + ",".join(s["policy"]) + "]")
        return (f"{s['execution_state']} status={s['status']} queue={q} policy={policy} "
                f"model={s['model'] or '-'} messages={s['messages']}"
                + (f" error={json.dumps(s['last_error']['message'])}" if s["last_error"] else ""))
    return " ".join(f"{k}={cell(v)}" for k, v in s.items())


@click.command()
@click.argument("chat_id")
@click.option("--tool-call", "tool_call", default=None, metavar="ID",
              help="A tool call: its provider id (e.g. call_1) or its execution UUID.")
@click.option("--queued-message", "queued_message", type=int, default=None, metavar="ID",
              help="A queued prompt's queued_message_id.")
@click.option("--turn", "turn", default=None, metavar="TURN_ID", help="A turn id.")
@as_of_options("Explain from the chat as it was at this stream version, with the other streams as they were then.")
@json_option("Print the explanation as one JSON object.")
@pass_ctx
def explain(c: Ctx, chat_id: str, tool_call: str | None, queued_message: int | None, turn: str | None,
            version: int | None, as_of: str | None, with_current_settings: bool, as_json: bool) -> None:
    """Explain a tool call, a queued prompt or a turn of a chat from its recorded facts."""
    from commands.explain import explain as explain_chat

    chosen = [x for x in (tool_call, queued_message, turn) if x is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --tool-call, --queued-message, --turn")
    check_as_of(version, as_of, with_current_settings)
    data = explain_chat(c.app, c.chat_id(chat_id), tool_call=tool_call, queued_message=queued_message, turn=turn,
                        version=version, as_of=as_of, with_current_settings=with_current_settings)
    if as_json:
        emit_json(data)
        return
    for line in data["explanation"]:
        click.echo(line)
    if with_current_settings and "differences" in data:
        click.echo("with today's settings:")
        print_differences(data["differences"], "then", "today")
