"""The stored events as a whole: verify, stats, export and import (``chat-ledger events ...``).

* ``verify`` decodes every stored event with the current code, replays every stream with its aggregate's
  ``evolve`` checking the aggregate invariants (``ledger.audit.invariants``) and the version sequence, and
  checks that each projection it knows (``chat_views``, ``conversations``, ``org_models``) equals the fold of the streams
  at the projection's position (or reports its lag). Each anomaly names its stream, version and reason.
* ``stats`` counts stored events per topic and stored class version.
* ``export`` writes one JSON line per stored event in notification order; ``import`` records them into an
  empty database, keeping streams, versions, order and the exact payload bytes.
"""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any, Iterator
from uuid import UUID

import msgspec
from eventsourcing.persistence import StoredEvent

from ledger.audit.invariants import check
from ledger.audit.timeline import aggregate_class, iso
from ledger.base import TOPICS
from ledger.errors import LedgerError

EXPORT_FORMAT = "chat-ledger-events"
EXPORT_VERSION = 1
PAGE = 1000


def _uuid(v: Any) -> UUID:
    return v if isinstance(v, UUID) else UUID(str(v))


def raw_payload(app: Any, state: bytes) -> bytes:
    """The payload bytes as the codec sees them (after the cipher and compressor, if configured)."""
    mapper = app.mapper
    if mapper.cipher:
        state = mapper.cipher.decrypt(state)
    if mapper.compressor:
        state = mapper.compressor.decompress(state)
    return state


def logged_event(app: Any, n: Any) -> dict[str, Any]:
    """One notification as the API shows it: ids, topic, type, time and the payload's fields as JSON values."""
    event = app.mapper.to_domain_event(n)
    data = msgspec.to_builtins({k: v for k, v in vars(event).items()
                                if k not in ("originator_id", "originator_version", "timestamp")})
    return {"notification_id": n.id, "stream_id": str(_uuid(n.originator_id)), "version": n.originator_version,
            "topic": n.topic, "type": type(event).__name__, "timestamp": iso(event.timestamp), "data": data}


def iter_notifications(app: Any, start: int = 0, stop: int | None = None) -> Iterator[Any]:
    while True:
        notes = app.notifications(start, PAGE, stop=stop)
        if not notes:
            return
        yield from notes
        start = notes[-1].id
        if stop is not None and start >= stop:
            return


# -- verify -------------------------------------------------------------------------------------------------

class _Stream:
    __slots__ = ("evolve", "state", "version", "memo", "broken", "timestamp")

    def __init__(self) -> None:
        self.evolve: Any = None
        self.state: Any = None
        self.version = 0
        self.memo: dict[str, Any] = {}
        self.broken = False
        self.timestamp: Any = None


def _folded(streams: dict[UUID, _Stream], state_type: type) -> tuple[list[tuple[UUID, _Stream]], set[str]]:
    """The streams folded to a ``state_type`` state, and the ids of every stream that could not be folded
    (their rows are not compared)."""
    skip = {str(sid) for sid, st in streams.items() if st.broken}
    return [(sid, st) for sid, st in streams.items() if not st.broken and isinstance(st.state, state_type)], skip


def _expected_chat_views(streams: dict[UUID, _Stream]) -> tuple[dict[str, list[dict[str, Any]]], set[str]]:
    from ledger.chat.state import ChatState
    from ledger.chat.views import queue_row, status_values, unresolved_values

    out: dict[str, list[dict[str, Any]]] = {"chat_status": [], "unresolved_tool_calls": [], "chat_queue": []}
    folded, skip = _folded(streams, ChatState)
    for _, st in folded:
        s = st.state
        out["chat_status"].append(status_values(s))
        out["unresolved_tool_calls"].extend(unresolved_values(s))
        out["chat_queue"].extend(queue_row(s.chat_id, q) for q in s.queue)
    return out, skip


def _expected_conversations(streams: dict[UUID, _Stream]) -> tuple[dict[str, list[dict[str, Any]]], set[str]]:
    from ledger.conversation.queries import conversation_view_row
    from ledger.conversation.state import ConversationState

    folded, skip = _folded(streams, ConversationState)
    rows = [{"conversation_id": str(sid), **conversation_view_row(st.state), "version": st.version,
             "updated_at": st.timestamp} for sid, st in folded]
    return {"conversations": rows}, skip


def _expected_org_models(streams: dict[UUID, _Stream]) -> tuple[dict[str, list[dict[str, Any]]], set[str]]:
    """org_models rows: each catalog's ``models`` view with the deployment settings as folded so far."""
    from ledger.catalog.state import CatalogState, DeploymentState
    from ledger.catalog.views import models_view
    from projections.org_models import view_row

    deployment = next((st.state for st in streams.values() if isinstance(st.state, DeploymentState)), None)
    out: dict[str, list[dict[str, Any]]] = {"organizations": [], "users": []}
    folded, skip = _folded(streams, CatalogState)
    for sid, st in folded:
        s = st.state
        out["organizations"].append({**view_row(models_view(s.organization_id, s, deployment)),
                                     "version": s.version, "updated_at": s.updated_at})
        for user in sorted(set(s.members) | set(s.user_overrides)):
            mine = models_view(s.organization_id, s, deployment, user)
            out["users"].append({"organization_id": str(sid), "user_id": str(user),
                                 "personal_overrides": mine["personal_overrides"], "effective": mine["effective"]})
    return out, skip


