"""The ``chat-ledger`` entry point (CONTRACT §5): the ``main`` group, with every command module's commands
registered on it. Command modules import only ``commands.cli.context``; nothing imports this module."""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from commands.cli import access, audit, catalog, chat, conversation, events, generation, tools, views
from commands.cli.context import Ctx, emit_json
from commands.failures import as_ledger_error, debugging

#: options of ``main`` that may also be given after the subcommand (``chat-ledger status --db URL``):
#: those taking a value, and flags
GLOBAL_VALUE_OPTIONS = ("--db",)
GLOBAL_FLAGS = ("--json",)


def hoist_global_options(args: list[str]) -> list[str]:
    """``args`` with the global options given after the subcommand moved before it (up to a ``--``).

    ``--db URL``/``--db=URL`` anywhere is ``main``'s; so is ``--json``, which ``main`` keeps for every
    command (each command's ``--json`` reads it: ``commands.cli.context.json_option``)."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest.extend(args[i:])
            break
        if a in GLOBAL_VALUE_OPTIONS and i + 1 < len(args):
            front.extend(args[i:i + 2])
            i += 2
            continue
        if a.split("=", 1)[0] in GLOBAL_VALUE_OPTIONS and "=" in a or a in GLOBAL_FLAGS:
            front.append(a)
        else:
            rest.append(a)
        i += 1
    return front + rest


class LedgerGroup(click.Group):
    """The one error handler of the CLI: whatever a command raises (a refusal, a database or codec or
    projection failure, a bug) ends as one line ``error: <code>: <message>`` on stderr and exit status 1
    (``commands.failures`` maps it) — or, with ``--json``, as ``{"error": {"code", "message"}}`` (also on stderr);
    ``CHAT_LEDGER_DEBUG=1`` prints the traceback first. click's own exceptions pass through: usage errors
    exit 2. Global options are accepted after the subcommand too (``hoist_global_options``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_options(args))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            if isinstance(ctx.obj, Ctx):
                ctx.obj.close()  # here, so that a failure while closing is reported like any other
            return result
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # the reader went away (`| head`): nothing more to say to it
            sys.stderr.close()
            ctx.exit(1)
        except Exception as e:
            try:
                error = as_ledger_error(e, ctx.obj.where if isinstance(ctx.obj, Ctx) else "the database")
            except Exception:  # the map itself failed: still one line
                error = as_ledger_error(e)
            if debugging():
                traceback.print_exc()
            if isinstance(ctx.obj, Ctx) and ctx.obj.json:
                emit_json({"error": error.to_dict()}, err=True)
            else:
                click.echo(f"error: {error.code}: {error.message}", err=True)
            ctx.exit(1)


EPILOG = """\b
Ids: a full UUID, or a unique prefix of one (at least 4 hex digits); tables show the shortest unique
prefix (at least 8). With --json, errors are printed on stderr as {"error": {"code", "message"}}.
Shell completion: eval "$(_CHAT_LEDGER_COMPLETE=bash_source chat-ledger)" (zsh_source, fish_source).
"""


@click.group(cls=LedgerGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.option("--db", envvar="CHAT_LEDGER_DB", show_envvar=True, default=None, metavar="URL",
              help="sqlite:///FILE (default sqlite:///chat-ledger.db) or postgresql://USER@HOST[:PORT]/DB[?schema=S]. "
                   "May also follow the command.")
@click.option("--json", "as_json", is_flag=True,
              help="JSON output (and JSON errors) for the command; may also follow the command.")
@click.version_option(package_name="chat-ledger")
@click.pass_context
def main(ctx: click.Context, db: str | None, as_json: bool) -> None:
    """chat-ledger: an event-sourced ledger for AI-agent chats."""
    state = Ctx(db, as_json)
    ctx.obj = state
    ctx.call_on_close(state.close)


for command in (
    chat.init, chat.apply, chat.chat, chat.show,
    views.status_cmd, views.states, views.unresolved, views.queue, views.projections, views.search_cmd,
    catalog.models, catalog.resolve_model_cmd, catalog.catalog, catalog.deployment,
    generation.next_action_cmd,
    audit.audit, audit.explain,
    events.events,
    conversation.conversation,
    tools.demo, tools.simulate_cmd, tools.bench,
    access.tokens, access.serve,
):
    main.add_command(command)

if __name__ == "__main__":  # pragma: no cover
    main()
