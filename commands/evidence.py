"""The service layer of the evidence (issue 27): checkpoints of the stored Merkle tree, and a log checked
against a checkpoint by recomputing the tree from the stored events alone (docs/evidence.md)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from uuid import UUID

from commands.uow import UnitOfWork, run
from ledger.base import Emitter
from ledger.chain import scan
from ledger.errors import LedgerError
from ledger.evidence import published
from ledger.evidence.checkpoint import (
    Checkpoint, EvidenceError, check_cosignature, check_signature, consistency_document, create_keys,
    inclusion_document, key_id, load_private, load_public, sign, verify_proof,
)
from ledger.evidence.published import CHECKPOINTS_ID, CheckpointLog
from ledger.evidence.merkle import Frontier, consistency_proof, inclusion_proof
from ledger.evidence.tree import StoredTree, entry_hash
from ledger.streams import locate


def utc_now() -> str:
    """Now, as checkpoints and cosignatures write it (RFC 3339, UTC, seconds, ``Z``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def make_checkpoint(app: Any, key_path: Path) -> Checkpoint:
    """Extend the stored tree to the log's head and sign its size and root now."""
    return _signed_now(app, load_private(key_path))


def extend_tree(app: Any) -> int:
    """Extend the stored tree to the log's head (``events rehash``: an existing ledger's tree built once); its
    size."""
    return StoredTree(app).catch_up()


def _signed_now(app: Any, key: Any) -> Checkpoint:
    tree = StoredTree(app)
    size = tree.catch_up()
    return sign(key, size, tree.root(size), utc_now())


# -- the checkpoints the service publishes (``serve --checkpoint-key``), recorded in the log ----------------------

def publish_checkpoint(app: Any, key: Any) -> Checkpoint | None:
    """Sign the log as it is now and record the checkpoint as an event of the log (``CheckpointPublished``);
    None when the log holds nothing new since the last one (``ledger.evidence.published.publish``)."""
    checkpoint = _signed_now(app, key)
    fields = {k: v for k, v in checkpoint.to_json().items() if k not in ("format", "version")}
    return checkpoint if _record_on_log(app, lambda state, em: published.publish(state, em, **fields)) else None


def _record_on_log(app: Any, decide: Callable[[Any, Emitter], list[Any]]) -> bool:
    """Record what ``decide(state, emitter)`` decides on the checkpoints' stream (made by its first event);
    whether it recorded anything."""
    def work(uow: UnitOfWork) -> bool:
        stream_id, agg = locate(app, CheckpointLog, CHECKPOINTS_ID, uow.get_cached)
        events = decide(agg.state if agg is not None else None,
                        Emitter(stream_id, agg.version if agg is not None else 0, uow.now))
        if events:
            uow.create(CheckpointLog, events) if agg is None else uow.record(agg, events)
        return bool(events)

    return run(app, work)


def _log(app: Any) -> tuple[UUID, Any]:
    """The checkpoints' stream id and aggregate (None before the first), read through the application's cache."""
    return locate(app, CheckpointLog, CHECKPOINTS_ID, lambda i: app.load_cached(i, copy=False))


def _document(p: Any, cosignatures: list[Any]) -> dict[str, Any]:
    """A published checkpoint as served: the checkpoint file's object (docs/evidence.md) and its cosignatures."""
    document = Checkpoint(p.log_size, p.root_hash, p.time, p.key_id, p.signature).to_json()
    return {**document, "cosignatures": [{"witness_key_id": c.witness_key_id, "time": c.time,
                                          "signature": c.signature} for c in cosignatures]}


def latest_checkpoint(app: Any) -> dict[str, Any]:
    """``GET /v1/checkpoints/latest``: the latest published checkpoint with its witnesses' cosignatures."""
    _, agg = _log(app)
    if agg is None or agg.state.latest is None:
        raise LedgerError("checkpoint_not_found", "no checkpoint was published yet (serve --checkpoint-key)")
    return _document(agg.state.latest, agg.state.cosignatures)


def checkpoint_of_size(app: Any, size: int) -> dict[str, Any]:
    """``GET /v1/checkpoints/{size}``: the published checkpoint of ``size`` events, found by bisecting the
    stream's versions (its log sizes never decrease: ``ledger.evidence.published``), with its cosignatures."""
    stream_id, agg = _log(app)
    if agg is not None:
        at = lambda v: app.stream(stream_id, gt=v - 1, lte=v)[0]  # noqa: E731 - one event by version
        lo, hi = 2, agg.version  # version 1 starts the stream
        while lo < hi:  # the first version whose log size is at least ``size``
            mid = (lo + hi) // 2
            if at(mid).log_size < size:
                lo = mid + 1
            else:
                hi = mid
        if lo <= agg.version and isinstance(found := at(lo), published.CheckpointPublished) \
                and found.log_size == size:
            following = app.stream(stream_id, gt=lo, lte=min(agg.version, lo + 1000))
            cosigned = [e for e in following if isinstance(e, published.CheckpointCosigned) and e.log_size == size]
            return _document(found, cosigned)
    raise LedgerError("checkpoint_not_found", f"no checkpoint of {size} events was published")


def record_cosignature(app: Any, log_size: int, cosignature: dict[str, Any], witness_keys: list[Any]) -> bool:
    """``POST /v1/checkpoints/{size}/cosignatures``: a witness's cosignature of the latest checkpoint, checked
    against the witness keys the service trusts (``serve --witness-key``); True when recorded, False when that
    witness had cosigned it already."""
    document = checkpoint_of_size(app, log_size)
    checkpoint = Checkpoint.from_json(document)
    trusted = {key_id(k): k for k in witness_keys}
    witness = str(cosignature.get("witness_key_id", ""))
    if witness not in trusted:
        raise LedgerError("witness_unknown", f"the key {witness!r} is not a witness this service trusts "
                                             "(serve --witness-key)")
    try:
        check_cosignature(checkpoint, cosignature, trusted[witness])
    except EvidenceError as e:
        raise LedgerError("invalid_request", str(e)) from e

    return _record_on_log(app, lambda state, em: published.cosign(
        state, em, log_size=log_size, root_hash=checkpoint.root_hash, witness_key_id=witness,
        time=str(cosignature["time"]), signature=str(cosignature["signature"])))


def check_checkpoint(app: Any, checkpoint: Checkpoint, public_key: Any) -> list[dict[str, Any]]:
    """The anomalies of the log against ``checkpoint`` (none: the log's first ``log_size`` events are what was
    signed). The root is recomputed from the stored events themselves — never from the stored tree, which whoever
    can write the database can rewrite too; the stored tree only helps to name the first entry that differs."""
    check_signature(checkpoint, public_key)
    size = checkpoint.log_size
    frontier = Frontier()  # O(log n) memory: the log is read once, in notification order
    for n in scan(app, app.head(), by_notification=True):
        if frontier.size == size:
            break
        frontier.append(entry_hash(n))
    if frontier.size < size:
        return [_anomaly(None, f"the log holds {frontier.size} events, the checkpoint of {checkpoint.time} covers "
                               f"{size}: events were deleted (the log, or a stream, was truncated)")]
    if frontier.root().hex() == checkpoint.root_hash:
        return []
    return [_first_difference(app, checkpoint)]


def _first_difference(app: Any, checkpoint: Checkpoint) -> dict[str, Any]:
    """Which entry differs (a second pass, only when the root does): the first whose event or hash is not the
    stored tree's — when the stored tree is still the one that was signed."""
    size = checkpoint.log_size
    tree = StoredTree(app)
    if tree.size() >= size and tree.root(size).hex() == checkpoint.root_hash:
        events = scan(app, app.head(), by_notification=True)
        for (idx, stored_nid, stored_hash), n in zip(tree.leaves(size), events):
            if n.id != stored_nid or entry_hash(n) != stored_hash:
                what = ("an event was inserted, deleted or moved before it" if n.id != stored_nid
                        else "its topic, payload, stream or version was changed")
                return _anomaly(n, f"entry {idx} of the log (notification {n.id}) differs from the one "
                                   f"checkpointed at {checkpoint.time}: {what}")
    return _anomaly(None, f"the log's first {size} events do not hash to the root of the checkpoint of "
                          f"{checkpoint.time}, and the stored Merkle tree was rewritten too: an older checkpoint or "
                          "an inclusion proof narrows down which entry changed")


def _anomaly(n: Any, reason: str) -> dict[str, Any]:
    stream = None if n is None else str(n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id)))
    return {"stream_id": stream, "version": None if n is None else n.originator_version,
            "notification_id": None if n is None else n.id, "check": "checkpoint", "reason": reason}


