"""CLI read commands on the materialized views, and ``projections status|catch-up|rebuild|follow|prune``.

The queries are the service layer's (``commands.views``); this module parses options and prints. Every
query catches up the views it reads first, so the CLI always shows what has been recorded. A progress bar
appears on a terminal when there is more than a moment's work; piped output stays quiet.
"""

from __future__ import annotations

import textwrap

import os
import signal
import sys
import threading
import time
from typing import Any

import click
import msgspec

from commands import views
from commands.cli.context import (
    STATUS_COLUMNS, TABLE_WIDTH, Ctx, caught_up, emit_json, json_lines_flag, json_option, pass_ctx, print_rows, print_table, progress_bar,
)
from ledger.chat.state import state_legend
from ledger.errors import LedgerError
from projections import Follower, status

PROJECTION_NAMES = ("chat_views", "conversations", "org_models", "search", "usage")


def _complete_projection(_ctx: Any, _param: Any, incomplete: str) -> list[str]:
    """Shell completion of a projection name (no ledger is opened)."""
    return [n for n in PROJECTION_NAMES if n.startswith(incomplete)]


projection_name = click.argument("name", required=False, shell_complete=_complete_projection)


def window_options(time_column: str) -> Any:
    """``--limit``, ``--since``, ``--until`` of a listing (``commands.views.Window``)."""

    def decorate(f: Any) -> Any:
        f = click.option("--until", default=None, metavar="TIME", help=f"Only rows with {time_column} at or before TIME (ISO 8601).")(f)
        f = click.option("--since", default=None, metavar="TIME", help=f"Only rows with {time_column} at or after TIME (ISO 8601).")(f)
        return click.option("--limit", type=click.IntRange(min=0), default=None, metavar="N", help="At most N rows.")(f)

    return decorate


def _legend() -> str:
    return "\b\nExecution states:\n" + "\n".join(f"  {r['execution_state']:<5} {r['meaning']}" for r in state_legend())

#: ``--batch-size`` of ``projections catch-up`` and ``rebuild``
batch_size_option = click.option(
    "--batch-size", type=click.IntRange(1, 100_000), default=None,
    help="Notifications per transaction. Default: 500 near the head, growing while far behind (up to "
         "100,000), so logs of many chats recorded at once catch up with fewer rewrites of each chat's rows. "
         "A crash loses at most one batch of work.")


@click.command("status", epilog=_legend())
@click.argument("chat_id", required=False)
@click.option("--org", default=None, help="Only this organization's chats.")
@click.option("--status", "status_filter", default=None,
              type=click.Choice(["waiting", "running", "interrupting", "requires_action", "error", "paused"]))
@window_options("updated_at")
@click.option("--sort", type=click.Choice(["oldest", "newest"]), default=None,
              help="Order by last update: oldest first, or newest first. Default: oldest, but newest with --limit "
                   "(--limit N shows the N chats updated last).")
@json_lines_flag
@pass_ctx
def status_cmd(c: Ctx, chat_id: str | None, org: str | None, status_filter: str | None, limit: int | None,
               since: str | None, until: str | None, sort: str | None, as_json: bool) -> None:
    """Chat status (the chat_status view): one chat, or every chat (filters --org, --status), the least
    recently updated first (with --limit, the newest first). `chat-ledger states` explains the execution
    states."""
    cid, oid = c.chat_id(chat_id) if chat_id else None, c.org_id(org) if org else None
    newest = sort == "newest" or (sort is None and limit is not None)
    rows = views.chat_status(caught_up(c, ("chat_views",)), cid, oid, status_filter,
                             views.Window(limit, since, until), newest_first=newest)
    print_rows(rows, as_json, STATUS_COLUMNS)


