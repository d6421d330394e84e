"""The ``chat-ledger`` entry point (CONTRACT §5): the ``main`` group, with every command module's commands
registered on it. Command modules import only ``commands.cli.context``; nothing imports this module."""

from __future__ import annotations

import traceback
from typing import Any

import click

from commands.cli import access, audit, catalog, chat, conversation, events, generation, tools, views
from commands.cli.context import Ctx
from commands.failures import as_ledger_error, debugging


class LedgerGroup(click.Group):
    """The one error handler of the CLI: whatever a command raises (a refusal, a database or codec or
    projection failure, a bug) ends as one line ``error: <code>: <message>`` on stderr and exit status 1
    (``commands.failures`` maps it); ``CHAT_LEDGER_DEBUG=1`` prints the traceback first. click's own
    exceptions pass through: usage errors exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            if isinstance(ctx.obj, Ctx):
                ctx.obj.close()  # here, so that a failure while closing is reported like any other
            return result
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:
            try:
                error = as_ledger_error(e, ctx.obj.where if isinstance(ctx.obj, Ctx) else "the database")
            except Exception:  # the map itself failed: still one line
                error = as_ledger_error(e)
            if debugging():
                traceback.print_exc()
            click.echo(f"error: {error.code}: {error.message}", err=True)
            ctx.exit(1)


@click.group(cls=LedgerGroup)
@click.option("--db", envvar="CHAT_LEDGER_DB", default=None, metavar="URL",
              help="sqlite:///FILE (default sqlite:///chat-ledger.db) or postgresql://USER@HOST[:PORT]/DB[?schema=S]")
@click.version_option(package_name="chat-ledger")
@click.pass_context
def main(ctx: click.Context, db: str | None) -> None:
    """chat-ledger: an event-sourced ledger for AI-agent chats."""
    state = Ctx(db)
    ctx.obj = state
    ctx.call_on_close(state.close)


for command in (
    chat.init, chat.apply, chat.chat, chat.show,
    views.status_cmd, views.unresolved, views.queue, views.projections,
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
