"""What a witness decides about a checkpoint it is shown (issue 27, point 5), pure: whether it is consistent with
the latest checkpoint the witness has seen of that log, given a consistency proof between the two. A witness
cosigns only what extends (or repeats) its view; anything else is a **split view** — the log showed someone a
history that is not the one it showed the witness — and it refuses, for good, to cosign on top of it."""

from __future__ import annotations

from ledger.evidence.checkpoint import Checkpoint
from ledger.evidence.merkle import verify_consistency


def split_view(seen: Checkpoint | None, shown: Checkpoint, proof: list[bytes] | None) -> str | None:
    """None when ``shown`` is consistent with ``seen`` (the older of the two's log is a prefix of the newer's,
    ``proof`` proving it), else what is wrong. ``proof`` is the consistency proof from the smaller checkpoint to
    the larger (None: the log gave none)."""
    if seen is None or seen.log_size == 0 or shown.log_size == 0:  # the empty log is a prefix of every log
        return None
    if shown.log_size == seen.log_size:
        if shown.root_hash == seen.root_hash:
            return None
        return (f"split view: two checkpoints of {shown.log_size} events with different roots ({seen.root_hash} "
                f"signed at {seen.time}, {shown.root_hash} signed at {shown.time})")
    old, new = (seen, shown) if seen.log_size < shown.log_size else (shown, seen)
    if proof is not None and verify_consistency(old.log_size, new.log_size, proof, bytes.fromhex(old.root_hash),
                                                bytes.fromhex(new.root_hash)):
        return None
    return (f"split view: the log of {new.log_size} events (signed at {new.time}) does not extend the log of "
            f"{old.log_size} events (signed at {old.time}) unchanged"
            + (" (the log gave no consistency proof)" if proof is None else ""))
