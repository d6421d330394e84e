"""CLI read commands on the materialized views, and ``projections status|catch-up|rebuild|follow``.

Every query catches up the views it reads first, so the CLI always shows what has been recorded. A
progress bar appears on a terminal when there is more than a moment's work; piped output stays quiet.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click
import msgspec

from commands.cli import STATUS_COLUMNS, Ctx, emit_json, main, parse_uuid, pass_ctx, print_table
from ledger.chat.views import json_row
from ledger.errors import LedgerError
from projections import ProjectionError, catch_up, follow, open_backend, rebuild, status
from projections.chats import chat_projections

PROGRESS_THRESHOLD = 2000  # notifications behind before a progress bar is worth showing


def all_projections(app: Any) -> list[Any]:
    from projections.conversations import conversation_projections
    from projections.org_models import org_model_projections

    return chat_projections(app) + conversation_projections(app) + org_model_projections(app)


def backend_of(c: Ctx) -> Any:
    if getattr(c, "_backend", None) is None:
        c._backend = open_backend(c.url)  # type: ignore[attr-defined]
        previous_close = c.close

        def close() -> None:
            c._backend.close()  # type: ignore[attr-defined]
            c._backend = None  # type: ignore[attr-defined]
            previous_close()

        c.close = close  # type: ignore[method-assign]
    return c._backend  # type: ignore[attr-defined]


@contextmanager
def progress_bar(label: str, lag: int) -> Iterator[Callable[[int, int], None] | None]:
    if lag < PROGRESS_THRESHOLD or not sys.stderr.isatty():
        yield None
        return
    with click.progressbar(length=lag, label=label, file=sys.stderr) as bar:
        done = [0]

        def update(n: int, total: int) -> None:
            if n > done[0]:
                bar.update(n - done[0])
                done[0] = n

        yield update


def caught_up(c: Ctx, names: tuple[str, ...] | None = None) -> Any:
    """The backend with the named projections (default: all) caught up to the head of the log."""
    app, backend = c.app, backend_of(c)
    for p in all_projections(app):
        if names is None or p.name in names:
            try:
                run_catch_up(app, p, backend)
            except ProjectionError as e:
                raise LedgerError("projection_error", str(e)) from e
    return backend


def run_catch_up(app: Any, projection: Any, backend: Any, batch_size: int = 500) -> int:
    lag = app.head() - (backend.position(projection.name, backend.live_version(projection.name) or projection.version) or 0)
    with progress_bar(f"catching up {projection.name}", lag) as progress:
        return catch_up(app, projection, backend, batch_size=batch_size, progress=progress)


#: ``--batch-size`` of ``projections catch-up`` and ``rebuild``
batch_size_option = click.option(
    "--batch-size", type=click.IntRange(1, 100_000), default=500, show_default=True,
    help="Notifications per transaction. Larger batches rebuild logs of many chats recorded at once much "
         "faster (fewer rewrites of each chat's rows); a crash loses at most one batch of work.")


def _query(c: Ctx, name: str, table: str, where: dict[str, Any], order_by: Any = None) -> list[dict[str, Any]]:
    backend = caught_up(c, (name,))
    return [json_row(r) for r in backend.query(name, table, where=where or None, order_by=order_by)]


@main.command("status")
@click.argument("chat_id", required=False)
@click.option("--org", default=None, help="Only this organization's chats.")
@click.option("--status", "status_filter", default=None,
              type=click.Choice(["waiting", "running", "interrupting", "requires_action", "error"]))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
def status_cmd(c: Ctx, chat_id: str | None, org: str | None, status_filter: str | None, as_json: bool) -> None:
    """Chat status (the chat_status view): one chat, or every chat (filters --org, --status)."""
    where: dict[str, Any] = {}
    if chat_id:
        where["chat_id"] = str(parse_uuid(chat_id))
    if org:
        where["organization_id"] = str(parse_uuid(org, "organization id"))
    if status_filter:
        where["status"] = status_filter
    rows = _query(c, "chat_views", "chat_status", where, order_by=["updated_at", "chat_id"])
    if chat_id and not rows:
        raise LedgerError("chat_not_found", "chat not found")
    if as_json:
        for r in rows:
            emit_json(r)
    else:
        print_table(rows, STATUS_COLUMNS)


@main.command()
@click.argument("chat_id", required=False)
@click.option("--org", default=None, help="Only this organization's chats.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
def unresolved(c: Ctx, chat_id: str | None, org: str | None, as_json: bool) -> None:
    """Unresolved tool calls of each chat's latest assistant message (the unresolved_tool_calls view)."""
    where: dict[str, Any] = {}
    if chat_id:
        where["chat_id"] = str(parse_uuid(chat_id))
    if org:
        chats = _query(c, "chat_views", "chat_status", {"organization_id": str(parse_uuid(org, "organization id"))})
        where["chat_id"] = [r["chat_id"] for r in chats]
        if not where["chat_id"]:
            rows: list[dict[str, Any]] = []
            return _print(rows, as_json, ("chat_id", "tool_call_id", "tool_name", "kind", "since"))
    rows = _query(c, "chat_views", "unresolved_tool_calls", where, order_by=["chat_id", "assistant_message_id", "since"])
    columns = ("chat_id", "assistant_message_id", "tool_call_id", "tool_name", "kind", "execution_id", "args", "since")
    rows = [{k: r[k] for k in columns} for r in rows]
    _print(rows, as_json, ("chat_id", "tool_call_id", "tool_name", "kind", "since"))


