"""``chat-ledger events verify|stats|export|import|rehash`` (``commands.eventlog_verify``, ``commands.eventlog``,
``commands.eventlog_transfer`` and ``ledger.rehash`` do the work)."""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any, Iterable, Iterator

import click

from commands import views
from commands.cli.context import (
    Ctx, emit_json, json_flag, json_lines_flag, json_option, pass_ctx, print_rows, progress_bar,
)
from commands.eventlog import stats
from commands.eventlog_transfer import export_lines, import_lines
from commands.eventlog_verify import verify


@click.group()
def events() -> None:
    """Stored events: verify, stats, export, import, rehash, checkpoint, prove, encrypt-existing."""


@events.command("verify")
@json_option("Print the report as one JSON object.")
@click.option("--no-projections", is_flag=True, help="Only decode and replay the streams.")
@click.option("--decisions", is_flag=True,
              help="Also re-decide every recorded decision with the facts as of its position.")
@click.option("--upto", type=click.IntRange(min=0), metavar="N",
              help="Check the log up to notification N only (the head of a digest kept earlier); implies "
                   "--no-projections; a log that ends before N fails.")
@click.option("--expect-digest", metavar="HEX", help="Fail unless the log's digest (up to --upto) is HEX.")
@click.option("--checkpoint", "checkpoint_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also check the log against a signed checkpoint (with --public-key): the Merkle root of its "
                   "first events, recomputed from what is stored, must be the one signed (docs/evidence.md).")
@click.option("--public-key", type=click.Path(dir_okay=False), metavar="FILE",
              help="The public key the checkpoint must be signed with.")
@pass_ctx
def events_verify(c: Ctx, as_json: bool, no_projections: bool, decisions: bool, upto: int | None,
                  expect_digest: str | None, checkpoint_file: str | None, public_key: str | None) -> None:
    """Decode and replay every stored event, check invariants and projections; exit 1 on any anomaly."""
    if (checkpoint_file is None) != (public_key is None):
        raise click.UsageError("--checkpoint and --public-key go together")
    no_projections = no_projections or upto is not None
    backend = None if no_projections else c.backend
    with progress_bar("verifying", c.app.head() if upto is None else upto) as progress:
        report = verify(c.app, backend, None if no_projections else views.all_projections(c.app),
                        decisions=decisions, heads=as_json, progress=progress, upto=upto)
    if checkpoint_file is not None and public_key is not None:
        from pathlib import Path

        from commands.evidence import check_checkpoint_files

        report["anomalies"].extend(check_checkpoint_files(c.app, Path(checkpoint_file), Path(public_key)))
        report["ok"] = not report["anomalies"]
    if expect_digest is not None and report["chain"]["digest"] != expect_digest.strip().lower():
        report["ok"] = False
        report["anomalies"].append({"stream_id": None, "version": None, "notification_id": report["head"],
                                    "check": "digest", "reason": f"the log's digest up to notification "
                                    f"{report['head']} is {report['chain']['digest']}, not {expect_digest}"})
    if as_json:
        emit_json(report)
    else:
        click.echo(f"verified {report['events']} events in {report['streams']} streams "
                   f"(head {report['head']})")
        for a in report["anomalies"]:
            where = f" notification {a['notification_id']}" if a.get("notification_id") else ""
            what = f"stream {a['stream_id']} version {a['version']}{where}" if a["stream_id"] else "log"
            click.echo(f"  {what}: [{a['check']}] {a['reason']}")
        ch = report["chain"]
        unproven = len(ch["unproven"])
        click.echo(f"  chain: {ch['streams'] - ch['broken'] - ch['unhashed'] - unproven} of {ch['streams']} streams "
                   f"linked, {ch['broken']} broken, {ch['unhashed']} unhashed"
                   + (f", {unproven} imported without proof (events import --unverified: nothing proves their "
                      "history before the import)" if unproven else "") + f"; digest {ch['digest']}")
        for p in report["projections"]:
            click.echo(f"  projection {p['projection']}: {p['result']}"
                       + (f", position {p['position']}, lag {p['lag']}, {p['rows_compared']} rows compared"
                          if p["position"] is not None else ""))
        if "decisions" in report:
            d = report["decisions"]
            click.echo("  decisions re-decided: " + (", ".join(f"{n} {k}" for k, n in d["checked"].items()) or "none")
                       + f"; {d['disagreements']} disagreements")
        if not report["ok"]:
            click.echo(f"FAILED: {len(report['anomalies'])} anomalies")
        else:
            click.echo(f"OK, but {len(ch['unproven'])} streams were imported without proof" if ch["unproven"] else "OK")
    sys.exit(0 if report["ok"] else 1)


