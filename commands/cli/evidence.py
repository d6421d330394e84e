"""``chat-ledger keys create`` (``commands.evidence``): the checkpoints' signing keys, as files."""

from __future__ import annotations

from pathlib import Path

import click

from commands.cli.context import emit_json, json_option


@click.group()
def keys() -> None:
    """Signing keys of the checkpoints, as files outside the database (docs/evidence.md)."""


@keys.command("create")
@click.argument("name")
@click.option("--dir", "directory", default=".", show_default=True, type=click.Path(file_okay=False, exists=True),
              help="Where to write NAME.key (private, mode 0600) and NAME.pub.")
@json_option('Print {"key_id", "private", "public"} as JSON.')
def keys_create(name: str, directory: str, as_json: bool) -> None:
    """Write a new Ed25519 key pair: NAME.key (private: keep it off the database's machine) and NAME.pub."""
    from commands.evidence import EvidenceError, new_keys

    try:
        private, public, kid = new_keys(name, Path(directory))
    except EvidenceError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        emit_json({"key_id": kid, "private": str(private), "public": str(public)})
        return
    click.echo(f"key {kid}: private {private} (mode 0600), public {public}")