@click.command("usage")
@click.option("--org", default=None, help="Only this organization's chats.")
@click.option("--owner", default=None, metavar="USER", help="Only chats this user owns.")
@json_option("Print the sums as one JSON object ({organization_id, owner_id, chats, total, by_chat}).")
@pass_ctx
def usage_cmd(c: Ctx, org: str | None, owner: str | None, as_json: bool) -> None:
    """What the chats' messages cost, as the worker reported it (the usage view): each chat's tokens, cost and
    run time, most expensive first, and their total."""
    oid = c.org_id(org) if org else None
    uid = c.user_id(owner, oid) if owner else None
    data = views.usage(caught_up(c, ("usage",)), oid, uid)
    if as_json:
        emit_json(data)
        return
    print_table(data["by_chat"], ("chat_id", "messages", "input_tokens", "output_tokens", "reasoning_tokens",
                                  "total_tokens", "total_cost_micros", "runtime_ms"))
    t = data["total"]
    click.echo(f"total of {data['chats']} chats: {t['input_tokens']:,} in / {t['output_tokens']:,} out tokens "
               f"({t['reasoning_tokens']:,} reasoning, {t['total_tokens']:,} in all), cost "
               f"{t['total_cost_micros'] / 1_000_000:.6f}, run time {t['runtime_ms'] / 1000:.1f} s")


@click.command("states")
@json_lines_flag
def states(as_json: bool) -> None:
    """The execution-state codes of `status` and what each means."""
    print_rows(state_legend(), as_json, ("execution_state", "meaning"))


@click.command()
@click.argument("chat_id", required=False)
@click.option("--org", default=None, help="Only this organization's chats.")
@window_options("since (the message's time)")
@json_lines_flag
@pass_ctx
def unresolved(c: Ctx, chat_id: str | None, org: str | None, limit: int | None, since: str | None,
               until: str | None, as_json: bool) -> None:
    """Unresolved tool calls of each chat's latest assistant message (the unresolved_tool_calls view), in
    the order the message lists them."""
    cid, oid = c.chat_id(chat_id) if chat_id else None, c.org_id(org) if org else None
    rows = views.unresolved(caught_up(c, ("chat_views",)), cid, oid, views.Window(limit, since, until))
    print_rows(rows, as_json, ("chat_id", "tool_call_id", "tool_name", "kind", "since"))


@click.command("search")
@click.argument("query")
@click.option("--org", default=None, help="Only this organization's chats.")
@click.option("--owner", default=None, metavar="USER", help="Only chats this user owns.")
@click.option("--model", default=None, metavar="ID", help="Only chats whose model config is this one.")
@click.option("--tool", default=None, metavar="NAME", help="Only messages that call this tool or hold its result.")
@click.option("--status", "status_filter", default=None,
              type=click.Choice(["waiting", "running", "interrupting", "requires_action", "error", "paused"]),
              help="Only chats in this status now.")
@click.option("--since", default=None, metavar="TIME", help="Only what was recorded at or after TIME (ISO 8601).")
@click.option("--until", default=None, metavar="TIME", help="Only what was recorded at or before TIME (ISO 8601).")
@click.option("--limit", type=click.IntRange(1, 200), default=20, show_default=True, metavar="N", help="At most N hits.")
@json_lines_flag
@pass_ctx
def search_cmd(c: Ctx, query: str, org: str | None, owner: str | None, model: str | None, tool: str | None,
               status_filter: str | None, since: str | None, until: str | None, limit: int, as_json: bool) -> None:
    """Search every chat's messages, tool calls and results, queued prompts, titles and errors (the search
    view): words must all match, "quoted phrases" match in order, -word excludes; best matches first.
    Deleted messages are found too (marked)."""
    from commands.search import SearchFilters, search

    oid = c.org_id(org) if org else None
    filters = SearchFilters(org=str(oid) if oid else None, owner=str(c.user_id(owner, oid)) if owner else None,
                            model=model, tool=tool, status=status_filter, since=since, until=until)
    page = search(caught_up(c, ("chat_views", "search")), query, filters, limit=limit)
    rows = [{**msgspec.to_builtins(h), "title": h.chat["title"]} for h in page.hits]
    if as_json:
        for row in rows:
            emit_json(row)
        return
    print_table([{**r, "where": f"{r['doc_id']}{' (deleted)' if r['deleted'] else ''}"} for r in rows],
                ("chat_id", "where", "at", "title", "snippet"))


