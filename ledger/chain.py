"""Hash chains over the stored events: each stream's events are linked by sha256, so an edited, deleted,
inserted or reordered event breaks its stream's chain (``events verify`` names where).

``link(prev, topic, version, state)`` is sha256 over the previous event's hash (32 zero bytes for a stream's
first event: version 1, or 0 where a stream starts there as in the eventsourcing library's own recorder
tests), the version (8 bytes, big-endian), the topic's UTF-8 length (4 bytes, big-endian), the topic and the
stored payload bytes. The recorders fill the hash at insert, in the insert statement (``chain_hash``
column; SQLite: a registered function, PostgreSQL: ``sha256()``), reading the previous hash in the same
transaction. An event whose previous event has no hash gets none: a stream recorded before hash chains
stays unhashed until ``events rehash`` (``commands.chain``) links it.

The digest of the log is sha256 over every stream's ``(stream id bytes, head version, head hash)`` in
stream-id order: one value a user keeps elsewhere to prove later that nothing before it changed.

The chain is not a signature: whoever can write the database can also recompute every hash. It proves
an edit only against a head hash or a digest kept out of the database's reach.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence
from uuid import UUID

from eventsourcing.persistence import Notification

from ledger.eventsql import STREAM_ORDER, stored_events_query

#: the "previous hash" of a stream's first event
GENESIS = bytes(32)
#: the stored events table's column holding each event's chain hash
COLUMN = "chain_hash"
_HEADER = struct.Struct(">qI")


def link(prev: bytes | None, topic: str, version: int, state: bytes) -> bytes | None:
    """The hash of the event at ``version`` following ``prev``: the previous event's hash, None for a stream's
    first event (version 0 or 1, no event before it) or for one following an unhashed event (then None: no
    hash)."""
    if prev is None:
        if version > 1:
            return None
        prev = GENESIS
    return hashlib.sha256(bytes(prev) + piece(topic, version, state)).digest()


def piece(topic: str, version: int, state: bytes) -> bytes:
    """An event's bytes as the chain hashes them (and the Merkle leaf, after its stream id: ``ledger.evidence``):
    the version (8 bytes, big-endian), the topic's UTF-8 length (4 bytes, big-endian), the topic, the payload."""
    t = topic.encode("utf-8")
    return b"".join((_HEADER.pack(version, len(t)), t, bytes(state)))


@dataclass(frozen=True)
class HashedNotification(Notification):
    """A stored event with its notification id and its chain hash (None: not hashed)."""

    chain_hash: bytes | None = None


@dataclass
class ChainCheck:
    """One stream's chain as ``check`` walks it: its head, and the first break (version, reason)."""

    stream_id: UUID | None = None
    version: int = 0
    head: bytes | None = None
    hashed: int = 0
    unhashed: int = 0
    broken_at: int | None = None
    broken_nid: int | None = None
    reason: str | None = None

    def add(self, n: Any) -> None:
        """Check the next stored event of the stream (in version order)."""
        stored = getattr(n, "chain_hash", None)
        version = n.originator_version
        if stored is None:
            self.unhashed += 1
        else:
            self.hashed += 1
        if self.broken_at is None:
            reason = self._break(n, stored)
            if reason is not None:
                self.broken_at, self.broken_nid, self.reason = version, getattr(n, "id", None), reason
        self.version, self.head = version, stored

    def _break(self, n: Any, stored: bytes | None) -> str | None:
        """Why ``n`` breaks the chain, or None; ``self.version`` and ``self.head`` are still the previous
        event's."""
        version, prev = n.originator_version, self.head
        if stored is None:
            if self.hashed:
                return f"version {version} has no hash but the chain before it has (inserted or unhashed)"
            return None
        if self.unhashed:
            return (f"version {version} has a hash but version {self.version} before it has none "
                    "(the event before it was changed or inserted)")
        expected = link(prev, n.topic, version, n.state)
        if bytes(stored) == expected:
            return None
        if version == 1:
            return "version 1 does not hash to its stored hash (its topic or payload was changed)"
        if self.version != version - 1:
            return (f"version {version} follows version {self.version}: its hash does not follow it "
                    "(an event was deleted)")
        return (f"version {version} does not follow version {self.version}'s hash (its topic, payload "
                "or position was changed, or an event was deleted or inserted before it)")

    @property
    def status(self) -> str:
        if self.broken_at is not None:
            return "broken"
        return "unhashed" if self.hashed == 0 and self.unhashed else "ok"

    def summary(self) -> dict[str, Any]:
        """What the audit page and ``explain`` show: status, head version and hash, the break."""
        return {"status": self.status, "version": self.version, "head": self.head.hex() if self.head else None,
                "broken_at": self.broken_at, "reason": self.reason}


