"""CLI read commands on the materialized views, and ``projections status|catch-up|rebuild|follow|prune``.

The queries are the service layer's (``commands.views``); this module parses options and prints. Every
query catches up the views it reads first, so the CLI always shows what has been recorded. A progress bar
appears on a terminal when there is more than a moment's work; piped output stays quiet.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import click
import msgspec

from commands import views
from commands.cli.context import STATUS_COLUMNS, Ctx, caught_up, emit_json, parse_uuid, pass_ctx, print_rows, progress_bar
from ledger.errors import LedgerError
from projections import Follower, status

#: ``--batch-size`` of ``projections catch-up`` and ``rebuild``
batch_size_option = click.option(
    "--batch-size", type=click.IntRange(1, 100_000), default=500, show_default=True,
    help="Notifications per transaction. Larger batches rebuild logs of many chats recorded at once much "
         "faster (fewer rewrites of each chat's rows); a crash loses at most one batch of work.")


@click.command("status")
@click.argument("chat_id", required=False)
@click.option("--org", default=None, help="Only this organization's chats.")
@click.option("--status", "status_filter", default=None,
              type=click.Choice(["waiting", "running", "interrupting", "requires_action", "error", "paused"]))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
def status_cmd(c: Ctx, chat_id: str | None, org: str | None, status_filter: str | None, as_json: bool) -> None:
    """Chat status (the chat_status view): one chat, or every chat (filters --org, --status)."""
    rows = views.chat_status(caught_up(c, ("chat_views",)), parse_uuid(chat_id) if chat_id else None,
                             parse_uuid(org, "organization id") if org else None, status_filter)
    print_rows(rows, as_json, STATUS_COLUMNS)


@click.command()
@click.argument("chat_id", required=False)
@click.option("--org", default=None, help="Only this organization's chats.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
def unresolved(c: Ctx, chat_id: str | None, org: str | None, as_json: bool) -> None:
    """Unresolved tool calls of each chat's latest assistant message (the unresolved_tool_calls view)."""
    rows = views.unresolved(caught_up(c, ("chat_views",)), parse_uuid(chat_id) if chat_id else None,
                            parse_uuid(org, "organization id") if org else None)
    print_rows(rows, as_json, ("chat_id", "tool_call_id", "tool_name", "kind", "since"))