@main.command()
@click.argument("chat_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
def queue(c: Ctx, chat_id: str, as_json: bool) -> None:
    """Queued prompts of a chat, head first (the chat_queue view)."""
    rows = _query(c, "chat_views", "chat_queue", {"chat_id": str(parse_uuid(chat_id))},
                  order_by=["position", "queued_message_id"])
    _print(rows, as_json, ("queued_message_id", "position", "text", "hook_allowed_tools", "created_by"))


def _print(rows: list[dict[str, Any]], as_json: bool, columns: tuple[str, ...]) -> None:
    if as_json:
        for r in rows:
            emit_json(r)
    else:
        print_table(rows, columns)


# -- projections ----------------------------------------------------------------------------------

@main.group()
def projections() -> None:
    """Projection positions and lag; catch up; rebuild (in place or blue/green); follow live."""


def _selected(c: Ctx, name: str | None) -> list[Any]:
    ps = all_projections(c.app)
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
    """Each projection's position, the head of the log, the lag in events and the live version."""
    rows = [msgspec.to_builtins(s) for s in status(c.app, all_projections(c.app), backend_of(c))]
    if as_json:
        for r in rows:
            emit_json(r)
    else:
        print_table(rows, ("projection", "live_version", "version", "position", "head", "lag", "state"))


@projections.command("catch-up")
@click.argument("name", required=False)
@batch_size_option
@pass_ctx
def projections_catch_up(c: Ctx, name: str | None, batch_size: int) -> None:
    """Bring projections (default: all) up to the head of the log."""
    backend = backend_of(c)
    for p in _selected(c, name):
        n = run_catch_up(c.app, p, backend, batch_size)
        click.echo(f"{p.name}: {n} events applied")


@projections.command("rebuild")
@click.argument("name", required=False)
@click.option("--blue-green", is_flag=True, help="Build the next version beside the live one, compare, then switch.")
@click.option("--accept-diff", is_flag=True, help="With --blue-green: switch even when the new version differs.")
@batch_size_option
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def projections_rebuild(c: Ctx, name: str | None, blue_green: bool, accept_diff: bool, batch_size: int,
                        as_json: bool) -> None:
    """Rebuild projections (default: all) from the first event."""
    backend, refused = backend_of(c), False
    for p in _selected(c, name):
        with progress_bar(f"rebuilding {p.name}", c.app.head()) as progress:
            result = rebuild(c.app, p, backend, blue_green=blue_green, accept_diff=accept_diff,
                             batch_size=batch_size, progress=progress)
        in_place = result.mode == "in_place"
        refused = refused or not (result.switched or in_place)
        if as_json:
            emit_json(msgspec.to_builtins(result))
            continue
        line = f"{p.name}: v{result.to_version} built from {result.events} events ({result.mode})"
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
@pass_ctx
def projections_follow(c: Ctx, poll_interval: float, duration: float | None) -> None:
    """Keep every projection caught up until interrupted (LISTEN/NOTIFY on PostgreSQL, plus polling)."""
    app, backend = c.app, backend_of(c)
    ps = all_projections(app)
    stop = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            follow(app, ps, backend, poll_interval=poll_interval, stop_event=stop)
        except BaseException as e:  # reported by the main thread
            failure.append(e)
            stop.set()

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