def check_stream(notes: Iterable[Any]) -> ChainCheck:
    chk = ChainCheck()
    for n in notes:
        if chk.stream_id is None:
            chk.stream_id = _uuid(n.originator_id)
        chk.add(n)
    return chk


class Digest:
    """The digest of the whole log, fed each stream's head in stream-id order."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.streams = 0

    def add(self, stream_id: UUID, version: int, head: bytes | None) -> None:
        self._h.update(stream_id.bytes + struct.pack(">q", version) + (head or b""))
        self.streams += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def text(summary: dict[str, Any]) -> str:
    """``chain: ok (head 1a2b3c4d5e6f… at version 12)`` / ``chain broken at version N: reason``."""
    if summary["status"] == "broken":
        return f"chain broken at version {summary['broken_at']}: {summary['reason']}"
    if summary["status"] == "unhashed":
        return "chain: none (recorded before hash chains; `chat-ledger events rehash` links it)"
    head = summary["head"]
    return f"chain: ok (head {head[:12]}… at version {summary['version']})" if head else "chain: ok (empty)"


# -- reading the stored events with their hashes --------------------------------------------------------------

def has_column(recorder: Any) -> bool:
    """Whether the stored events table has the chain column (asked once per recorder)."""
    known = getattr(recorder, "chain_column", None)
    if known is None:
        probe = getattr(recorder, "probe_chain_column", None)
        known = bool(probe()) if probe is not None else False
        try:
            recorder.chain_column = known
        except AttributeError:  # pragma: no cover - a recorder without attributes
            pass
    return known


def scan(app: Any, head: int, stream: UUID | Sequence[UUID] | None = None, page: int = 1000, after: int = 0,
         by_notification: bool = False) -> Iterator[HashedNotification]:
    """The stored events with notification ids in ``(after, head]`` (of one stream, of several, or of all),
    with their chain hashes, in the events table's primary key order (stream, version) or, ``by_notification``,
    in notification order: an index-order read, one page at a time."""
    if stream is not None and not isinstance(stream, UUID):
        ids = sorted(stream, key=str)
        for i in range(0, len(ids), _IN_LIST):
            yield from _scan(app, head, ids[i:i + _IN_LIST], page, after, by_notification)
        return
    yield from _scan(app, head, [stream] if stream is not None else None, page, after, by_notification)


#: stream ids per ``IN (...)`` list
_IN_LIST = 500


def _scan(app: Any, head: int, streams: list[UUID] | None, page: int, after: int,
          by_notification: bool) -> Iterator[HashedNotification]:
    recorder = app.recorder
    datastore = getattr(recorder, "datastore", None)
    if datastore is None:  # the in-memory store (tests): its whole log is in memory anyway; no hashes
        wanted = set(streams) if streams is not None else None
        notes = [n for n in recorder.select_notifications(after + 1, 1 << 62, stop=head)
                 if wanted is None or _uuid(n.originator_id) in wanted]
        if not by_notification:
            notes.sort(key=lambda n: (str(_uuid(n.originator_id)), n.originator_version))
        for n in notes:
            yield HashedNotification(id=n.id, originator_id=n.originator_id, originator_version=n.originator_version,
                                     topic=n.topic, state=n.state)
        return
    hashed = f", {COLUMN}" if has_column(recorder) else ", NULL AS " + COLUMN
    query = stored_events_query(recorder, head, extra=hashed, streams=streams)
    select, first, nid, param = query.select, query.params, query.nid, query.param
    convert = getattr(recorder, "convert_originator_id", _uuid)
    if by_notification:
        order, keyset = f" ORDER BY {nid} LIMIT {int(page)}", f" AND {nid} > {param}"
    else:
        order, keyset = f"{STREAM_ORDER} LIMIT {int(page)}", query.after_key()
    last: tuple[Any, ...] | None = (after,) if by_notification and after else None
    while True:
        with datastore.transaction(commit=False) as cur:
            if last is None:
                cur.execute(select + order, first)
            else:
                cur.execute(select + keyset + order, (*first, *last))
            rows = cur.fetchall()
        if not rows:
            return
        for r in rows:
            h = r[COLUMN]
            yield HashedNotification(id=r["nid"], originator_id=convert(r["originator_id"]),
                                     originator_version=r["originator_version"], topic=r["topic"],
                                     state=_payload(r["state"]), chain_hash=bytes(h) if h is not None else None)
        tail = rows[-1]
        last = (tail["nid"],) if by_notification else (tail["originator_id"], tail["originator_version"])


class TextPayload(bytes):
    """A payload the database holds as text, not bytes (a row written by hand: SQLite keeps whatever type it is
    given): its UTF-8 bytes, marked, so that ``events verify`` names the row instead of failing on it."""


def _payload(value: Any) -> bytes:
    return TextPayload(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else bytes(value)


def stream_status(app: Any, stream_id: UUID, head: int | None = None) -> dict[str, Any]:
    """One stream's chain summary (``ChainCheck.summary``) up to notification ``head`` (default: all)."""
    return check_stream(scan(app, head if head is not None else (app.head() or 0), stream_id)).summary()