@events.command("checkpoint")
@click.option("--key", "key_file", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="The Ed25519 private key to sign with (`chat-ledger keys create`).")
@click.option("-o", "--output", "out", default="-", metavar="FILE", help="Where to write it (default: stdout).")
@json_option("With -o FILE: print the checkpoint as JSON on standard output too (it always is JSON).")
@pass_ctx
def events_checkpoint(c: Ctx, key_file: str, out: str, as_json: bool) -> None:
    """Sign the log's size and Merkle root now: a checkpoint anyone can hold the ledger to (docs/evidence.md)."""
    from pathlib import Path

    from commands.evidence import EvidenceError, make_checkpoint

    try:
        checkpoint = make_checkpoint(c.app, Path(key_file))
    except EvidenceError as e:
        raise click.ClickException(str(e)) from None
    if _write_document(checkpoint.to_json(), out, as_json):
        click.echo(f"checkpoint of {checkpoint.log_size} events, root {checkpoint.root_hash[:16]}…, "
                   f"signed by key {checkpoint.key_id}: {out}", err=True)


def _write_document(document: dict[str, Any], out: str, as_json: bool) -> bool:
    """A JSON document (a checkpoint, a proof) to standard output (``-``) or to the file ``out`` (and to standard
    output too with ``--json``); whether it went to a file."""
    from pathlib import Path

    text = json.dumps(document, indent=2) + "\n"
    if out != "-":
        Path(out).write_text(text)
    if out == "-" or as_json:
        click.echo(text, nl=False)
    return out != "-"


