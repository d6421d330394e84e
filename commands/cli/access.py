"""``chat-ledger tokens create|list|revoke`` (API tokens of the ledger service) and ``chat-ledger serve``.

The CLI is the local administrator's tool: whoever can open the database issues and revokes tokens, with no
token of their own (recorded with ``issued_by``/``revoked_by`` null). ``commands.tokens`` does the work.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Any

import click

from commands.cli.context import Ctx, emit_json, json_option, pass_ctx, print_rows

TOKEN_COLUMNS = ("token_id", "user", "org", "role", "deployment_admin", "issued_at", "expires_at", "last_used_at", "ended")


@click.group()
def tokens() -> None:
    """API tokens of the ledger service: issue (shown once), list, rotate, revoke."""


@tokens.command("create")
@click.option("--user", "user", required=True, help="The token's user (a UUID): the actor of its commands.")
@click.option("--org", default=None, help="The organization the token acts in (with --role).")
@click.option("--role", type=click.Choice(["member", "admin", "auditor"]), default=None,
              help="The token's role in --org.")
@click.option("--deployment-admin", is_flag=True, help="May change deployment settings, conversations, tokens.")
@click.option("--expires-in", "expires_in", default="90d", show_default=True, metavar="DURATION",
              help="How long the token lives: 90d, 12h, 30m, 2w (at most 365d). It ends then, recorded with it.")
@click.option("--force", is_flag=True, help="Issue it even for an organization this ledger has never seen.")
@json_option("Print the token (with its secret) as JSON.")
@pass_ctx
def tokens_create(c: Ctx, user: str, org: str | None, role: str | None, deployment_admin: bool,
                  expires_in: str, force: bool, as_json: bool) -> None:
    """Issue a token. Its secret is printed once: only its SHA-256 is recorded."""
    from commands.tokens import issue_token, parse_duration

    ttl = parse_duration(expires_in)
    if (org is None) != (role is None):
        raise click.UsageError("give --org and --role together")
    if org is None and not deployment_admin:
        raise click.UsageError("give --org and --role, or --deployment-admin")
    org_id = c.org_id(org) if org else None
    if org_id is not None and not force:
        from commands.catalog import find_catalog
        from ledger.errors import LedgerError

        if find_catalog(c.app, org_id) is None:  # a typo would make a token that sees nothing
            raise LedgerError("organization_not_found", f"organization {org_id} was never seen by this ledger "
                                                        "(no catalog): check --org, or give --force")
    row = issue_token(c.app, user=c.user_id(user, org_id), org=org_id,
                      role=role, deployment_admin=deployment_admin, expires_in=ttl)
    if as_json:
        emit_json(row)
        return
    click.echo(f"token {row['token_id']} for user {row['user']}"
               + (f", {row['role']} of {row['org']}" if row["org"] else "")
               + (", deployment admin" if row["deployment_admin"] else "") + f"; expires {row['expires_at']}")
    click.echo(f"secret (shown once; send it as `Authorization: Bearer <secret>`): {row['secret']}")


@tokens.command("list")
@json_option("JSON Lines: one JSON object per line (a token each).")
@pass_ctx
def tokens_list(c: Ctx, as_json: bool) -> None:
    """Every token issued (revoked ones too), never a secret."""
    from commands.tokens import list_tokens

    print_rows(list_tokens(c.app), as_json, TOKEN_COLUMNS)


@tokens.command("revoke")
@click.argument("token_id")
@json_option("Print the token as JSON.")
@pass_ctx
def tokens_revoke(c: Ctx, token_id: str, as_json: bool) -> None:
    """Revoke a token: it authenticates no request from then on (every server within 0.1 s)."""
    from commands.tokens import revoke_token

    row = revoke_token(c.app, c.stream_id(token_id))
    if as_json:
        emit_json(row)
    else:
        click.echo(f"token {row['token_id']} revoked at {row['revoked_at']}")


@tokens.command("rotate")
@click.argument("token_id")
@click.option("--overlap", default="10m", show_default=True, metavar="DURATION",
              help="How long the old token keeps working beside the new one (never past its own expiry).")
@click.option("--expires-in", "expires_in", default="90d", show_default=True, metavar="DURATION",
              help="How long the new token lives (at most 365d).")
@json_option("Print the new token (with its secret) as JSON.")
@pass_ctx
def tokens_rotate(c: Ctx, token_id: str, overlap: str, expires_in: str, as_json: bool) -> None:
    """Replace a token with a new secret for the same user and role; the old one works for --overlap more."""
    from commands.tokens import parse_duration, rotate_token

    row = rotate_token(c.app, c.stream_id(token_id), overlap=parse_duration(overlap),
                       expires_in=parse_duration(expires_in))
    if as_json:
        emit_json(row)
        return
    click.echo(f"token {row['token_id']} replaces {row['replaces']} (which works until {row['old_expires_at']}); "
               f"expires {row['expires_at']}")
    click.echo(f"secret (shown once; send it as `Authorization: Bearer <secret>`): {row['secret']}")


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening (port 0: one the system picks), or a usage error naming
    the address when it is taken or cannot be had."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (a port in TIME_WAIT is free; one in use is not)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        why = "is taken by another process" if e.errno == errno.EADDRINUSE else f"cannot be used: {e.strerror or e}"
        raise click.UsageError(f"port {port} on {host} {why} (choose another with --port)") from None
    sock.set_inheritable(True)
    return sock


def _checkpointing(key: Path | None, every: float, witness_keys: tuple[Path, ...]) -> Any:
    """The keys of ``serve``'s checkpoints, read before listening (a bad key file is a usage error)."""
    from commands.http.service import Checkpointing
    from ledger.evidence.checkpoint import EvidenceError, load_private, load_public

    try:
        return Checkpointing(key=load_private(key) if key is not None else None, every=every,
                             witness_keys=tuple(load_public(k) for k in witness_keys))
    except EvidenceError as e:
        raise click.UsageError(str(e)) from None


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="Keep the views caught up in the background (one follower at a time holds each build).")
@click.option("--streams-per-token", type=click.IntRange(0), default=8, show_default=True,
              help="Open event streams one token may hold on this process (0: no limit); more: rate_limited.")