def new_keys(name: str, directory: Path) -> tuple[Path, Path, str]:
    """``keys create``: the private and public key files and the key id."""
    private, public = create_keys(name, directory)
    return private, public, key_id(load_public(public))


def check_checkpoint_files(app: Any, checkpoint_path: Path, public_key_path: Path) -> list[dict[str, Any]]:
    """``events verify --checkpoint FILE --public-key FILE``: the anomalies, an unreadable or unsigned file among
    them."""
    try:
        return check_checkpoint(app, Checkpoint.read(checkpoint_path), load_public(public_key_path))
    except EvidenceError as e:
        return [_anomaly(None, str(e))]


def _tree_at(app: Any, checkpoint: Checkpoint) -> StoredTree:
    """The stored tree, extended, and checked to be the one ``checkpoint`` signed (a proof from another tree
    would not verify: say why here instead)."""
    tree = StoredTree(app)
    if tree.catch_up() < checkpoint.log_size:
        raise EvidenceError(f"the log holds fewer events than the checkpoint's {checkpoint.log_size}: events were "
                            "deleted (`events verify --checkpoint` names them)")
    if tree.root(checkpoint.log_size).hex() != checkpoint.root_hash:
        raise EvidenceError("the stored tree is not the one this checkpoint signed: the log changed "
                            "(`events verify --checkpoint` names the entry)")
    return tree