def _uuid(v: Any) -> UUID:
    return v if isinstance(v, UUID) else UUID(str(v))


class LogChains:
    """``events verify``'s chain check, fed one stream at a time (in stream-id order): the first break of
    each stream, the streams without hashes, the digest and (``heads``) each stream's head."""

    def __init__(self, heads: bool = False, kept: bool = True) -> None:
        """``kept``: the store keeps hashes (the in-memory store of the tests does not: nothing is checked)."""
        self.kept = kept
        self.digest = Digest()
        self.heads: list[dict[str, Any]] | None = [] if heads else None
        self.broken = self.unhashed = 0
        self.first_unhashed: UUID | None = None

    def stream(self, stream_id: UUID, notes: Iterable[Any]) -> ChainCheck:
        if not self.kept:
            return ChainCheck(stream_id=stream_id)
        chk = check_stream(notes)
        self.digest.add(stream_id, chk.version, chk.head)
        if chk.status == "broken":
            self.broken += 1
        elif chk.status == "unhashed":
            self.unhashed += 1
            self.first_unhashed = self.first_unhashed or stream_id
        if self.heads is not None:
            self.heads.append({"stream_id": str(stream_id), "version": chk.version,
                               "hash": chk.head.hex() if chk.head else None, "status": chk.status})
        return chk

    def unhashed_anomaly(self) -> dict[str, Any] | None:
        if not self.unhashed:
            return None
        return {"stream_id": str(self.first_unhashed), "version": None, "notification_id": None, "check": "chain",
                "reason": f"{self.unhashed} stream{'s' if self.unhashed > 1 else ''} (this one first) carry no "
                          "hashes: recorded before hash chains; `chat-ledger events rehash` links them"}

    def report(self, head: int) -> dict[str, Any]:
        out: dict[str, Any] = {"digest": self.digest.hexdigest(), "head": head, "streams": self.digest.streams,
                               "broken": self.broken, "unhashed": self.unhashed, "kept": self.kept}
        if self.heads is not None:
            out["heads"] = self.heads
        return out
