"""The ``chat-ledger`` entry point: the ``main`` group, with every command module's commands registered on it
by name (``COMMANDS``) and imported only when one of them runs, so that ``--version``, ``--help`` and a quick
read do not pay for the modules (psycopg, the projections, the service) they do not use. Command modules
import only ``commands.cli.context``; nothing imports this module."""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from commands import __version__
from commands.cli.context import Ctx, emit_json
from commands.failures import as_ledger_error, debugging

#: every command: name -> (module of ``commands.cli``, attribute, its short help). The short help is kept here so
#: that ``--help`` lists the commands without importing them; a test checks it is the command's own.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "apply": ("chat", "apply", 'Execute a JSONL file of commands (FILE or - for stdin); one JSON result line per command, written as each command is run (its output is always JSON; --json makes its errors JSON too).'),
    "audit": ("audit", "audit", 'Timeline of a chat, catalog or conversation: each event, a summary and the state after it.'),
    "bench": ("tools", "bench", 'Measure replay, rebuild, command throughput, concurrent writers, view queries, the service and the first command on a long chat against same-run baselines; print a table, write JSON.'),
    "catalog": ("catalog", "catalog", 'Human forms of the catalog commands (apply takes the same commands as JSON).'),
    "chat": ("chat", "chat", 'Human forms of the chat commands (apply takes the same commands as JSON).'),
    "conversation": ("conversation", "conversation", 'Codex-style conversations: boxes, rounds, stages, steering, stall and restart, recovery.'),
    "demo": ("tools", "demo", 'Record a realistic set of chats from examples/ and a small simulation, and show what the ledger holds.'),
    "deployment": ("catalog", "deployment", 'Deployment-wide settings.'),
    "erase": ("privacy", "erase", "Erase a user's content: destroy their data keys (every chat's and conversation's, or --org's) and record it; their content reads [erased] from then on, and the views are rewritten."),
    "events": ("events", "events", 'Stored events: verify, stats, export, import, rehash, checkpoint, prove, encrypt-existing.'),
    "explain": ("audit", "explain", 'Explain a tool call, a queued prompt or a turn of a chat from its recorded facts.'),
    "hold": ("privacy", "hold", 'Legal holds: a held chat, user or organization is never erased (erasure and retention: legal_hold).'),
    "init": ("chat", "init", 'Create the tables (and the PostgreSQL schema) if missing; link the streams recorded before hash chains (as ``events rehash`` does).'),
    "keys": ("evidence", "keys", 'Signing keys of the checkpoints, as files outside the database (docs/evidence.md).'),
    "models": ("catalog", "models", "The organization's model view: configs, default, admin overrides, members (and a user's view)."),
    "next-action": ("generation", "next_action_cmd", 'What the worker does next for a chat: action, finish reason, calls, tool policy, advisor, retry.'),
    "proof": ("evidence", "proof", 'Check proofs of the log against signed checkpoints, offline (docs/evidence.md).'),
    "projections": ("views", "projections", 'Projection positions and lag; catch up; rebuild (in place or blue/green); follow live.'),
    "queue": ("views", "queue", 'Queued prompts of a chat, head first (the chat_queue view).'),
    "resolve-model": ("catalog", "resolve_model_cmd", "The model a chat's generation would run on (now, or as of --at/--as-of), and why."),
    "retention": ("privacy", "retention", 'Retention: an organization\'s chats\' content is erased some days after their last activity.'),
    "search": ("views", "search_cmd", 'Search every chat\'s messages, tool calls and results, queued prompts, titles and errors (the search view): words must all match, "quoted phrases" match in order, -word excludes; best matches first.'),
    "serve": ("access", "serve", 'Serve the ledger over HTTP (docs/server.md): commands, views, history, the event log and its live stream, web pages at /ui/.'),
    "show": ("chat", "show", 'Full state of one chat: messages (deleted ones included), queue, policy, unresolved tool calls.'),
    "simulate": ("tools", "simulate_cmd", 'Drive CHATS chats through the real commands with a deterministic fake model, and summarize.'),
    "states": ("views", "states", 'The execution-state codes of `status` and what each means.'),
    "status": ("views", "status_cmd", 'Chat status (the chat_status view): one chat, or every chat (filters --org, --status), the least recently updated first (with --limit, the newest first).'),
    "tokens": ("access", "tokens", 'API tokens of the ledger service: issue (shown once), list, rotate, revoke.'),
    "usage": ("views", "usage_cmd", 'What the chats\' messages cost, as the worker reported it (the usage view): each chat\'s tokens, cost and run time, most expensive first, and their total.'),
    "unresolved": ("views", "unresolved", "Unresolved tool calls of each chat's latest assistant message (the unresolved_tool_calls view), in the order the message lists them."),
    "witness": ("evidence", "witness", "Witness a ledger service's checkpoints: check each is signed by the log and extends the last one seen (a consistency proof), cosign it (the service's GET /v1/checkpoints/latest then carries the cosignature)."),
}

#: options of ``main`` that may also be given after the subcommand (``chat-ledger status --db URL``):
#: those taking a value, and flags
GLOBAL_VALUE_OPTIONS = ("--db", "--commit-timeout")
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
    """The ``main`` group: commands loaded on first use (``COMMANDS``), and the CLI's one error handler."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            module, attr, _ = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(f"commands.cli.{module}"), attr), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, from ``COMMANDS`` (importing none of them)."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, (self.commands.get(n) or click.Command(n, help=COMMANDS[n][2])).get_short_help_str(limit))
                for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


    # The one error handler of the CLI: whatever a command raises (a refusal, a database or codec or
    # projection failure, a bug) ends as one line ``error: <code>: <message>`` on stderr and exit status 1
    # (``commands.failures`` maps it) — or, with ``--json``, as ``{"error": {"code", "message"}}`` (also on stderr);
    # ``CHAT_LEDGER_DEBUG=1`` prints the traceback first. click's own exceptions pass through: usage errors
    # exit 2. Global options are accepted after the subcommand too (``hoist_global_options``).

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
@click.option("--commit-timeout", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
              help="PostgreSQL: the longest a save's statements (its COMMIT waiting for a synchronous standby) may "
                   "take, then the command answers replication_unconfirmed (committed, not confirmed by a standby) "
                   "or database_unavailable (nothing recorded). Default 10; also CHAT_LEDGER_COMMIT_TIMEOUT.")
@click.version_option(__version__, prog_name="chat-ledger")
@click.pass_context
def main(ctx: click.Context, db: str | None, as_json: bool, commit_timeout: float | None) -> None:
    """chat-ledger: an event-sourced ledger for AI-agent chats."""
    if commit_timeout is not None:  # read by the PostgreSQL recorder when the ledger is opened
        import os

        before = os.environ.get("CHAT_LEDGER_COMMIT_TIMEOUT")
        os.environ["CHAT_LEDGER_COMMIT_TIMEOUT"] = str(commit_timeout)
        ctx.call_on_close(lambda: os.environ.pop("CHAT_LEDGER_COMMIT_TIMEOUT") if before is None
                          else os.environ.__setitem__("CHAT_LEDGER_COMMIT_TIMEOUT", before))
    state = Ctx(db, as_json)
    ctx.obj = state
    ctx.call_on_close(state.close)


if __name__ == "__main__":  # pragma: no cover
    main()