@click.command()
@click.argument("chat_id")
@click.option("--limit", type=click.IntRange(min=0), default=None, metavar="N", help="At most N prompts.")
@json_lines_flag
@pass_ctx
def queue(c: Ctx, chat_id: str, limit: int | None, as_json: bool) -> None:
    """Queued prompts of a chat, head first (the chat_queue view)."""
    rows = views.chat_queue(caught_up(c, ("chat_views",)), c.chat_id(chat_id), limit)
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
@json_lines_flag
@pass_ctx
def projections_status(c: Ctx, as_json: bool) -> None:
    """Each projection's position, the head of the log, the lag in events and the live version; a failed
    projection's event, a rebuild running, and the builds beside the live one."""
    statuses = status(c.app, views.all_projections(c.app), c.backend)
    rows = [msgspec.to_builtins(s) for s in statuses]
    print_rows(rows, as_json, ("projection", "live_version", "version", "position", "head", "lag", "state"))
    if as_json:
        return
    unbuilt = [s.projection for s in statuses if s.state == "not built"]
    if unbuilt:
        click.echo(textwrap.fill(f"not built: {', '.join(unbuilt)} — a view is built the first time a command "
                                 "reads it; `chat-ledger projections catch-up` builds them now", width=TABLE_WIDTH))
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
@projection_name
@batch_size_option
@click.option("--wait", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Seconds to wait for another writer of a build (a rebuild) before giving up on it.")
@json_lines_flag
@pass_ctx
def projections_catch_up(c: Ctx, name: str | None, batch_size: int, wait: float, as_json: bool) -> None:
    """Bring projections (default: all) up to the head of the log. A projection that fails does not stop
    the others; the command then exits 1."""
    backend, failed = c.backend, []
    for p in _selected(c, name):
        try:
            with progress_bar(f"catching up {p.name}", views.lag(c.app, p, backend)) as progress:
                n = views.catch_up_one(c.app, p, backend, batch_size, progress, wait=wait)
        except LedgerError as e:
            failed.append(e)
            if as_json:
                emit_json({"projection": p.name, "caught_up": False, "error": e.to_dict()})
            else:
                click.echo(f"{p.name}: not caught up ({e.code})")
            continue
        if as_json:
            emit_json({"projection": p.name, "caught_up": True, "events_applied": n})
        else:
            click.echo(f"{p.name}: {n} events applied")
    if failed:  # one error line on stderr, as for every command: the first failure, and how many there were
        raise failed[0] if len(failed) == 1 else LedgerError(
            failed[0].code, f"{len(failed)} projections failed; first: {failed[0].message}")


@projections.command("rebuild")
@projection_name
@click.option("--blue-green", is_flag=True, help="Build the next version beside the live one, compare, then switch.")
@click.option("--accept-diff", is_flag=True, help="With --blue-green: switch even when the new version differs.")
@batch_size_option
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Processes that fold the streams of a stream-wise projection (chat_views, conversations) "
                   "[default: the number of CPUs]. org_models is always built in log order.")
@click.option("--log-order", is_flag=True,
              help="Build every projection in log order (exact at each committed position), not stream by stream.")