def prove_inclusion(app: Any, stream_id: UUID, version: int, checkpoint_path: Path) -> dict[str, Any]:
    """``events prove STREAM VERSION --checkpoint FILE``: that the event is in the checkpointed log."""
    checkpoint = Checkpoint.read(checkpoint_path)
    tree = _tree_at(app, checkpoint)
    document = _inclusion(tree, stream_id, version, checkpoint.log_size)
    if document is None:
        raise EvidenceError(f"stream {stream_id} version {version} is not among the {checkpoint.log_size} events "
                            "the checkpoint covers")
    return document


def _inclusion(tree: StoredTree, stream_id: UUID, version: int, size: int) -> dict[str, Any] | None:
    """The inclusion proof of a stream's event in the tree's first ``size`` leaves (None: it is not among them),
    carrying the entry as stored."""
    found = tree.leaf_of(stream_id, version)
    if found is None or found[0] >= size:
        return None
    index, topic, state = found
    return inclusion_document(size, index, str(stream_id), version, topic, state,
                              tree.batched(lambda node: inclusion_proof(node, index, size)))


def prove_consistency(app: Any, old_path: Path, new_path: Path) -> dict[str, Any]:
    """``events prove --consistency OLD NEW``: that the newer checkpoint's log extends the older one unchanged."""
    old, new = Checkpoint.read(old_path), Checkpoint.read(new_path)
    if old.log_size > new.log_size or old.log_size == 0:
        raise EvidenceError(f"no consistency proof from {old.log_size} to {new.log_size} events: give the older "
                            "checkpoint first (of at least one event)")
    tree = _tree_at(app, new)
    return consistency_document(old, new.log_size,
                                tree.batched(lambda node: consistency_proof(node, old.log_size, new.log_size)))


def verify_proof_files(proof_path: Path, checkpoint_path: Path, public_key_path: Path) -> str:
    """``proof verify``: offline, no database."""
    import json

    try:
        document = json.loads(Path(proof_path).read_text())
    except (OSError, ValueError) as e:
        raise EvidenceError(f"cannot read the proof {proof_path}: {e}") from e
    return verify_proof(document, Checkpoint.read(checkpoint_path), load_public(public_key_path))