#: projection name -> (expected rows from the folded streams, the column naming the stream)
CHECKED_VIEWS = {"chat_views": (_expected_chat_views, "chat_id"),
                 "conversations": (_expected_conversations, "conversation_id"),
                 "org_models": (_expected_org_models, "organization_id")}


def _compare(projection: Any, backend: Any, expected: dict[str, list[dict[str, Any]]], skip: set[str],
             stream_column: str, anomalies: list[dict[str, Any]]) -> int:
    """Compare the live build's tables with the expected rows; returns the number of rows compared."""
    compared = 0
    with backend.reading(projection.name) as reader:
        for table in projection.tables:
            if table.name not in expected:
                continue
            want = {table.key_of(r): r for r in (table.normalize_row(r) for r in expected[table.name])}
            have = {table.key_of(r): r for r in (table.normalize_row(r) for r in reader.query(table.name))}
            for key in sorted(set(want) | set(have), key=lambda k: tuple(map(str, k))):
                w, h = want.get(key), have.get(key)
                row = w if w is not None else h
                sid = str(row[stream_column])
                if sid in skip:
                    continue
                compared += 1
                if w == h:
                    continue
                version = (w or h).get("version")
                if w is None:
                    reason = f"row {list(map(str, key))} is in the view but not in the fold of the stream"
                elif h is None:
                    reason = f"row {list(map(str, key))} of the fold of the stream is missing from the view"
                else:
                    diffs = [f"{c}: view={_short(h.get(c))} fold={_short(w.get(c))}" for c in w if w.get(c) != h.get(c)]
                    reason = f"row {list(map(str, key))} differs: " + "; ".join(diffs)
                anomalies.append({"stream_id": sid, "version": version, "notification_id": None,
                                  "check": "projection", "projection": projection.name, "table": table.name,
                                  "reason": reason})
    return compared


def _short(v: Any) -> str:
    text = str(iso(v) if hasattr(v, "tzinfo") else v)
    return text if len(text) <= 60 else text[:59] + "…"


def verify(app: Any, backend: Any = None, projections: list[Any] | None = None,
           decisions: bool = False) -> dict[str, Any]:
    """Decode, replay and check every stored event; compare the known projections with the fold; with
    ``decisions``, re-decide every recorded decision (``commands.redecide``)."""
    head = app.head()
    anomalies: list[dict[str, Any]] = []
    streams: dict[UUID, _Stream] = {}
    checks: list[dict[str, Any]] = []
    pending: list[tuple[int, Any, dict[str, Any]]] = []  # (position, projection, check row) to snapshot
    for p in projections or []:
        row: dict[str, Any] = {"projection": p.name, "position": None, "head": head, "lag": None,
                               "rows_compared": 0, "result": "not built"}
        checks.append(row)
        if p.name not in CHECKED_VIEWS:
            row["result"] = "not checked (no fold known)"
            continue
        live = backend.live_version(p.name)
        if live is None:
            continue
        position = backend.position(p.name, live) or 0
        row.update(position=position, lag=max(head - position, 0), live_version=live)
        pending.append((position, p, row))
    pending.sort(key=lambda t: t[0])

    def snapshot_due(upto: int) -> None:
        while pending and pending[0][0] <= upto:
            _, p, row = pending.pop(0)
            expected_of, column = CHECKED_VIEWS[p.name]
            expected, skip = expected_of(streams)
            before = len(anomalies)
            row["rows_compared"] = _compare(p, backend, expected, skip, column, anomalies)
            row["result"] = "equal" if len(anomalies) == before else "differs"

    def anomaly(sid: Any, version: Any, nid: Any, kind: str, reason: str) -> None:
        anomalies.append({"stream_id": str(sid), "version": version, "notification_id": nid, "check": kind,
                          "reason": reason})

    count = 0
    for n in iter_notifications(app, 0, head):
        # the views at position P equal the fold of every event up to P: compare before going past it
        if pending and pending[0][0] < n.id:
            snapshot_due(n.id - 1)
        count += 1
        sid = _uuid(n.originator_id)
        st = streams.get(sid)
        if st is None:
            st = streams[sid] = _Stream()
        try:
            event = app.mapper.to_domain_event(n)
        except Exception as e:  # CodecError, or anything a broken payload raises
            anomaly(sid, n.originator_version, n.id, "decode", str(e))
            st.broken = True
            continue
        if st.broken:
            continue
        if n.originator_version != st.version + 1:
            anomaly(sid, n.originator_version, n.id, "version",
                    f"version {n.originator_version} follows version {st.version} (expected {st.version + 1})")
            st.broken = True
            continue
        try:
            if st.evolve is None:
                st.evolve = aggregate_class(event).evolve
            st.state = st.evolve(st.state, event)
        except Exception as e:
            anomaly(sid, n.originator_version, n.id, "replay", f"{type(event).__name__} cannot be applied: "
                    f"{type(e).__name__}: {e}")
            st.broken = True
            continue
        st.version = n.originator_version
        st.timestamp = event.timestamp
        for reason in check(st.state, event, st.memo):
            anomaly(sid, n.originator_version, n.id, "invariant", f"after {type(event).__name__}: {reason}")
    snapshot_due(head)
    for _, p, row in pending:  # pragma: no cover - positions beyond the head (a concurrent writer)
        row["result"] = "not checked (position beyond the head read)"
    report: dict[str, Any] = {}
    if decisions:
        from commands.redecide import check_decisions

        tally = check_decisions(app, head)
        anomalies.extend(tally.anomalies)
        report["decisions"] = tally.report()
    return {"ok": not anomalies, "events": count, "streams": len(streams), "head": head,
            "anomalies": anomalies, "projections": checks, **report}


