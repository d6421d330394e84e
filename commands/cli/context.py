"""The bottom of the CLI: what every command module shares (the ledger it opened, output, options).

Every CLI module imports this one and nothing else of the CLI; ``commands.cli.main`` imports the modules and
registers their commands on the ``main`` group. Output for people by default; ``--json`` prints compact JSON,
one object per line. Errors print ``error: <code>: <message>`` on stderr and exit 1 (``commands.cli.main``);
with ``--json`` (anywhere on the line) they print ``{"error": {"code", "message"}}`` there instead. Usage
errors exit 2 (click's rule). Ids typed by people go through ``Ctx.chat_id`` and its kin: a full id or a
unique prefix (``commands.idlookup``); tables show ids at their shortest unique length (``ledger.ids``).

Which commands may create a ledger is said here, once (``CREATING_COMMANDS``); every other command reads, and
opens the ledger with ``create=False``: on a database, schema or file that does not exist it fails with
``database_not_found`` and creates nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator
from uuid import UUID

import click
import msgspec

from ledger.errors import LedgerError

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
    ("tokens", "create"),
})

#: command fields that hold an id people type, and what each is called in messages (``Ctx.typed_ids``)
ID_FIELDS = {"actor": "user id", "created_by": "user id", "owner_id": "user id", "user_id": "user id",
             "model_config_id": "model config id"}

STATUS_COLUMNS = ("chat_id", "execution_state", "status", "queue_length", "message_count", "version", "title")


def emit_json(obj: Any, err: bool = False) -> None:
    click.echo(_json.encode(obj).decode(), err=err)


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

    def __init__(self, db: str | None, as_json: bool = False) -> None:
        from ledger.database import resolve_url  # (here: --help and --version load no database code)

        self.url = resolve_url(db)
        self.json = as_json  # --json given (anywhere): errors are printed as JSON too
        self.create = False  # a command's own --create (serve): open the ledger creating it if missing
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
            create = self.create or may_create(command_path(click.get_current_context(silent=True)))
            from ledger.store import open_app  # (here: --help and --version do not load the store)

            self._app = open_app(self.url, create=create)
        return self._app

    @property
    def backend(self) -> Any:
        if self._backend is None:
            from projections import open_backend

            self.app  # noqa: B018 - the ledger first: it must exist (or be created) before its views
            self._backend = open_backend(self.url)
        return self._backend

    # -- ids typed by people: full, or a unique prefix (commands.idlookup) --------------------------
    def chat_id(self, value: str) -> UUID:
        return self._stream(value, "chat")

    def conversation_id(self, value: str) -> UUID:
        return self._stream(value, "conversation")

    def stream_id(self, value: str) -> UUID:
        return self._stream(value, "stream")

    def _stream(self, value: str, kind: str) -> UUID:
        from commands.idlookup import STREAM_KINDS, parse_full, stream_id

        full = parse_full(value, STREAM_KINDS[kind][0])  # a bad id is refused before the ledger is opened
        return full if full is not None else stream_id(self.app, value, kind)

    def org_id(self, value: str) -> UUID:
        from commands.idlookup import organization_id, parse_full

        full = parse_full(value, "organization id")
        return full if full is not None else organization_id(self.app, value)

    def user_id(self, value: str, org: UUID | None) -> UUID:
        from commands.idlookup import parse_full, user_id

        full = parse_full(value, "user id")
        return full if full is not None else user_id(self.app, value, org)

    def typed_ids(self, fields: dict[str, Any], scope: Callable[[], tuple[UUID, tuple[UUID, ...]]]) -> dict[str, Any]:
        """``fields`` with the ids people type for users (``ID_FIELDS``) and model configs taken whole, or resolved
        from a unique prefix among ``scope()``: the organization, and other users to consider (a chat's
        owner). ``scope`` is called once, and only when a prefix is given."""
        from commands.idlookup import model_config_id, parse_full, user_id

        out, known = dict(fields), []
        for name, value in fields.items():
            what = ID_FIELDS.get(name)
            if value is None or what is None:
                continue
            full = parse_full(value, what)
            if full is None:
                known = known or [scope()]
                org, also = known[0]
                full = (model_config_id(self.app, value, org) if what == "model config id"
                        else user_id(self.app, value, org, also))
            out[name] = str(full)
        return out

    def chat_scope(self, chat_id: UUID) -> Callable[[], tuple[UUID, tuple[UUID, ...]]]:
        """The ``typed_ids`` scope of a command on a chat: its organization and its owner (``chat_not_found``
        when there is no such chat)."""
        from ledger.chat.state import ChatState

        def scope() -> tuple[UUID, tuple[UUID, ...]]:
            chat = self.app.load(chat_id)
            if chat is None or not isinstance(chat.state, ChatState):
                raise LedgerError("chat_not_found", "chat not found")
            return chat.state.organization_id, (chat.state.owner_id,)

        return scope

    def close(self) -> None:
        backend, app, self._backend, self._app = self._backend, self._app, None, None
        try:
            if backend is not None:
                backend.close()
        finally:
            if app is not None:
                app.close()


pass_ctx = click.make_pass_decorator(Ctx)

def _json_given(ctx: click.Context, _param: Any, value: bool) -> bool:
    """``--json`` after the command or before it (``main``'s, kept in ``Ctx.json``): either asks for JSON."""
    state = ctx.find_object(Ctx)
    if state is not None and value:
        state.json = True
    return bool(value or (state is not None and state.json))


def json_option(help: str = "Print the result as JSON.") -> Callable[[Any], Any]:
    return click.option("--json", "as_json", is_flag=True, callback=_json_given, help=help)


json_flag = json_option()


def output_option(what: str) -> Callable[[Any], Any]:
    """``--output/-o FILE`` (``-``: standard output, the default) for a command that writes ``what``."""
    return click.option("--output", "-o", "output", default=None, metavar="FILE",
                        help=f"Write {what} to FILE (- for standard output, the default).")


def write_output(target: str, text: str) -> None:
    """``text`` to the file ``target``, or to standard output for ``-``."""
    if target == "-":
        click.echo(text, nl=False)
        return
    try:
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:  # a directory that does not exist, one we may not write: the caller's mistake
        raise click.UsageError(f"cannot write {target}: {e.strerror or e}") from None
json_lines_flag = json_option("JSON Lines: one JSON object per line (a row each).")
key_opt = click.option("--idempotency-key", default=None, help="Repeat-safe key for this command.")
actor_opt = click.option("--actor", default=None, help="Who asks (a user id or a unique prefix of one); recorded.")


def as_of_options(at_help: str) -> Callable[[Any], Any]:
    """``--at VERSION``, ``--as-of TIME`` and ``--with-current-settings`` (a reading command that answers as
    of a past chat version, with every other stream folded to the same log position)."""

    def decorate(f: Any) -> Any:
        f = click.option("--with-current-settings", is_flag=True,
                         help="Also show what today's catalog and deployment would give (with --at or --as-of), "
                              "and the differences.")(f)
        f = click.option("--as-of", "as_of", default=None, metavar="TIME",
                         help="As --at, for the chat's last event recorded at or before TIME (ISO 8601).")(f)
        return click.option("--at", "version", type=int, default=None, metavar="VERSION",
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


#: the narrowest a table is cut to on a terminal (columns are cut, the widest first, to fit its width)
TABLE_WIDTH = 100


def table_width() -> int | None:
    """How wide a table may be: the terminal's width (at least ``TABLE_WIDTH``) when standard output is one;
    None — nothing cut — when it is piped or written to a file (a script or a pager gets every character)."""
    if not sys.stdout.isatty():
        return None
    import shutil

    return max(TABLE_WIDTH, shutil.get_terminal_size((TABLE_WIDTH, 24)).columns)


def print_table(rows: list[dict[str, Any]], columns: Iterable[str], width: int | None = -1) -> None:
    """Rows as a table of ``columns`` at most ``width`` characters wide (default: ``table_width()``; None:
    never cut); UUIDs at their shortest unique length among the table's ids (at least 8 characters; every
    command takes them back as prefixes)."""
    if width == -1:
        width = table_width()
    columns = list(columns)
    if not rows:
        click.echo("(none)")
        return
    short = short_ids(str(v) for r in rows for v in r.values() if _is_uuid(v))
    cells = [[cell(r.get(col), short) for col in columns] for r in rows]
    widths = [max(len(col), *(len(row[i]) for row in cells)) for i, col in enumerate(columns)]
    while width is not None and sum(widths) + 2 * (len(widths) - 1) > width:
        i = max(range(len(widths)), key=lambda k: widths[k])
        if widths[i] <= 8:
            break
        widths[i] -= 1
    fit = [[v if len(v) <= w else v[:w - 1] + "…" for v, w in zip(row, widths)] for row in cells]
    click.echo("  ".join(col[:w].ljust(w) for col, w in zip(columns, widths)).rstrip())
    for row in fit:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def short_ids(values: Iterable[str]) -> dict[str, str]:
    from ledger.ids import shortest_unique

    return shortest_unique(values)


def _is_uuid(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 36 and v.count("-") == 4


def cell(v: Any, short: dict[str, str] | None = None) -> str:
    """A value for people: ``-`` for null, yes/no for booleans, JSON for lists and objects, ids shortened."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    text = str(v)
    return short.get(text, text) if short else text


def tool_policy(allowed: list[str] | None) -> str:
    """A hook tool policy for people: null is "all tools"."""
    return "all tools" if allowed is None else (", ".join(allowed) or "no tools")


def print_rows(rows: list[dict[str, Any]], as_json: bool, columns: Iterable[str]) -> None:
    """A listing: JSON Lines with ``--json``, else a table of ``columns``."""
    if as_json:
        for r in rows:
            emit_json(r)
    else:
        print_table(rows, columns)


@contextmanager
def progress_bar(label: str, total: int, threshold: int = PROGRESS_THRESHOLD,
                 unit: str = "events") -> Iterator[Callable[[int, int], None] | None]:
    """Progress of long work on stderr, as a ``progress(done, total)`` callback: on a terminal, click's bar with
    the rate and the time left; elsewhere (a log, a pipe), a line every ``CHAT_LEDGER_PROGRESS_SECONDS``
    seconds (10 by default) and a last one. None when the work is under ``threshold`` (no bar for a moment's
    work) — except that the lines are always written when that variable is set (a log asked for them)."""
    interval = os.environ.get("CHAT_LEDGER_PROGRESS_SECONDS")
    if total < threshold and interval is None:
        yield None
        return
    started = time.monotonic()
    done = [0]

    def rate_and_eta(n: int, of: int) -> str:
        seconds = max(time.monotonic() - started, 1e-6)
        rate = n / seconds
        left = f", {(of - n) / rate:.0f} s left" if rate > 0 and of > n else ""
        return f"{rate:,.0f} {unit}/s{left}"

    if sys.stderr.isatty():
        with click.progressbar(length=max(total, 1), label=label, file=sys.stderr, show_pos=True,
                               item_show_func=lambda _: rate_and_eta(done[0], total)) as bar:
            def update(n: int, of: int) -> None:
                if n > done[0]:
                    bar.length = max(of, n, 1)
                    bar.update(n - done[0], n)
                    done[0] = n

            yield update
        return
    every = float(interval or 10)
    last = [started]

    def line(n: int, of: int) -> None:
        done[0] = n
        now = time.monotonic()
        if now - last[0] >= every or n >= of:
            last[0] = now
            click.echo(f"{label}: {n:,}/{of:,} {unit} ({rate_and_eta(n, of)})", err=True)

    yield line


def caught_up(c: Ctx, names: tuple[str, ...] | None = None) -> Any:
    """The backend with the named projections (default: all) caught up to the head of the log, with a progress
    bar on a terminal."""
    from commands import views

    app, backend = c.app, c.backend
    for projection in views.selected(app, names):
        with progress_bar(f"catching up {projection.name}", views.lag(app, projection, backend)) as progress:
            views.catch_up_one(app, projection, backend, progress=progress)
    return backend