# -- proofs over HTTP (``GET /v1/proofs/...``): for a tree size, not a checkpoint file -------------------------

def _sized_tree(app: Any, size: int) -> StoredTree:
    """The stored tree as it is (a read never writes: the tree is extended by ``events checkpoint``)."""
    tree = StoredTree(app)
    have = tree.size()
    if not 0 < size <= have:
        raise LedgerError("invalid_request", f"size must be between 1 and the {have} events the stored tree holds "
                                             f"(a checkpoint extends it), not {size}")
    return tree


def inclusion_at(app: Any, stream_id: UUID, version: int, size: int) -> dict[str, Any]:
    """The inclusion proof of a stream's event in the log's first ``size`` events, with that tree's root."""
    tree = _sized_tree(app, size)
    document = _inclusion(tree, stream_id, version, size)
    if document is None:
        raise LedgerError("version_not_found", f"stream {stream_id} has no version {version} among the log's "
                                               f"first {size} events")
    return {**document, "root_hash": tree.root(size).hex()}


def consistency_at(app: Any, old: int, new: int) -> dict[str, Any]:
    """The consistency proof between the log's first ``old`` and first ``new`` events, with both roots."""
    if not 0 < old <= new:
        raise LedgerError("invalid_request", f"from must be at least 1 and at most to ({old}, {new})")
    tree = _sized_tree(app, new)
    return {"old_size": old, "new_size": new, "old_root_hash": tree.root(old).hex(),
            "new_root_hash": tree.root(new).hex(),
            "proof": [h.hex() for h in tree.batched(lambda node: consistency_proof(node, old, new))]}


# -- a chat's evidence: the audit page's checkpoint and proofs, the bundle (issue 27, point 6) --------------------

def covered_versions(tree: StoredTree, stream_id: UUID, last_version: int, size: int) -> int:
    """How many of a stream's first versions are among the log's first ``size`` entries (a stream's events are
    in the log in version order, so it is a prefix: found by bisection, O(log n) keyed reads)."""
    def covered(version: int) -> bool:
        found = tree.leaf_of(stream_id, version)
        return found is not None and found[0] < size

    lo, hi = 0, last_version  # the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if covered(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def chat_evidence(app: Any, stream_id: UUID, last_version: int) -> dict[str, Any] | None:
    """The latest published checkpoint and how many of the stream's versions it covers (None when no checkpoint
    was published, or it covers none of them): what the audit page shows."""
    try:
        checkpoint = latest_checkpoint(app)
    except LedgerError:
        return None
    tree = StoredTree(app)
    if tree.size() < checkpoint["log_size"]:
        return None
    covered = covered_versions(tree, stream_id, last_version, checkpoint["log_size"])
    return {**checkpoint, "covered": covered} if covered else None


BUNDLE_FORMAT = "chat-ledger-evidence-bundle"