@click.option("--write-rate", type=click.FloatRange(0), default=1000.0, show_default=True,
              help="Commands a second one token may send to this process, on average (0: no limit).")
@click.option("--write-burst", type=click.FloatRange(1), default=2000.0, show_default=True,
              help="Commands one token may send at once above --write-rate.")
@click.option("--max-body-bytes", type=click.IntRange(1), default=16 * 1024 * 1024, show_default=True,
              help="The largest request body (larger: 413 request_too_large).")
@click.option("--header-timeout", type=click.FloatRange(0.1), default=10.0, show_default=True,
              help="Seconds a connection may take to send a request's headers (then 408, and it is closed).")
@click.option("--create", is_flag=True, help="Start a new ledger when --db names none (else: database_not_found).")
@click.option("--replica-url", envvar="CHAT_LEDGER_REPLICA_URL", metavar="URL",
              help="A PostgreSQL hot standby of --db to read views, timelines, event pages and the live stream "
                   "from (commands go to --db; a token reads its own writes: docs/operations.md).")
@click.option("--replica-wait", type=click.FloatRange(0), default=1.0, show_default=True,
              help="Seconds a read waits for the standby to replay what its token wrote; then the primary answers.")
@click.option("--checkpoint-key", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Publish checkpoints signed with this Ed25519 private key (keys create): GET "
                   "/v1/checkpoints/latest, each recorded as an event of the log (docs/evidence.md).")
@click.option("--checkpoint-every", type=click.FloatRange(0.05), default=60.0, show_default=True, metavar="SECONDS",
              help="Seconds between the checkpoints --checkpoint-key publishes (none while the log is idle).")
@click.option("--witness-key", "witness_keys", type=click.Path(dir_okay=False, path_type=Path), multiple=True,
              metavar="FILE", help="The public key of a witness whose cosignatures the service records (repeat it).")
@click.option("--retention-every", type=click.FloatRange(0), default=3600.0, show_default=True, metavar="SECONDS",
              help="Seconds between retention runs (retention run; a sealed ledger's organizations' policies); 0: none.")
@json_option("Announce the address as one JSON object on standard output ({serving, db, openapi, ui}).")
@pass_ctx
def serve(c: Ctx, host: str, port: int, follow: bool, streams_per_token: int, write_rate: float,
          write_burst: float, max_body_bytes: int, header_timeout: float, create: bool, replica_url: str | None,
          replica_wait: float, checkpoint_key: Path | None, checkpoint_every: float, witness_keys: tuple[Path, ...],
          retention_every: float, as_json: bool) -> None:
    """Serve the ledger over HTTP (docs/server.md): commands, views, history, the event log and its live
    stream, web pages at /ui/. Every request needs an API token (`chat-ledger tokens create`)."""
    import uvicorn

    from commands.http.app import create_app
    from commands.http.limits import Limits
    from commands.http.protocol import protocol

    c.create = create
    c.app  # noqa: B018 - open the ledger first: a bad --db (or one that does not exist) fails here, before listening
    limits = Limits(streams_per_token=streams_per_token, write_rate=write_rate, write_burst=write_burst)
    if replica_url:
        from commands.api import Ledger

        Ledger.open_replica(replica_url).close()  # a bad standby URL fails here, before listening, as --db does
    checkpoints = _checkpointing(checkpoint_key, checkpoint_every, witness_keys)
    app = create_app(c.url, follow=follow, limits=limits, max_body_bytes=max_body_bytes, replica_url=replica_url,
                     replica_wait=replica_wait, checkpoints=checkpoints, retention_every=retention_every)
    sock = listening_socket(host, port)
    bound = sock.getsockname()[1]
    base = f"http://{host if ':' not in host else f'[{host}]'}:{bound}"

    def announce() -> None:
        if as_json:
            emit_json({"serving": base, "db": c.where, "openapi": f"{base}/openapi.json", "ui": f"{base}/ui/"})
        else:
            click.echo(f"chat-ledger serving {c.where} on {base} (pages: {base}/ui/; API docs: /openapi.json)",
                       err=True)

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if not self.should_exit:  # the app started (the ledger opened) and the socket accepts: say so now
                announce()

    # open event streams never end by themselves: a stop closes them after 2 s
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2,
                            http=protocol(header_timeout))
    Announcing(config).run(sockets=[sock])