@events.command("prove")
@click.argument("stream", required=False)
@click.argument("version", type=click.IntRange(min=0), required=False)
@click.option("--checkpoint", "checkpoint_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="The checkpoint the inclusion proof is for.")
@click.option("--consistency", nargs=2, type=click.Path(dir_okay=False), metavar="OLD NEW",
              help="Prove that checkpoint NEW's log extends checkpoint OLD's unchanged (instead of STREAM VERSION).")
@click.option("-o", "--output", "out", default="-", metavar="FILE", help="Where to write it (default: stdout).")
@json_option("With -o FILE: print the proof as JSON on standard output too (it always is JSON).")
@pass_ctx
def events_prove(c: Ctx, stream: str | None, version: int | None, checkpoint_file: str | None,
                 consistency: tuple[str, str] | None, out: str, as_json: bool) -> None:
    """An inclusion proof of one event in a checkpoint's log, or a consistency proof between two checkpoints;
    `chat-ledger proof verify` checks either offline (docs/evidence.md)."""
    from pathlib import Path

    from commands.evidence import EvidenceError, prove_consistency, prove_inclusion

    try:
        if consistency:
            if stream is not None or checkpoint_file is not None:
                raise click.UsageError("--consistency OLD NEW takes no STREAM VERSION and no --checkpoint")
            document = prove_consistency(c.app, Path(consistency[0]), Path(consistency[1]))
        else:
            if stream is None or version is None or checkpoint_file is None:
                raise click.UsageError("give STREAM VERSION --checkpoint FILE, or --consistency OLD NEW")
            document = prove_inclusion(c.app, c.stream_id(stream), version, Path(checkpoint_file))
    except EvidenceError as e:
        raise click.ClickException(str(e)) from None
    _write_document(document, out, as_json)


@events.command("stats")
@json_lines_flag
@pass_ctx
def events_stats(c: Ctx, as_json: bool) -> None:
    """Stored events per topic and stored class version (and the code's class version)."""
    rows = stats(c.app)
    print_rows(rows, as_json, ("topic", "class_version", "count", "code_class_version", "known"))
    if as_json:
        return
    click.echo(f"total {sum(r['count'] for r in rows)}")


@events.command("export")
@click.option("--since", type=int, default=0, show_default=True, help="Only events after this notification id.")
@click.option("--output", "-o", type=click.File("wb"), default="-", help="File to write (- for standard output, the default).")
@json_option('Print the summary on stderr as JSON ({"exported": N}).')
@pass_ctx
def events_export(c: Ctx, since: int, output: Any, as_json: bool) -> None:
    """Write the stored events as JSON lines (a header line first), in notification order."""
    n = -1
    with progress_bar("exporting", max(c.app.head() - since, 0)) as progress:
        for line in export_lines(c.app, since):
            output.write(line + b"\n")
            n += 1
            if progress is not None and n % 1000 == 0:
                progress(n, max(c.app.head() - since, n))
        if progress is not None:
            progress(n, n)
    if as_json:
        emit_json({"exported": n}, err=True)
    else:
        click.echo(f"exported {n} events", err=True)


@events.command("import")
@click.argument("file", type=click.File("rb"))
@click.option("--unverified", is_flag=True,
              help="Import a version 1 export (its lines carry no hashes): its streams are recorded for good as "
                   "imported without proof, and events verify says so.")
@click.option("--keep-erasures-of", "erasures_of", metavar="URL",
              help="Keep the erasures of this ledger (a sealed one: the export's origin, as it is now): a key it "
                   "destroyed is imported destroyed, whatever the (older) export holds (docs/privacy.md).")
@json_option('Print the result as JSON ({"imported": N}).')
@pass_ctx
def events_import(c: Ctx, file: Any, unverified: bool, erasures_of: str | None, as_json: bool) -> None:
    """Record an export (FILE or - for stdin) into an empty database: every line is checked first, then
    the whole file is recorded in one transaction (all of it or nothing)."""
    erased = None
    if erasures_of is not None:
        from commands.eventlog_transfer import destroyed_keys

        erased = destroyed_keys(erasures_of)
    first = file.readline()  # the header: how many events the export holds (for the progress bar)
    try:
        total = int(json.loads(first).get("head", 0))
    except (ValueError, TypeError, AttributeError):
        total = 0  # (the import names what is wrong with the header)
    with progress_bar("validating", total) as progress:
        said = (lambda count: click.echo(f"validated {count} events; recording them in one transaction", err=True)) \
            if progress is not None else None
        n = import_lines(c.app, counted(itertools.chain([first], file), progress, total), on_validated=said,
                         unverified=unverified, erased=erased)
    if as_json:
        emit_json({"imported": n})
    else:
        click.echo(f"imported {n} events")


@events.command("encrypt-existing")
@click.option("--to", "to", required=True, metavar="URL", help="The new, empty ledger to copy into, sealed.")
@json_option('Print the result as JSON ({"events", "keys", "verified", "first_difference"}).')
@pass_ctx
def events_encrypt_existing(c: Ctx, to: str, as_json: bool) -> None:
    """Copy this ledger (which stores people's data unsealed) into a new empty ledger that seals it under each
    subject's keys (CHAT_LEDGER_MASTER_KEY), then compare every event field by field. A new log: this one is left
    as it is, to keep or delete (docs/privacy.md)."""
    from commands.reseal import encrypt_existing
    from ledger.store import open_app

    old = c.app  # (the ledger to copy first: one that does not exist is refused before anything is made)
    new = open_app(to)
    try:
        with progress_bar("sealing", old.head()) as progress:
            result = encrypt_existing(old, new, progress)
    finally:
        new.close()
    if as_json:
        emit_json(result)
    else:
        click.echo(f"sealed {result['events']} events into {to} ({result['keys']} subject keys); "
                   f"{result['verified']} read back equal")
    if result["first_difference"] is not None:
        d = result["first_difference"]
        raise click.ClickException(f"the copy differs at stream {d['stream']} version {d['version']}: {d['fields']}")


def counted(lines: Iterable[bytes], progress: Any, total: int) -> Iterator[bytes]:
    """``lines``, telling ``progress`` every 1,000 (the header aside)."""
    n = -1
    for n, line in enumerate(lines):
        if progress is not None and n and n % 1000 == 0:
            progress(n, max(total, n))
        yield line
    if progress is not None:
        progress(max(n, 0), max(n, 0))


@events.command("rehash")
@json_flag
@pass_ctx
def events_rehash(c: Ctx, as_json: bool) -> None:
    """Give the streams recorded before hash chains their chains (streams with hashes are never rewritten), and
    build the log's Merkle tree up to its head (docs/evidence.md)."""
    from commands.evidence import extend_tree
    from ledger.rehash import rehash

    out = rehash(c.app)
    out["merkle_tree_size"] = extend_tree(c.app)
    if as_json:
        emit_json(out)
    else:
        click.echo(f"linked {out['streams']} streams ({out['events']} events) of {out['checked']}; the Merkle tree "
                   f"holds {out['merkle_tree_size']} events"
                   + (f"; {out['broken']} streams have a broken chain, left as they are (`events verify` names them)"
                      if out["broken"] else ""))
    sys.exit(1 if out["broken"] else 0)
