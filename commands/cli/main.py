"""The ``chat-ledger`` entry point (CONTRACT §5): the ``main`` group, with every command module's commands
registered on it. Command modules import only ``commands.cli.context``; nothing imports this module."""

from __future__ import annotations

from typing import Any

import click

from commands.cli import audit, catalog, chat, conversation, events, generation, tools, views
from commands.cli.context import Ctx
from ledger.errors import LedgerError


class LedgerGroup(click.Group):
    """Turns a LedgerError raised anywhere below into a one-line error and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LedgerError as e:
            click.echo(f"error: {e.code}: {e.message}", err=True)
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
):
    main.add_command(command)


if __name__ == "__main__":  # pragma: no cover
    main()