def write_bundle(app: Any, stream_id: UUID, last: int, directory: Path, checkpoint: Checkpoint,
                 page: Callable[[int, dict[str, Any]], str]) -> dict[str, Any]:
    """``audit CHAT --bundle DIR``: the stream's events the checkpoint covers (``events.jsonl``: each as stored),
    an inclusion proof of each (``proofs/v<N>.json``), the checkpoint (``checkpoint.json``) and the audit page of
    the stream at that version with links to the proofs (``page.html``: ``page(version, evidence)``); ``last``: the
    stream's last version. ``proof verify --bundle`` checks the lot offline."""
    import json

    tree = _tree_at(app, checkpoint)
    covered = covered_versions(tree, stream_id, last, checkpoint.log_size)
    if covered == 0:
        raise EvidenceError(f"the checkpoint of {checkpoint.log_size} events covers no event of {stream_id}")
    (directory / "proofs").mkdir(parents=True, exist_ok=True)
    lines = []
    for version in range(1, covered + 1):
        document = _inclusion(tree, stream_id, version, checkpoint.log_size)
        assert document is not None  # (covered)
        (directory / "proofs" / f"v{version}.json").write_text(json.dumps(document, indent=1) + "\n")
        lines.append(json.dumps({"leaf_index": document["leaf_index"], **document["entry"]}))
    (directory / "events.jsonl").write_text("\n".join(lines) + "\n")
    (directory / "checkpoint.json").write_text(json.dumps(checkpoint.to_json(), indent=1) + "\n")
    (directory / "page.html").write_text(page(covered, {**checkpoint.to_json(), "cosignatures": [],
                                                        "covered": covered}))
    manifest = {"format": BUNDLE_FORMAT, "version": 1, "stream_id": str(stream_id), "versions": covered,
                "log_size": checkpoint.log_size, "events_after": last - covered}
    (directory / "bundle.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def verify_bundle(directory: Path, public_key_path: Path) -> str:
    """``proof verify --bundle DIR --public-key FILE``, offline: the checkpoint is signed by the key; every event
    of ``events.jsonl`` is, as given, an entry of the log it signed (its proof verifies); they are the stream's
    versions 1..N, each once, in the log's order. A line saying so, or ``EvidenceError`` naming what fails."""
    import json

    public_key = load_public(public_key_path)
    checkpoint = Checkpoint.read(directory / "checkpoint.json")
    check_signature(checkpoint, public_key)
    try:
        entries = [json.loads(line) for line in (directory / "events.jsonl").read_text().splitlines() if line]
        manifest = json.loads((directory / "bundle.json").read_text())
    except (OSError, ValueError) as e:
        raise EvidenceError(f"not an evidence bundle: {e}") from e
    if not entries:
        raise EvidenceError("the bundle holds no events")
    stream = entries[0].get("stream_id")
    last_index = -1
    for n, entry in enumerate(entries, start=1):
        where = f"event {n} of events.jsonl"
        if entry.get("stream_id") != stream or entry.get("version") != n:
            raise EvidenceError(f"{where} is not version {n} of stream {stream}: an event is missing, added or out "
                                "of order")
        path = directory / "proofs" / f"v{n}.json"
        try:
            proof = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise EvidenceError(f"{where}: no readable proof {path.name}: {e}") from e
        if proof.get("entry") != {k: entry.get(k) for k in ("stream_id", "version", "topic", "payload")} \
                or proof.get("leaf_index") != entry.get("leaf_index"):
            raise EvidenceError(f"{where} differs from the entry its proof {path.name} proves")
        try:
            verify_proof(proof, checkpoint, public_key)
        except EvidenceError as e:
            raise EvidenceError(f"{where} (version {n}): {e}") from e
        if entry["leaf_index"] <= last_index:
            raise EvidenceError(f"{where} comes before the event it follows in the log")
        last_index = entry["leaf_index"]
    if manifest.get("stream_id") != stream or manifest.get("versions") != len(entries):
        raise EvidenceError(f"bundle.json names {manifest.get('versions')} versions of {manifest.get('stream_id')}, "
                            f"the bundle holds {len(entries)} of {stream}")
    return (f"stream {stream}: versions 1 to {len(entries)}, as the bundle holds them, are entries of the log of "
            f"{checkpoint.log_size} events signed at {checkpoint.time} by key {checkpoint.key_id}")


def bundle_checkpoint(app: Any, checkpoint_path: Path | None, key_path: Path | None) -> Checkpoint:
    """The checkpoint a bundle is made against: the file given, one signed now with the key given, or else the
    latest the service published (``EvidenceError`` when there is none)."""
    if checkpoint_path is not None and key_path is not None:
        raise EvidenceError("give --checkpoint or --key, not both")
    if checkpoint_path is not None:
        return Checkpoint.read(checkpoint_path)
    if key_path is not None:
        return make_checkpoint(app, key_path)
    try:
        return Checkpoint.from_json(latest_checkpoint(app))
    except LedgerError as e:
        raise EvidenceError(f"{e.message}: give --checkpoint FILE or --key FILE") from e
