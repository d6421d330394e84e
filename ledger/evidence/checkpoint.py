"""Signed checkpoints: a statement of the log's size and Merkle root at a time, signed with Ed25519 (issue 27,
point 2). The format is docs/evidence.md's, checkable without this code:

* the **signed text** is five lines, each ended by ``\\n``: ``chat-ledger-checkpoint/v1``, the log size (decimal),
  the root hash (64 lower-case hex digits), the time (RFC 3339, UTC, ``Z``) and the key id;
* the **key id** is the first 8 bytes, in hex, of SHA-256 of the raw 32-byte Ed25519 public key;
* the **checkpoint file** is one JSON object: ``format`` ("chat-ledger-checkpoint"), ``version`` (1),
  ``log_size``, ``root_hash``, ``time``, ``key_id`` and ``signature`` (the Ed25519 signature of the signed text,
  base64).

Keys are files: the private key PKCS#8 PEM (mode 0600), the public key SubjectPublicKeyInfo PEM. The private key
never goes into the database. Every primitive is the ``cryptography`` package's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT, VERSION = "chat-ledger-checkpoint", 1
HEADER = f"{FORMAT}/v{VERSION}"


class EvidenceError(ValueError):
    """A key or checkpoint that cannot be read, or does not verify."""


def _raw_public(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public_key: Any) -> str:
    return hashlib.sha256(_raw_public(public_key)).digest()[:8].hex()


def create_keys(name: str, directory: Path) -> tuple[Path, Path]:
    """Write ``NAME.key`` (private, 0600) and ``NAME.pub``; refuses to overwrite either."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if not name or "/" in name or name.startswith("."):
        raise EvidenceError(f"a key name is a plain file name, not {name!r}")
    private_path, public_path = directory / f"{name}.key", directory / f"{name}.pub"
    for path in (private_path, public_path):
        if path.exists():
            raise EvidenceError(f"{path} exists: a key is never overwritten")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo))
    return private_path, public_path


def load_private(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise EvidenceError(f"cannot read the private key {path}: {e}") from e
    if not isinstance(key, Ed25519PrivateKey):
        raise EvidenceError(f"{path} is not an Ed25519 private key")
    return key


def load_public(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, TypeError) as e:
        raise EvidenceError(f"cannot read the public key {path}: {e}") from e
    if not isinstance(key, Ed25519PublicKey):
        raise EvidenceError(f"{path} is not an Ed25519 public key")
    return key


@dataclass(frozen=True)
class Checkpoint:
    log_size: int
    root_hash: str
    time: str
    key_id: str
    signature: str = ""

    def signed_text(self) -> bytes:
        return f"{HEADER}\n{self.log_size}\n{self.root_hash}\n{self.time}\n{self.key_id}\n".encode("ascii")

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "log_size": self.log_size, "root_hash": self.root_hash,
                "time": self.time, "key_id": self.key_id, "signature": self.signature}

    @classmethod
    def from_json(cls, data: Any) -> Checkpoint:
        try:
            if data.get("format") != FORMAT or data.get("version") != VERSION:
                raise EvidenceError(f"not a {FORMAT} version {VERSION}: format {data.get('format')!r}, "
                                    f"version {data.get('version')!r}")
            size, root_hash = data["log_size"], data["root_hash"]
            if not isinstance(size, int) or size < 0 or not isinstance(root_hash, str) or len(root_hash) != 64:
                raise EvidenceError("log_size must be a count and root_hash 64 hex digits")
            bytes.fromhex(root_hash)
            return cls(size, root_hash.lower(), str(data["time"]), str(data["key_id"]), str(data["signature"]))
        except (KeyError, AttributeError, ValueError) as e:
            if isinstance(e, EvidenceError):
                raise
            raise EvidenceError(f"not a checkpoint: {e}") from e

    @classmethod
    def read(cls, path: Path) -> Checkpoint:
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as e:
            if isinstance(e, EvidenceError):
                raise
            raise EvidenceError(f"cannot read the checkpoint {path}: {e}") from e


def sign(private_key: Any, log_size: int, root_hash: bytes, time: str) -> Checkpoint:
    unsigned = Checkpoint(log_size, root_hash.hex(), time, key_id(private_key.public_key()))
    signature = private_key.sign(unsigned.signed_text())
    return Checkpoint(unsigned.log_size, unsigned.root_hash, time, unsigned.key_id,
                      base64.b64encode(signature).decode("ascii"))


def check_signature(checkpoint: Checkpoint, public_key: Any) -> None:
    """Raise ``EvidenceError`` unless ``checkpoint`` is signed by ``public_key``."""
    from cryptography.exceptions import InvalidSignature

    if checkpoint.key_id != key_id(public_key):
        raise EvidenceError(f"the checkpoint was signed by key {checkpoint.key_id}, not by this public key "
                            f"({key_id(public_key)})")
    try:
        public_key.verify(base64.b64decode(checkpoint.signature, validate=True), checkpoint.signed_text())
    except (InvalidSignature, ValueError) as e:
        raise EvidenceError("the checkpoint's signature does not verify: it was changed after it was signed") from e


# -- witnesses (issue 27, point 5): a cosignature of a checkpoint --------------------------------------------

COSIGNATURE_HEADER = f"chat-ledger-cosignature/v{VERSION}"


