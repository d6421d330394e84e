"""``chat-ledger events export|import``: one JSON line per stored event in notification order, and recording
them into an empty database, keeping streams, versions, order and the exact payload bytes."""

from __future__ import annotations

import base64
import binascii
import struct
from typing import Any, Iterator
from uuid import UUID

import msgspec
from eventsourcing.persistence import StoredEvent

from commands.eventlog import _uuid
from ledger.chain import link, scan
from ledger.errors import LedgerError, clip

EXPORT_FORMAT = "chat-ledger-events"
EXPORT_VERSION = 2
#: export versions ``import`` reads (1: before hash chains, its lines carry no ``hash``)
IMPORT_VERSIONS = (1, 2)


def export_lines(app: Any, since: int = 0) -> Iterator[bytes]:
    """A header line, then one line per stored event after notification ``since`` up to the head read at the
    start (the header's ``head``), in notification order.

    A sealed ledger's export (docs/privacy.md) has a second line ``{"subject_keys": [...]}``: its subjects' keys
    as stored, wrapped by its master key (a destroyed key as destroyed) — the file reads only with that master
    key, and what was erased stays erased in the ledger it is imported into.

    ``json`` holds a JSON payload's exact text (valid UTF-8 starting with ``{``); any other payload
    (msgpack, compressed or encrypted) is kept as ``b64``. Both give back the exact stored bytes. ``prev``
    is the notification id of the event exported before this one (``since`` for the first): notification
    ids may skip numbers (a PostgreSQL sequence does, after a rolled-back insert), so a line missing from
    the file shows only through ``prev``. ``hash`` is the event's chain hash (hex), on every line: the stored
    one, or, for an event recorded before hash chains, the one the import will record (a version 2 line without
    one is refused by ``import``: a line stripped of its hash is an edited line)."""
    enc = msgspec.json.Encoder()
    head = app.head()
    yield enc.encode({"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "since": since, "head": head})
    sealer = getattr(app.mapper, "sealer", None)
    if sealer is not None:  # read after the head: every key of the events up to it exists
        yield enc.encode({"subject_keys": sealer.keys.rows()})
    prev = since
    heads: dict[Any, bytes | None] = {}  # each stream's last hash (for events stored without one)
    for n in scan(app, head, after=since, by_notification=True):
        line: dict[str, Any] = {"id": n.id, "prev": prev, "stream": str(_uuid(n.originator_id)),
                                "version": n.originator_version, "topic": n.topic}
        data = bytes(n.state)
        text = None
        if data[:1] == b"{":
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is not None:
            line["json"] = text
        else:
            line["b64"] = base64.b64encode(data).decode("ascii")
        h = n.chain_hash if n.chain_hash is not None else link(heads.get(n.originator_id), n.topic,
                                                                n.originator_version, data)
        heads[n.originator_id] = h
        if h is not None:
            line["hash"] = h.hex()
        prev = n.id
        yield enc.encode(line)


class _Header(msgspec.Struct):
    format: str
    version: int
    since: int = 0
    head: int | None = None


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    id: int
    stream: UUID
    version: int
    topic: str
    prev: int | None = None
    json: str | None = None
    b64: str | None = None
    hash: str | None = None


def invalid_export(number: int | None, reason: str) -> LedgerError:
    where = f"line {number}: " if number is not None else ""
    return LedgerError("invalid_export", f"{where}{reason}; nothing was imported")


def import_lines(app: Any, lines: Any, on_validated: Any = None, unverified: bool = False,
                 erased: dict[tuple[str, int], str] | None = None) -> int:
    """Record an export into an empty database, whole or not at all (same streams, versions, order, topics
    and payload bytes; notification ids are assigned anew, in the same order).

    Two passes: the first reads the file once, checks every line (below) and copies the events to an
    unnamed temporary file; only when every line is valid does the second record them, in one
    transaction (``ledger.bulkload``), checking there that the database is still empty. Memory stays
    bounded by one line and the last version of each stream, whatever the size of the file. A process
    killed during the second pass leaves nothing behind, so the same command can simply be run again.

    A line is refused (``invalid_export`` naming it) when the header is missing, wrong or of a partial
    export (``--since``); a line is not a JSON object of the export's shape, has neither or both of
    ``json``/``b64`` or bad base64; its topic is unknown or its payload does not decode with its class
    (through the application's mapper, as every later read will); its stream's versions do not run 1, 2,
    3, ... (a gap, a repeat, version 0, -1 or huge); a stream starts with anything but a creation event, or
    a creation event comes later; notification ids do not increase; ``prev`` does not name the line
    before (a missing line); or the file ends before the header's ``head`` (a truncated file). A version 2
    line without its ``hash`` is refused (every exported line has one). A version 1 export (no hashes at
    all: nothing proves its lines) is refused unless ``unverified``; then the same transaction records
    ``ImportedWithoutProof`` naming every stream it created (``ledger.imports``), which ``events verify``
    reports. ``on_validated(count)`` is called between the passes.

    ``erased`` (``destroyed_keys`` of the ledger an older export came from): its keys are imported destroyed, so an
    export made before an erasure does not bring the erased content back; an export of unsealed content is then
    refused (nothing in it can be kept erased)."""
    import tempfile

    if app.head() != 0:  # fail fast; checked again, under the write lock, before anything is recorded
        raise LedgerError("database_not_empty", "events import needs an empty database (it has events)")
    with tempfile.TemporaryFile() as spool:
        count, version, streams, keys = _validate(app, lines, spool, unverified)
        if version == 1:
            _spool(spool, _mark(app, streams, count, version))
        if erased is not None:
            if not keys:
                raise invalid_export(None, "this export stores people's data unsealed: its erasures cannot be kept "
                                           "(seal the ledger first: events encrypt-existing)")
            keys = [{**r, "wrapped": None, "destroyed_at": erased[r["subject"], int(r["number"])]}
                    if (r["subject"], int(r["number"])) in erased else r for r in keys]
        if keys:  # before the events, so they read as they did; rows the ledger has stay as they are
            app.mapper.sealer.keys.restore(keys)
            app.refresh_keys()
        if on_validated is not None:
            on_validated(count)
        spool.seek(0)
        return _record(app, _spooled(spool)) - (version == 1)


def destroyed_keys(url: str) -> dict[tuple[str, int], str]:
    """(subject, number) -> when, of every key the sealed ledger at ``url`` destroyed (``import --keep-erasures-of``)."""
    from ledger.store import open_app

    other = open_app(url, create=False)
    try:
        sealer = getattr(other.mapper, "sealer", None)
        rows = sealer.keys.rows() if sealer is not None else []
    finally:
        other.close()
    return {(r["subject"], int(r["number"])): r["destroyed_at"] for r in rows if r["wrapped"] is None}


def _mark(app: Any, streams: list[UUID], count: int, version: int) -> StoredEvent:
    """The record of an import without proof, as the stored event the import's transaction inserts last."""
    from uuid import uuid4

    from commands.uow import utcnow
    from ledger.base import Emitter
    from ledger.imports import IMPORT_TOPIC, ImportedWithoutProof

    now = utcnow()
    em = Emitter(uuid4(), 0, now)
    em.emit(ImportedWithoutProof, originator_topic=IMPORT_TOPIC, streams=streams, events=count,
            export_version=version, at=now)
    return app.mapper.to_stored_event(em.events[0])


def _spool(spool: Any, stored: StoredEvent) -> None:
    record = _record_encoder.encode((_uuid(stored.originator_id).bytes, stored.originator_version, stored.topic,
                                     bytes(stored.state)))
    spool.write(_LENGTH.pack(len(record)))
    spool.write(record)


_MAX_VERSION = 2 ** 63 - 1
_record_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(tuple[bytes, int, str, bytes])
_LENGTH = struct.Struct("<I")


def _validate(app: Any, lines: Any, spool: Any,
              unverified: bool = False) -> tuple[int, int, list[UUID], list[dict[str, Any]]]:
    """Check every line and spool its event; (events, the export's version, the streams in order, the subjects'
    keys of a sealed ledger's export)."""
    from ledger.base import LedgerCreated

    decoder = msgspec.json.Decoder(_Line)
    header: _Header | None = None
    versions: dict[UUID, int] = {}
    chains: dict[UUID, bytes | None] = {}  # each stream's last hash, as the import will record it
    last_id = 0
    chained: bool | None = None
    count = 0
    number = 0
    keys: list[dict[str, Any]] = []
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogatepass")
        if not raw.strip():
            continue
        if header is None:
            header = _header(number, raw)
            last_id = header.since
            if header.version == 1 and not unverified:
                raise invalid_export(number, "a version 1 export carries no hashes: nothing proves its lines were "
                                             "not edited. Import it with --unverified to record its streams as "
                                             "imported without proof (events verify then reports them so)")
            continue
        if number == 2 and raw.startswith(b'{"subject_keys"'):
            keys = _keys(app, number, raw)
            continue
        try:
            line = decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise invalid_export(number, f"not an exported event: {clip(str(e))}") from None
        except RecursionError:
            raise invalid_export(number, "not an exported event: nested too deeply") from None
        if line.id <= last_id:
            raise invalid_export(number, f"notification id {line.id} does not follow {last_id} "
                                         "(ids increase from line to line)")
        if chained is None:
            chained = line.prev is not None
        if chained and line.prev != last_id:
            raise invalid_export(number, f"notification {line.id} follows notification {line.prev}, but the line "
                                         f"before is notification {last_id}: a line is missing or out of place")
        if not chained and line.prev is not None:
            raise invalid_export(number, "prev is given here but not on the first event line")
        last_id = line.id
        if line.hash is None and header.version >= 2:
            raise invalid_export(number, f"stream {line.stream} version {line.version} has no hash: every line of "
                                         f"a version {header.version} export carries one (was the line edited?)")
        expected = versions.get(line.stream, 0) + 1
        if line.version != expected:
            if 1 <= line.version < expected:
                reason = f"stream {line.stream} version {line.version} is already in the file (a duplicate)"
            else:
                reason = (f"stream {line.stream} version {line.version} follows version {expected - 1} "
                          f"(expected {expected}: versions run 1, 2, 3, ... in each stream)")
            raise invalid_export(number, reason)
        if line.version > _MAX_VERSION:  # pragma: no cover - contiguity bounds it by the file's length
            raise invalid_export(number, f"version {line.version} is too large")
        if (line.json is None) == (line.b64 is None):
            raise invalid_export(number, "exactly one of json and b64 is needed")
        if line.json is not None:
            data = line.json.encode("utf-8", "surrogatepass")
        else:
            try:
                data = base64.b64decode(line.b64, validate=True)
            except (binascii.Error, ValueError) as e:
                raise invalid_export(number, f"b64 is not valid base64: {e}") from None
        stored = StoredEvent(originator_id=line.stream, originator_version=line.version, topic=line.topic,
                             state=data)
        try:
            event = app.mapper.to_domain_event(stored)
        except Exception as e:  # CodecError, or whatever a broken (compressed, encrypted) payload raises
            raise invalid_export(number, clip(str(e) or type(e).__name__)) from None
        creates = isinstance(event, LedgerCreated)
        if creates and line.version != 1:
            raise invalid_export(number, f"{line.topic} creates a stream but is version {line.version} of "
                                         f"stream {line.stream}")
        if not creates and line.version == 1:
            raise invalid_export(number, f"stream {line.stream} starts with {line.topic}, not with a creation event")
        versions[line.stream] = line.version
        chains[line.stream] = _chained(number, line, data, chains.get(line.stream))
        _spool(spool, stored)
        count += 1
    if header is None:
        raise invalid_export(None, "empty file: no export header")
    if header.head is not None and last_id < header.head:
        raise invalid_export(number, f"the file ends at notification {last_id}, but its header says the export "
                                     f"holds the events up to {header.head}: it is truncated")
    return count, header.version, list(versions), keys


def _keys(app: Any, number: int, raw: bytes) -> list[dict[str, Any]]:
    """A sealed ledger's keys line: each wrapped key must unwrap under this ledger's master key."""
    from ledger.subjectkeys import SubjectKeyError

    sealer = getattr(app.mapper, "sealer", None)
    if sealer is None:
        raise invalid_export(number, "this export holds sealed content and its keys: import it into a ledger opened "
                                     "with the master key of the ledger it came from (CHAT_LEDGER_MASTER_KEY)")
    try:
        rows = msgspec.json.decode(raw, type=dict[str, list[dict[str, Any]]])["subject_keys"]
        sealer.keys.check_rows(rows)
    except SubjectKeyError as e:
        raise invalid_export(number, f"{e}: import it with the master key of the ledger it came from") from None
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError, ValueError, TypeError) as e:
        raise invalid_export(number, f"not a keys line: {clip(str(e))}") from None
    return rows


def _chained(number: int, line: _Line, data: bytes, prev: bytes | None) -> bytes | None:
    """The line's chain hash as the import records it; a line's ``hash`` must be that one."""
    expected = link(prev, line.topic, line.version, data)
    if line.hash is not None and line.hash != (expected.hex() if expected else None):
        raise invalid_export(number, f"stream {line.stream} version {line.version}: hash {line.hash[:16]}… is not "
                                     "the chain hash of its topic, version and payload after the stream's line "
                                     "before (this line or an earlier one of the stream was changed)")
    return expected


def _header(number: int, raw: bytes) -> _Header:
    try:
        header = msgspec.json.decode(raw, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise invalid_export(number, f"not a chat-ledger export header: {clip(str(e) or 'nested too deeply')}") from None
    if header.format != EXPORT_FORMAT:
        raise invalid_export(number, "not a chat-ledger export header")
    if header.version not in IMPORT_VERSIONS:
        raise invalid_export(number, f"unsupported export version {header.version!r}")
    if header.since != 0:
        raise invalid_export(number, f"a partial export (since notification {header.since}) cannot be imported: "
                                     "its streams do not start at version 1")
    return header


def _spooled(spool: Any, chunk: int = 1000) -> Iterator[list[StoredEvent]]:
    batch: list[StoredEvent] = []
    while size := spool.read(_LENGTH.size):
        stream, version, topic, data = _record_decoder.decode(spool.read(_LENGTH.unpack(size)[0]))
        batch.append(StoredEvent(originator_id=UUID(bytes=stream), originator_version=version, topic=topic,
                                 state=data))
        if len(batch) >= chunk:
            yield batch
            batch = []
    if batch:
        yield batch


def _record(app: Any, chunks: Iterator[list[StoredEvent]]) -> int:
    import sqlite3

    from eventsourcing.persistence import PersistenceError

    from ledger.bulkload import StoreNotEmpty, insert_into_empty

    try:
        return insert_into_empty(app.recorder, chunks)
    except StoreNotEmpty:
        raise LedgerError("database_not_empty", "events import needs an empty database (it has events)") from None
    except (PersistenceError, sqlite3.Error) as e:
        raise LedgerError("database_unavailable", f"the import was rolled back, nothing was imported: "
                                                  f"{type(e).__name__}: {str(e).strip() or 'no detail'}") from e
    except Exception as e:
        if type(e).__module__.startswith("psycopg"):
            raise LedgerError("database_unavailable", f"the import was rolled back, nothing was imported: "
                                                      f"{type(e).__name__}: {str(e).strip() or 'no detail'}") from e
        raise