# -- stats --------------------------------------------------------------------------------------------------

class _Version(msgspec.Struct):
    class_version: int = 1


_json_version = msgspec.json.Decoder(_Version)
_msgpack_version = msgspec.msgpack.Decoder(_Version)


def stored_class_version(data: bytes) -> int | None:
    try:
        return (_json_version if data[:1] == b"{" else _msgpack_version).decode(data).class_version
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def stats(app: Any) -> list[dict[str, Any]]:
    counts: Counter[tuple[str, int | None]] = Counter()
    for n in iter_notifications(app):
        counts[(n.topic, stored_class_version(raw_payload(app, n.state)))] += 1
    rows = []
    for (topic, version), count in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        cls = TOPICS.get(topic)
        rows.append({"topic": topic, "class_version": version, "count": count,
                     "code_class_version": getattr(cls, "class_version", None) if cls else None,
                     "known": cls is not None})
    return rows


# -- export / import ----------------------------------------------------------------------------------------

def export_lines(app: Any, since: int = 0) -> Iterator[bytes]:
    """A header line, then one line per stored event after notification ``since``, in notification order.

    ``json`` holds a JSON payload's exact text (valid UTF-8 starting with ``{``); any other payload
    (msgpack, compressed or encrypted) is kept as ``b64``. Both give back the exact stored bytes."""
    enc = msgspec.json.Encoder()
    yield enc.encode({"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "since": since, "head": app.head()})
    for n in iter_notifications(app, since):
        line: dict[str, Any] = {"id": n.id, "stream": str(_uuid(n.originator_id)), "version": n.originator_version,
                                "topic": n.topic}
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
        yield enc.encode(line)


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    id: int
    stream: UUID
    version: int
    topic: str
    json: str | None = None
    b64: str | None = None


def import_lines(app: Any, lines: Any, batch: int = 1000) -> int:
    """Record exported events into an empty database (same streams, versions, order and payload bytes)."""
    if app.head() != 0:
        raise LedgerError("database_not_empty", "events import needs an empty database (it has events)")
    decoder = msgspec.json.Decoder(_Line)
    header_seen = False
    pending: list[StoredEvent] = []
    total = 0
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, str):
            raw = raw.encode("utf-8")
        if not raw.strip():
            continue
        if not header_seen:
            try:
                header = msgspec.json.decode(raw)
            except msgspec.DecodeError as e:
                raise LedgerError("invalid_export", f"line {number}: not JSON: {e}") from None
            if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
                raise LedgerError("invalid_export", f"line {number}: not a chat-ledger export header")
            if header.get("version") != EXPORT_VERSION:
                raise LedgerError("invalid_export", f"unsupported export version {header.get('version')!r}")
            header_seen = True
            continue
        try:
            line = decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise LedgerError("invalid_export", f"line {number}: {e}") from None
        if (line.json is None) == (line.b64 is None):
            raise LedgerError("invalid_export", f"line {number}: exactly one of json and b64 is needed")
        data = line.json.encode("utf-8") if line.json is not None else base64.b64decode(line.b64)
        pending.append(StoredEvent(originator_id=line.stream, originator_version=line.version,
                                   topic=line.topic, state=data))
        if len(pending) >= batch:
            total += _insert(app, pending)
            pending = []
    if not header_seen:
        raise LedgerError("invalid_export", "empty file: no export header")
    if pending:
        total += _insert(app, pending)
    return total


def _insert(app: Any, stored: list[StoredEvent]) -> int:
    from eventsourcing.persistence import IntegrityError

    try:
        app.recorder.insert_events(stored)
    except IntegrityError as e:
        first = stored[0]
        raise LedgerError("invalid_export", f"events clash with recorded ones near stream {first.originator_id} "
                                            f"version {first.originator_version}: {e}") from None
    return len(stored)