def cosignature_text(checkpoint: Checkpoint, time: str) -> bytes:
    """What a witness signs: ``chat-ledger-cosignature/v1``, the time it checked the checkpoint (RFC 3339, UTC),
    then the checkpoint's own signed text (five lines) — each line ended by a newline."""
    return f"{COSIGNATURE_HEADER}\n{time}\n".encode("ascii") + checkpoint.signed_text()


def cosign_checkpoint(private_key: Any, checkpoint: Checkpoint, time: str) -> dict[str, str]:
    """The witness's cosignature of ``checkpoint``: ``{witness_key_id, time, signature}`` (base64)."""
    signature = private_key.sign(cosignature_text(checkpoint, time))
    return {"witness_key_id": key_id(private_key.public_key()), "time": time,
            "signature": base64.b64encode(signature).decode("ascii")}


def check_cosignature(checkpoint: Checkpoint, cosignature: Any, public_key: Any) -> None:
    """Raise ``EvidenceError`` unless ``cosignature`` is ``public_key``'s signature of ``checkpoint``."""
    from cryptography.exceptions import InvalidSignature

    try:
        witness, time, signature = (str(cosignature[k]) for k in ("witness_key_id", "time", "signature"))
        if witness != key_id(public_key):
            raise EvidenceError(f"the cosignature is by key {witness}, not by this witness key ({key_id(public_key)})")
        public_key.verify(base64.b64decode(signature, validate=True), cosignature_text(checkpoint, time))
    except (InvalidSignature, ValueError, KeyError, TypeError) as e:
        if isinstance(e, EvidenceError):
            raise
        raise EvidenceError(f"the cosignature does not verify against this witness key: {e or 'bad signature'}") from e


# -- proofs (issue 27, point 4): JSON files checked offline against checkpoints ----------------------------------

INCLUSION, CONSISTENCY = "chat-ledger-inclusion-proof", "chat-ledger-consistency-proof"


def inclusion_document(size: int, index: int, stream_id: str, version: int, topic: str, state: bytes,
                       path: list[bytes]) -> dict[str, Any]:
    """An inclusion proof: the entry as stored (so its leaf is recomputed, not trusted), and its audit path."""
    return {"format": INCLUSION, "version": VERSION, "log_size": size, "leaf_index": index,
            "entry": {"stream_id": stream_id, "version": version, "topic": topic,
                      "payload": base64.b64encode(state).decode("ascii")},
            "audit_path": [h.hex() for h in path]}


def consistency_document(old: Checkpoint, new_size: int, proof: list[bytes]) -> dict[str, Any]:
    """A consistency proof from ``old`` (embedded: it carries the old root and its signature) to ``new_size``."""
    return {"format": CONSISTENCY, "version": VERSION, "old": old.to_json(), "new_size": new_size,
            "proof": [h.hex() for h in proof]}


def verify_proof(document: Any, checkpoint: Checkpoint, public_key: Any) -> str:
    """Check a proof file against a checkpoint signed by ``public_key``, offline; a line saying what it proves,
    or ``EvidenceError`` saying why it does not."""
    from uuid import UUID

    from ledger.evidence.merkle import verify_consistency, verify_inclusion
    from ledger.evidence.tree import entry_bytes

    check_signature(checkpoint, public_key)
    root = bytes.fromhex(checkpoint.root_hash)
    try:
        kind = document.get("format")
        if document.get("version") != VERSION or kind not in (INCLUSION, CONSISTENCY):
            raise EvidenceError(f"not a proof of this format: {kind!r} version {document.get('version')!r}")
        if kind == INCLUSION:
            e = document["entry"]
            if document["log_size"] != checkpoint.log_size:
                raise EvidenceError(f"the proof is for a log of {document['log_size']} events, the checkpoint covers "
                                    f"{checkpoint.log_size}")
            from ledger.evidence.merkle import leaf_hash

            leaf = leaf_hash(entry_bytes(UUID(e["stream_id"]), int(e["version"]), e["topic"],
                                         base64.b64decode(e["payload"], validate=True)))
            path = [bytes.fromhex(h) for h in document["audit_path"]]
            if not verify_inclusion(leaf, int(document["leaf_index"]), checkpoint.log_size, path, root):
                raise EvidenceError("the inclusion proof does not verify: this entry, as given, is not in the log "
                                    "the checkpoint signed")
            return (f"stream {e['stream_id']} version {e['version']} is entry {document['leaf_index']} of the log of "
                    f"{checkpoint.log_size} events signed at {checkpoint.time}")
        old = Checkpoint.from_json(document["old"])
        check_signature(old, public_key)
        if document["new_size"] != checkpoint.log_size:
            raise EvidenceError(f"the proof reaches {document['new_size']} events, the checkpoint covers "
                                f"{checkpoint.log_size}")
        proof = [bytes.fromhex(h) for h in document["proof"]]
        if not verify_consistency(old.log_size, checkpoint.log_size, proof, bytes.fromhex(old.root_hash), root):
            raise EvidenceError(f"the consistency proof does not verify: the log of {checkpoint.log_size} events does "
                                f"not extend the one of {old.log_size} unchanged")
        return (f"the log of {checkpoint.log_size} events signed at {checkpoint.time} extends, unchanged, the log of "
                f"{old.log_size} events signed at {old.time}")
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, EvidenceError):
            raise
        raise EvidenceError(f"not a proof: {e}") from e