@click.command()
@click.argument("chat_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
def queue(c: Ctx, chat_id: str, as_json: bool) -> None:
    """Queued prompts of a chat, head first (the chat_queue view)."""
    rows = views.chat_queue(caught_up(c, ("chat_views",)), parse_uuid(chat_id))
    print_rows(rows, as_json, ("queued_message_id", "position", "text", "hook_allowed_tools", "created_by"))


# -- projections ----------------------------------------------------------------------------------

@click.group()
def projections() -> None:
    """Projection positions and lag; catch up; rebuild (in place or blue/green); follow live."""


def _selected(c: Ctx, name: str | None) -> list[Any]:
    ps = views.all_projections(c.app)
    if name is None:
        return ps
    chosen = [p for p in ps if p.name == name]
    if not chosen:
        raise click.BadParameter(f"unknown projection {name!r} (one of {', '.join(p.name for p in ps)})")
    return chosen


@projections.command("status")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def projections_status(c: Ctx, as_json: bool) -> None:
    """Each projection's position, the head of the log, the lag in events and the live version; a failed
    projection's event, a rebuild running, and the builds beside the live one."""
    statuses = status(c.app, views.all_projections(c.app), c.backend)
    rows = [msgspec.to_builtins(s) for s in statuses]
    print_rows(rows, as_json, ("projection", "live_version", "version", "position", "head", "lag", "state"))
    if as_json:
        return
    for s in statuses:
        if s.error:
            click.echo(f"{s.projection}: FAILED: {s.error}")
        if s.rebuilding:
            click.echo(f"{s.projection}: {s.rebuilding.purpose} running: {s.rebuilding.describe()}")
        for b in s.other_builds:
            what = {"building": f"being built by {b.holder.describe() if b.holder else 'a rebuild'}",
                    "previous": "the previous live build, kept after a switch",
                    "leftover": "left by a rebuild that did not switch (killed, or refused for a diff)"}[b.state]
            click.echo(f"{s.projection}: v{b.version} at {b.position}: {what}"
                       + ("" if b.state == "building" else "; `projections prune` drops it"))


@projections.command("catch-up")
@click.argument("name", required=False)
@batch_size_option
@click.option("--wait", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Seconds to wait for another writer of a build (a rebuild) before giving up on it.")
@pass_ctx
def projections_catch_up(c: Ctx, name: str | None, batch_size: int, wait: float) -> None:
    """Bring projections (default: all) up to the head of the log. A projection that fails does not stop
    the others; the command then exits 1."""
    backend, failed = c.backend, []
    for p in _selected(c, name):
        try:
            with progress_bar(f"catching up {p.name}", views.lag(c.app, p, backend)) as progress:
                n = views.catch_up_one(c.app, p, backend, batch_size, progress, wait=wait)
        except LedgerError as e:
            failed.append(e)
            click.echo(f"{p.name}: not caught up ({e.code})")
            continue
        click.echo(f"{p.name}: {n} events applied")
    if failed:  # one error line on stderr, as for every command: the first failure, and how many there were
        raise failed[0] if len(failed) == 1 else LedgerError(
            failed[0].code, f"{len(failed)} projections failed; first: {failed[0].message}")


@projections.command("rebuild")
@click.argument("name", required=False)
@click.option("--blue-green", is_flag=True, help="Build the next version beside the live one, compare, then switch.")
@click.option("--accept-diff", is_flag=True, help="With --blue-green: switch even when the new version differs.")
@batch_size_option
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Processes that fold the streams of a stream-wise projection (chat_views, conversations) "
                   "[default: the number of CPUs]. org_models is always built in log order.")
@click.option("--log-order", is_flag=True,
              help="Build every projection in log order (exact at each committed position), not stream by stream.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def projections_rebuild(c: Ctx, name: str | None, blue_green: bool, accept_diff: bool, batch_size: int,
                        workers: int | None, log_order: bool, as_json: bool) -> None:
    """Rebuild projections (default: all) from the first event. A rebuild of the same projection already
    running stops this one (projection_busy); builds left by earlier rebuilds are dropped first."""
    backend, refused = c.backend, False
    for p in _selected(c, name):
        with progress_bar(f"rebuilding {p.name}", c.app.head()) as progress:
            result = views.rebuild_one(c.app, p, backend, blue_green=blue_green, accept_diff=accept_diff,
                                       batch_size=batch_size, progress=progress,
                                       streamwise=False if log_order else None,
                                       workers=workers or os.cpu_count() or 1)
        in_place = result.mode == "in_place"
        refused = refused or not (result.switched or in_place)
        if as_json:
            emit_json(msgspec.to_builtins(result))
            continue
        how = f"stream-wise, {result.workers} worker{'s' if result.workers > 1 else ''}" if result.streamwise else "log order"
        line = f"{p.name}: v{result.to_version} built from {result.events} events ({result.mode}, {how})"
        if result.diff is not None:
            d = result.diff
            verdict = "equal" if d.equal else f"{d.diff_rows} rows differ"
            line += f"; diff with v{result.from_version}: {verdict}, digest {d.digest[:12]}"
        if in_place:
            line += "; live"
        else:
            line += "; switched" if result.switched else "; NOT switched (differs from the live version: --accept-diff to switch)"
        click.echo(line)
        if result.diff is not None and not result.switched:
            for sample in result.diff.samples:
                click.echo(f"    {msgspec.json.encode(sample).decode()}")
    if refused:
        sys.exit(1)


@projections.command("follow")
@click.option("--poll", "poll_interval", type=float, default=1.0, show_default=True, help="Polling interval (s).")
@click.option("--for", "duration", type=float, default=None, help="Stop after this many seconds.")
@batch_size_option
@pass_ctx
def projections_follow(c: Ctx, poll_interval: float, duration: float | None, batch_size: int) -> None:
    """Keep every projection caught up until interrupted (LISTEN/NOTIFY on PostgreSQL, plus polling).

    A projection being rebuilt is skipped until the rebuild is done. One that cannot apply an event is
    reported (here and in `projections status`) and no longer followed; the others go on, and the command
    exits 1 when it ends."""
    app, backend = c.app, c.backend
    ps = views.all_projections(app)
    stop = threading.Event()
    failure: list[BaseException] = []

    def failed(p: Any, e: BaseException) -> None:
        click.echo(f"error: projection_error: no longer following {p.name}: {e}", err=True)

    def run() -> None:
        try:
            follower.run(stop)
        except BaseException as e:  # reported by the main thread
            failure.append(e)
            stop.set()

    follower = Follower(app, ps, backend, poll_interval=poll_interval, batch_size=batch_size, on_failure=failed)
    worker = threading.Thread(target=run, name="projections-follow", daemon=True)
    worker.start()
    started = time.monotonic()
    tty = sys.stderr.isatty()
    try:
        while not stop.wait(0.5):
            if duration is not None and time.monotonic() - started >= duration:
                break
            if tty:
                line = "  ".join(f"{s.projection} {s.position}/{s.head}" for s in status(app, ps, backend))
                click.echo(f"\r{line}", nl=False, err=True)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        worker.join(timeout=30)
        if tty:
            click.echo("", err=True)
    if failure:
        raise LedgerError("projection_error", f"follow stopped: {failure[0]}")
    if follower.failed:
        raise LedgerError("projection_error", "follow ended; not followed since they failed: "
                          + "; ".join(str(e) for e in follower.failed.values()))


@projections.command("prune")
@click.argument("name", required=False)
@pass_ctx
def projections_prune(c: Ctx, name: str | None) -> None:
    """Drop the builds beside the live one (left by killed or refused blue/green rebuilds, or the previous
    live build kept after a switch) of projections (default: all). Builds being written are kept."""
    for p in _selected(c, name):
        dropped = views.prune_one(p, c.backend)
        click.echo(f"{p.name}: " + (f"dropped {', '.join(f'v{v}' for v in dropped)}" if dropped else "nothing to drop"))