@json_lines_flag
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


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stop_on_signals(stop: threading.Event) -> dict[int, Any]:
    """SIGINT and SIGTERM end a follow cleanly, also when the shell that started it ignored SIGINT (a
    background job of a non-interactive shell inherits SIG_IGN, which Python then leaves in place)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _STOP_SIGNALS}


def _restore_signals(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@projections.command("follow")
@click.option("--poll", "poll_interval", type=float, default=1.0, show_default=True, help="Polling interval (s).")
@click.option("--for", "duration", type=float, default=None, help="Stop after this many seconds.")
@batch_size_option
@json_option("JSON Lines: one JSON object per batch on standard output ({time, projection, applied, total, head}), also on a "
             "terminal.")
@pass_ctx
def projections_follow(c: Ctx, poll_interval: float, duration: float | None, batch_size: int, as_json: bool) -> None:
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

    tty = sys.stderr.isatty() and not as_json

    def batch(p: Any, done: int, total: int) -> None:  # not on a terminal: one log line per batch
        when = time.strftime('%Y-%m-%dT%H:%M:%S')
        if as_json:
            emit_json({"time": when, "projection": p.name, "applied": done, "total": total, "head": app.head()})
            return
        click.echo(f"{when} {p.name}: {done}/{total} notifications applied (head {app.head()})", err=True)

    follower = Follower(app, ps, backend, poll_interval=poll_interval, batch_size=batch_size, on_failure=failed,
                        on_batch=None if tty else batch)
    worker = threading.Thread(target=run, name="projections-follow", daemon=True)
    worker.start()
    started = time.monotonic()
    previous = _stop_on_signals(stop)
    try:
        while not stop.wait(0.5):
            if duration is not None and time.monotonic() - started >= duration:
                break
            if tty:
                line = "  ".join(f"{s.projection} {s.position}/{s.head}" for s in status(app, ps, backend))
                click.echo(f"\r{line}", nl=False, err=True)
    finally:
        stop.set()
        _restore_signals(previous)
        worker.join(timeout=30)
        if tty:
            click.echo("", err=True)
    if failure:
        raise LedgerError("projection_error", f"follow stopped: {failure[0]}")
    if follower.failed:
        raise LedgerError("projection_error", "follow ended; not followed since they failed: "
                          + "; ".join(str(e) for e in follower.failed.values()))


@projections.command("prune")
@projection_name
@json_lines_flag
@pass_ctx
def projections_prune(c: Ctx, name: str | None, as_json: bool) -> None:
    """Drop the builds beside the live one (left by killed or refused blue/green rebuilds, or the previous
    live build kept after a switch) of projections (default: all). Builds being written are kept."""
    for p in _selected(c, name):
        dropped = views.prune_one(p, c.backend)
        if as_json:
            emit_json({"projection": p.name, "dropped": dropped})
        else:
            click.echo(f"{p.name}: " + (f"dropped {', '.join(f'v{v}' for v in dropped)}" if dropped else "nothing to drop"))


@projections.command("switches")
@click.argument("name", shell_complete=_complete_projection)
@json_lines_flag
@pass_ctx
def projections_switches(c: Ctx, name: str, as_json: bool) -> None:
    """The switch log of a projection, oldest first: which build readers moved to, when, how (initial,
    in_place, blue_green, rollback), at which position, and the compared row sets' digest."""
    p = _selected(c, name)[0]
    rows = views.switch_log(c.backend, p.name)
    if as_json:
        print_rows(rows, True, ())
        return
    for r in rows:
        r["from"] = f"v{r['from_version']}" if r["from_version"] is not None else "-"
        r["to"] = f"v{r['to_version']}"
        r["digest"] = (r["diff_digest"] or "")[:12] or None
    print_table(rows, ("switched_at", "mode", "from", "to", "position", "diff_rows", "accepted_with_diff", "digest"))


@projections.command("rollback")
@click.argument("name", shell_complete=_complete_projection)
@json_lines_flag
@pass_ctx
def projections_rollback(c: Ctx, name: str, as_json: bool) -> None:
    """Switch a projection's readers back to the build live before the last switch, when it is still there
    (`no_previous_build` otherwise). It catches up from where it stopped; a second rollback undoes it."""
    p = _selected(c, name)[0]
    switch = views.rollback_one(p, c.backend)
    if as_json:
        emit_json(msgspec.to_builtins(switch))
        return
    click.echo(f"{p.name}: rolled back from v{switch.from_version} to v{switch.to_version} (at position "
               f"{switch.position}; it catches up on the next read)")
