"""``chat-ledger keys create``, ``chat-ledger proof verify`` (``commands.evidence``): the checkpoints' signing keys, as
files; ``chat-ledger witness`` (``commands.witness``): an independent witness of a service's checkpoints."""

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


@click.group()
def proof() -> None:
    """Check proofs of the log against signed checkpoints, offline (docs/evidence.md)."""


@proof.command("verify")
@click.argument("proof_file", metavar="[PROOF]", required=False, type=click.Path(dir_okay=False, exists=True))
@click.option("--checkpoint", "checkpoint_file", type=click.Path(dir_okay=False, exists=True),
              metavar="FILE", help="The checkpoint the proof is for (the newer one, for a consistency proof).")
@click.option("--bundle", "bundle_dir", type=click.Path(file_okay=False, exists=True), metavar="DIR",
              help="Check an evidence bundle (audit CHAT --bundle DIR) instead: every event against its checkpoint.")
@click.option("--public-key", required=True, type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="The key the checkpoints must be signed with.")
@json_option('Print {"ok", "proves" | "error"} as JSON.')
def proof_verify(proof_file: str | None, checkpoint_file: str | None, bundle_dir: str | None, public_key: str,
                 as_json: bool) -> None:
    """Check an inclusion or consistency proof (`events prove`) against a checkpoint, or an evidence bundle, without
    any database; exit 1 when it does not hold."""
    import sys

    from commands.evidence import EvidenceError, verify_bundle, verify_proof_files

    if (bundle_dir is None) == (proof_file is None) or (bundle_dir is None) != (checkpoint_file is not None):
        raise click.UsageError("give PROOF --checkpoint FILE, or --bundle DIR")
    try:
        proves = (verify_bundle(Path(bundle_dir), Path(public_key)) if bundle_dir is not None
                  else verify_proof_files(Path(proof_file), Path(checkpoint_file), Path(public_key)))
    except EvidenceError as e:
        if as_json:
            emit_json({"ok": False, "error": str(e)})
        else:
            click.echo(f"FAILED: {e}")
        sys.exit(1)
    if as_json:
        emit_json({"ok": True, "proves": proves})
    else:
        click.echo(f"OK: {proves}")


@click.command()
@click.option("--log", "logs", required=True, multiple=True, metavar="URL",
              help="A ledger service to witness (repeat it for several servers of one ledger: one view of it).")
@click.option("--public-key", required=True, type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="The log's public key: its checkpoints must be signed with it.")
@click.option("--key", required=True, type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="The witness's own private key (keys create), which cosigns.")
@click.option("--token", envvar="CHAT_LEDGER_TOKEN", required=True, metavar="SECRET",
              help="An API token of the service (any role; env CHAT_LEDGER_TOKEN).")
@click.option("--state", "state_file", default="witness-state.json", show_default=True,
              type=click.Path(dir_okay=False), metavar="FILE",
              help="Where the witness remembers the latest checkpoint it saw (and a split view, once found).")
@click.option("--every", type=click.FloatRange(0.05), default=60.0, show_default=True, metavar="SECONDS",
              help="Seconds between polls.")
@click.option("--once", is_flag=True, help="Poll once and exit.")
@json_option('One JSON object per log and poll: {"log", "cosigned" | "unchanged" | "split_view" | "unreachable", ...}.')
def witness(logs: tuple[str, ...], public_key: str, key: str, token: str, state_file: str, every: float,
            once: bool, as_json: bool) -> None:
    """Witness a ledger service's checkpoints: check each is signed by the log and extends the last one seen
    (a consistency proof), cosign it (the service's GET /v1/checkpoints/latest then carries the cosignature).
    Prints one line per log and poll. A split view — two checkpoints of one size with different roots, or
    one that does not extend the last — is refused for good: exit 2."""
    import sys
    import time

    from commands.evidence import EvidenceError, load_private, load_public
    from commands.witness import Witness

    try:
        w = Witness(list(logs), load_public(Path(public_key)), load_private(Path(key)), token, Path(state_file))
    except EvidenceError as e:
        raise click.ClickException(str(e)) from None
    while True:
        reports = w.poll()
        for report in reports:
            emit_json(report) if as_json else click.echo(_witness_line(report))
        sys.stdout.flush()
        if any(r.get("split_view") for r in reports):
            sys.exit(2)
        if once:
            return
        time.sleep(every)


def _witness_line(r: dict[str, object]) -> str:
    if "cosigned" in r:
        return f"{r['log']}: cosigned the checkpoint of {r['cosigned']} events (root {r['root_hash']})"
    if "unchanged" in r:
        return f"{r['log']}: the checkpoint of {r['unchanged']} events, cosigned already"
    if "split_view" in r:
        return f"{r['log']}: REFUSED, {r['split_view']}"
    return f"{r['log']}: unreachable ({r['unreachable']}); trying again next poll"
