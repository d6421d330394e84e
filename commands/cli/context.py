"""The bottom of the CLI: what every command module shares (the ledger it opened, output, options).

Every CLI module imports this one and nothing else of the CLI; ``commands.cli.main`` imports the modules and
registers their commands on the ``main`` group. Output for people by default; ``--json`` prints compact JSON,
one object per line. Errors print ``error: <code>: <message>`` on stderr and exit 1 (``commands.cli.main``);
usage errors exit 2 (click's rule).

Which commands may create a ledger is said here, once (``CREATING_COMMANDS``); every other command reads, and
opens the ledger with ``create=False``: on a database, schema or file that does not exist it fails with
``database_not_found`` and creates nothing.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator
from uuid import UUID

import click
import msgspec

from ledger.errors import LedgerError
from ledger.store import open_app, resolve_url

_json = msgspec.json.Encoder()

#: notifications behind before a progress bar is worth showing
PROGRESS_THRESHOLD = 2000

#: The commands that may create the ledger (the SQLite file, the PostgreSQL schema, the event tables): those
#: that record, and the projection commands that build views (derived data) on a ledger that may still be
#: empty. A group's name stands for every command in it. Any command not listed only reads: it never
#: creates the ledger (it may still create view tables beside an existing one, when it catches them up).
CREATING_COMMANDS = frozenset({
    ("init",), ("apply",), ("demo",), ("simulate",), ("chat",), ("catalog",), ("deployment",),
    ("events", "import"), ("events", "rehash"),
    *(("conversation", name) for name in (
        "start", "arrive", "begin", "stage", "steer", "commit-steer", "complete", "fail", "restart", "recover")),
    ("projections", "catch-up"), ("projections", "rebuild"), ("projections", "follow"),
})

STATUS_COLUMNS = ("chat_id", "execution_state", "status", "queue_length", "message_count", "version", "title")


def emit_json(obj: Any) -> None:
    click.echo(_json.encode(obj).decode())


def command_path(ctx: click.Context | None) -> tuple[str, ...]:
    """The names of the running command and its groups below ``main``: ``("projections", "rebuild")``."""
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.command.name or "")
        ctx = ctx.parent
    return tuple(reversed(names))


def may_create(path: tuple[str, ...]) -> bool:
    return any(path[:n] in CREATING_COMMANDS for n in range(1, len(path) + 1))


class Ctx:
    """The ledger and the views' backend a command works on, opened on first use, closed with the command.

    The ledger is opened for the running command: creating what is missing only for ``CREATING_COMMANDS``.
    The views' backend is opened after the ledger, so a reading command never creates a database for them.
    """

    def __init__(self, db: str | None) -> None:
        self.url = resolve_url(db)
        self._app: Any = None
        self._backend: Any = None

    @property
    def where(self) -> str:
        """The database, for messages (never the password)."""
        from ledger.store import DatabaseURL, redact

        try:
            return DatabaseURL.parse(self.url).where
        except LedgerError:
            return f"database {redact(self.url)}"

    @property
    def app(self) -> Any:
        if self._app is None:
            create = may_create(command_path(click.get_current_context(silent=True)))
            self._app = open_app(self.url, create=create)
        return self._app

    @property
    def backend(self) -> Any:
        if self._backend is None:
            from projections import open_backend

            self.app  # noqa: B018 - the ledger first: it must exist (or be created) before its views
            self._backend = open_backend(self.url)
        return self._backend

    def close(self) -> None:
        backend, app, self._backend, self._app = self._backend, self._app, None, None
        try:
            if backend is not None:
                backend.close()
        finally:
            if app is not None:
                app.close()


pass_ctx = click.make_pass_decorator(Ctx)

json_flag = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
key_opt = click.option("--idempotency-key", default=None, help="Repeat-safe key for this command.")
actor_opt = click.option("--actor", default=None, help="Who asks (a UUID); recorded.")


def as_of_options(at_help: str) -> Callable[[Any], Any]:
    """``--at VERSION``, ``--as-of TIME`` and ``--with-current-settings`` (a reading command that answers as
    of a past chat version, with every other stream folded to the same log position)."""

    def decorate(f: Any) -> Any:
        f = click.option("--with-current-settings", is_flag=True,
                         help="Also show what today's catalog and deployment would give (with --at or --as-of), "
                              "and the differences.")(f)
        f = click.option("--as-of", "as_of", default=None, metavar="TIME",
                         help="As --at, for the chat's last event recorded at or before TIME (ISO 8601).")(f)
        return click.option("--at", "version", type=click.IntRange(min=1), default=None, metavar="VERSION",
                            help=at_help)(f)

    return decorate


def check_as_of(version: int | None, as_of: str | None, with_current_settings: bool = False) -> None:
    if version is not None and as_of is not None:
        raise click.UsageError("use --at or --as-of, not both")
    if with_current_settings and version is None and as_of is None:
        raise click.UsageError("--with-current-settings compares a past version with today: give --at or --as-of")


def print_differences(diffs: list[dict[str, Any]], then: str = "then", today: str = "today") -> None:
    """The differences of a counterfactual (``ledger.audit.redecide.differences`` with labels as_of/current)."""
    if not diffs:
        click.echo("  no differences")
        return
    for d in diffs:
        click.echo(f"  {d['field']}: {then} {json.dumps(d['as_of'])}, {today} {json.dumps(d['current'])}")


def parse_uuid(value: str, what: str = "chat id") -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise LedgerError("invalid_command", f"invalid {what}: {value!r}") from None


def print_table(rows: list[dict[str, Any]], columns: Iterable[str]) -> None:
    columns = list(columns)
    if not rows:
        click.echo("(none)")
        return
    cells = [[_cell(r.get(col)) for col in columns] for r in rows]
    widths = [max(len(col), *(len(row[i]) for row in cells)) for i, col in enumerate(columns)]
    click.echo("  ".join(col.ljust(w) for col, w in zip(columns, widths)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    text = str(v)
    return text if len(text) <= 48 else text[:47] + "…"


def print_rows(rows: list[dict[str, Any]], as_json: bool, columns: Iterable[str]) -> None:
    """A listing: JSON Lines with ``--json``, else a table of ``columns``."""
    if as_json:
        for r in rows:
            emit_json(r)
    else:
        print_table(rows, columns)


@contextmanager
def progress_bar(label: str, lag: int) -> Iterator[Callable[[int, int], None] | None]:
    """A ``progress(done, total)`` callback drawing a bar on a terminal when there is more than a moment's
    work (None otherwise: piped output stays quiet)."""
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
    """The backend with the named projections (default: all) caught up to the head of the log, with a progress
    bar on a terminal."""
    from commands import views

    app, backend = c.app, c.backend
    for projection in views.selected(app, names):
        with progress_bar(f"catching up {projection.name}", views.lag(app, projection, backend)) as progress:
            views.catch_up_one(app, projection, backend, progress=progress)
    return backend
