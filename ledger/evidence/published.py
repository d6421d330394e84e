"""The checkpoints the ledger published, recorded as events of its own log (issue 27, points 2 and 5).

One stream, ``CheckpointLog`` at ``CHECKPOINTS_ID`` (found through ``ledger.streams.locate``, so a chat created
at that id blocks nothing): ``CheckpointLogStarted``, then one ``CheckpointPublished`` per checkpoint — the signed
statement of docs/evidence.md, field for field — and the witnesses' ``CheckpointCosigned`` on it. Pure: the
signatures are checked by the caller (``commands.evidence``); these rules keep the stream a sequence a reader can
trust to be ordered:

* a checkpoint covers more of the log than the last one (``log_size`` grows; one that would add only this
  stream's own events since the last — its checkpoint, its cosignatures — is not taken: an idle ledger
  publishes nothing new, however many servers publish);
* a witness cosigns the **latest** checkpoint only, once per witness key (again: nothing recorded). So the
  stream's ``log_size`` never decreases, and the checkpoint of a size is found by bisecting the stream's versions.
"""

from __future__ import annotations

from typing import Any, ClassVar
from uuid import UUID

import msgspec

from ledger.base import DeciderAggregate, Emitter, LedgerCreated, LedgerEvent
from ledger.errors import LedgerError

CHECKPOINT_LOG_TOPIC = "chat-ledger:evidence.CheckpointLog"
#: the natural id of the checkpoint stream (``ledger.streams.RESERVED_IDS`` keeps callers off it)
CHECKPOINTS_ID = UUID("c4ec4901-0000-4000-8000-00000000c4e1")


class CheckpointLogStarted(LedgerCreated):
    TOPIC = "chat-ledger:evidence.CheckpointLogStarted"


class CheckpointPublished(LedgerEvent):
    """A signed checkpoint (docs/evidence.md, "The checkpoint format"): the log's first ``log_size`` events hash
    to ``root_hash``; signed at ``time`` by the key ``key_id``. Recorded after it was signed, so it is covered by
    the next checkpoint, not by itself."""

    TOPIC = "chat-ledger:evidence.CheckpointPublished"
    log_size: int
    root_hash: str
    time: str
    key_id: str
    signature: str


class CheckpointCosigned(LedgerEvent):
    """A witness checked the checkpoint of ``log_size`` (``root_hash``) against every one it saw before and signed
    the cosignature text (docs/evidence.md, "Witnesses") at ``time`` with the key ``witness_key_id``."""

    TOPIC = "chat-ledger:evidence.CheckpointCosigned"
    log_size: int
    root_hash: str
    witness_key_id: str
    time: str
    signature: str


class Cosignature(msgspec.Struct, frozen=True):
    witness_key_id: str
    time: str
    signature: str


class Published(msgspec.Struct, frozen=True):
    log_size: int
    root_hash: str
    time: str
    key_id: str
    signature: str
    version: int  # the stream version that recorded it
    #: the first version of this stream recorded after it was signed (its own event; the stream's start too,
    #: for the first): the stream's events from here on are in the log after the checkpoint's last entry
    own_from: int


class LogState(msgspec.Struct):
    """The latest checkpoint (None before the first), its cosignatures, and how many were published."""

    latest: Published | None = None
    cosignatures: list[Cosignature] = msgspec.field(default_factory=list)
    published: int = 0
    version: int = 0


def evolve(state: LogState | None, event: Any) -> LogState:
    if isinstance(event, CheckpointLogStarted):
        state = LogState()
    elif isinstance(event, CheckpointPublished):
        assert state is not None
        own_from = 1 if state.latest is None else event.originator_version
        state.latest = Published(event.log_size, event.root_hash, event.time, event.key_id, event.signature,
                                 event.originator_version, own_from)
        state.cosignatures = []
        state.published += 1
    elif isinstance(event, CheckpointCosigned):
        assert state is not None
        state.cosignatures = [*state.cosignatures, Cosignature(event.witness_key_id, event.time, event.signature)]
    else:  # pragma: no cover - the stream holds checkpoint events only
        raise TypeError(f"not a checkpoint event: {type(event).__name__}")
    state.version = event.originator_version
    return state


def publish(state: LogState | None, em: Emitter, *, log_size: int, root_hash: str, time: str, key_id: str,
            signature: str) -> list[Any]:
    """Record a signed checkpoint, unless it covers nothing new: its log must hold more events after the last
    checkpoint than this stream recorded since (the last checkpoint's own event, its cosignatures), else ``[]``."""
    if state is None:
        em.emit(CheckpointLogStarted, originator_topic=CHECKPOINT_LOG_TOPIC)
    elif state.latest is not None and log_size - state.latest.log_size <= state.version - state.latest.own_from + 1:
        return []
    em.emit(CheckpointPublished, log_size=log_size, root_hash=root_hash, time=time, key_id=key_id,
            signature=signature)
    return em.events


def cosign(state: LogState | None, em: Emitter, *, log_size: int, root_hash: str, witness_key_id: str, time: str,
           signature: str) -> list[Any]:
    """Record a witness's cosignature of the latest checkpoint (once per witness key: a repeat records nothing)."""
    latest = state.latest if state is not None else None
    if latest is None or log_size > latest.log_size:
        raise LedgerError("checkpoint_not_found", f"no checkpoint of {log_size} events was published")
    if log_size < latest.log_size:
        raise LedgerError("checkpoint_superseded", f"the checkpoint of {log_size} events is no longer the latest "
                                                   f"({latest.log_size}): cosign the latest")
    if root_hash != latest.root_hash:
        raise LedgerError("checkpoint_mismatch", f"the checkpoint of {log_size} events has root {latest.root_hash}, "
                                                 f"not {root_hash}")
    assert state is not None
    if any(c.witness_key_id == witness_key_id for c in state.cosignatures):
        return []
    em.emit(CheckpointCosigned, log_size=log_size, root_hash=root_hash, witness_key_id=witness_key_id, time=time,
            signature=signature)
    return em.events


class CheckpointLog(DeciderAggregate):
    """The singleton stream of published checkpoints; ``state`` is a ``LogState``."""

    TOPIC: ClassVar[str] = CHECKPOINT_LOG_TOPIC
    CACHED: ClassVar[bool] = True
    state: LogState
    evolve = staticmethod(evolve)


# -- people's data in these events (issue 28, point 1: ``ledger.privacy``): none — hashes, times, key ids.
PERSONAL: dict[type, dict[str, str]] = {}
_SIGNED = {"root_hash": "a Merkle root", "time": "when it was signed", "signature": "an Ed25519 signature"}
NOT_PERSONAL: dict[type, dict[str, str]] = {
    CheckpointPublished: {**_SIGNED, "key_id": "a key's id"},
    CheckpointCosigned: {**_SIGNED, "witness_key_id": "a key's id"},
}
