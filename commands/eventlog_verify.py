"""``chat-ledger events verify``: every stored event decoded, replayed and checked, and the views with it.

``verify`` decodes every stored event with the current code, replays every stream with its aggregate's
``evolve`` checking the aggregate invariants (``ledger.audit.invariants``) and the version sequence, and
checks that each projection it knows (``chat_views``, ``conversations``, ``org_models``) equals the fold of
the streams at the projection's position (or reports its lag), that the rows the streams give past it fit
the view, and that the view has not stopped at an event it cannot apply. Each anomaly names its stream,
version and reason; it checks each stream's hash chain (``ledger.chain``) and each chat's tool results
against the tool-call executions (``commands.crosscheck``). It works stream by stream: its memory does
not grow with the log.
"""

from __future__ import annotations

from contextlib import nullcontext
from datetime import timedelta
from typing import Any, Iterable, Iterator
from uuid import UUID

from commands.crosscheck import ChatResults, check as cross_check
from commands.eventlog import PAGE, _uuid
from ledger.audit.invariants import check
from ledger.audit.timeline import aggregate_class, iso
from ledger.chain import LogChains, TextPayload, scan

# -- verify -------------------------------------------------------------------------------------------------
#
# Stream by stream, so memory stays flat (one stream's state at a time, pages of events and of view rows):
# the events are read in the order of the events table's primary key (stream, version), up to the head; the
# views are read, in one snapshot, in the order of their primary keys, whose first column names the stream,
# and merged with the streams as they come (UUIDs order alike as a database uuid, as hex text and as
# canonical text). A view at position P is compared with each stream folded up to P: the views and the
# positions are read first, then the head, so every event a view has applied is among those read.

class _Stream:
    __slots__ = ("evolve", "state", "version", "memo", "broken", "timestamp")

    def __init__(self) -> None:
        self.evolve: Any = None
        self.state: Any = None
        self.version = 0
        self.memo: dict[str, Any] = {}
        self.broken = False
        self.timestamp: Any = None


def _chat_rows(sid: UUID, st: _Stream, deployment: Any) -> dict[str, list[dict[str, Any]]]:
    from ledger.chat.views import queue_row, status_values, unresolved_values

    s = st.state
    return {"chat_status": [status_values(s)], "unresolved_tool_calls": unresolved_values(s),
            "chat_queue": [queue_row(s.chat_id, q) for q in s.queue]}


def _conversation_rows(sid: UUID, st: _Stream, deployment: Any) -> dict[str, list[dict[str, Any]]]:
    from ledger.conversation.queries import conversation_view_row

    return {"conversations": [{"conversation_id": str(sid), **conversation_view_row(st.state), "version": st.version,
                               "updated_at": st.timestamp}]}


def _org_model_rows(sid: UUID, st: _Stream, deployment: Any) -> dict[str, list[dict[str, Any]]]:
    """org_models rows: the catalog's ``models`` view with the deployment settings as of the same position
    (and, for the deployment's stream, the version the view folded it to)."""
    from ledger.catalog.state import DeploymentState
    from ledger.catalog.views import models_view
    from projections.org_models import view_row

    s = st.state
    if isinstance(s, DeploymentState):
        return {"deployment": [{"id": str(sid), "version": st.version}]}
    users = []
    for user in sorted(set(s.members) | set(s.user_overrides)):
        mine = models_view(s.organization_id, s, deployment, user)
        users.append({"organization_id": str(s.organization_id), "user_id": str(user),
                      "personal_overrides": mine["personal_overrides"], "effective": mine["effective"]})
    return {"organizations": [{**view_row(models_view(s.organization_id, s, deployment)), "version": s.version,
                               "updated_at": s.updated_at}], "users": users}


def _state_type(name: str) -> type | tuple[type, ...]:
    from ledger.catalog.state import CatalogState, DeploymentState
    from ledger.chat.state import ChatState
    from ledger.conversation.state import ConversationState

    return {"chat_views": ChatState, "conversations": ConversationState,
            "org_models": (CatalogState, DeploymentState)}[name]


#: projection name -> the rows of its checked tables for one folded stream
CHECKED_VIEWS = {"chat_views": _chat_rows, "conversations": _conversation_rows, "org_models": _org_model_rows}


def stream_order(app: Any, head: int, stream: UUID | None = None, page: int = PAGE) -> Iterator[Any]:
    """The stored events with notification ids up to ``head`` (of one stream, or of all), in the order of the
    events table's primary key (stream, version), with their chain hashes (``ledger.chain.scan``)."""
    return scan(app, head, stream, page)


class _View:
    """One projection's live build as ``verify`` compares it: its position, and its tables read in key order
    alongside the streams."""

    def __init__(self, backend: Any, projection: Any, reader: Any, position: int, failure: Any,
                 check: dict[str, Any], anomalies: list[dict[str, Any]]) -> None:
        self.backend, self.projection, self.position, self.failure = backend, projection, position, failure
        self.check, self.anomalies = check, anomalies
        self.state_type = _state_type(projection.name)
        self.rows_of = CHECKED_VIEWS[projection.name]
        self.tables = [reader.tables[t.name] for t in projection.tables if t.name in reader.tables]
        self.scans = {t.name: _Peek(reader.scan(t.name)) for t in self.tables}
        self.compared = 0
        self.differences = 0

    def _anomaly(self, sid: str, version: Any, table: str | None, reason: str, nid: Any = None) -> None:
        self.differences += 1
        self.anomalies.append({"stream_id": sid, "version": version, "notification_id": nid, "check": "projection",
                               "projection": self.projection.name, "table": table, "reason": reason})

    def stream(self, sid: str, expected: dict[str, list[dict[str, Any]]] | None, skip: bool) -> None:
        """Compare the view's rows of stream ``sid`` (and report the rows of streams before it, which the
        log does not have) with ``expected`` (None: the stream has no rows here); ``skip``: do not compare
        (the stream could not be folded up to the view's position)."""
        for table in self.tables:
            column = table.primary_key[0]
            scan = self.scans[table.name]
            have: dict[tuple[Any, ...], dict[str, Any]] = {}
            while scan.head is not None and str(scan.head[column]) <= sid:
                row = table.normalize_row(scan.pop())
                if str(row[column]) < sid:
                    self._orphan(table, row)
                else:
                    have[table.key_of(row)] = row
            if skip:
                continue
            want: dict[tuple[Any, ...], dict[str, Any]] = {}
            for r in (expected or {}).get(table.name, ()):
                try:
                    row = self.backend.stored_form(table, table.normalize_row(r))
                except Exception as e:  # noqa: BLE001 - a row the view cannot hold: the view stops there
                    self._anomaly(sid, r.get("version"), table.name, f"a row of the fold cannot be stored in the "
                                  f"view: {type(e).__name__}: {e}")
                    continue
                want[table.key_of(row)] = row
            self._diff(sid, table, want, have)

    def _orphan(self, table: Any, row: dict[str, Any]) -> None:
        self.compared += 1
        self._anomaly(str(row[table.primary_key[0]]), row.get("version"), table.name,
                      f"row {list(map(str, table.key_of(row)))} is in the view but not in the fold of the stream")

    def _diff(self, sid: str, table: Any, want: dict[Any, dict[str, Any]], have: dict[Any, dict[str, Any]]) -> None:
        for key in sorted(set(want) | set(have), key=lambda k: tuple(map(str, k))):
            w, h = want.get(key), have.get(key)
            self.compared += 1
            if w == h:
                continue
            version = (w or h).get("version")  # type: ignore[union-attr]
            if w is None:
                reason = f"row {list(map(str, key))} is in the view but not in the fold of the stream"
            elif h is None:
                reason = f"row {list(map(str, key))} of the fold of the stream is missing from the view"
            else:
                diffs = [f"{c}: view={_short(h.get(c))} fold={_short(w.get(c))}" for c in w if w.get(c) != h.get(c)]
                reason = f"row {list(map(str, key))} differs: " + "; ".join(diffs)
            self._anomaly(sid, version, table.name, reason)

    def storable(self, sid: str, rows: dict[str, list[dict[str, Any]]], version: int) -> None:
        """The rows the stream gives at its last event (past the view's position) fit the view's columns: a
        view that has not reached an event yet is told of one it will not be able to store."""
        if self.failure is not None and str(self.failure.stream_id) == sid:
            return  # already reported: the view stopped there
        for table in self.tables:
            for r in rows.get(table.name, ()):
                try:
                    table.normalize_row(r)
                except Exception as e:  # noqa: BLE001
                    self._anomaly(sid, version, table.name, f"the view will not be able to store a row of the "
                                  f"stream at version {version}: {type(e).__name__}: {e}")
                    return

    def finish(self) -> None:
        for table in self.tables:
            scan = self.scans[table.name]
            while scan.head is not None:
                self._orphan(table, table.normalize_row(scan.pop()))
        f = self.failure
        if f is not None and f.notification_id > self.position:
            self.anomalies.append({"stream_id": f.stream_id, "version": f.stream_version,
                                   "notification_id": f.notification_id, "check": "projection",
                                   "projection": self.projection.name, "table": None,
                                   "reason": f"the view stopped at this event: {f.reason}"})
        self.check["rows_compared"] = self.compared
        if f is not None and f.notification_id > self.position:
            self.check["result"] = "failed"
        else:
            self.check["result"] = "equal" if self.differences == 0 else "differs"


def _short(v: Any) -> str:
    text = str(iso(v) if hasattr(v, "tzinfo") else v)
    return text if len(text) <= 60 else text[:59] + "…"


class _Peek:
    """An iterator with a look at its next item (``head``; None at the end)."""

    def __init__(self, it: Iterator[Any]) -> None:
        self._it = it
        self.head = next(it, None)

    def pop(self) -> Any:
        item, self.head = self.head, next(self._it, None)
        return item


#: how far back a stream's next event may be dated before ``events verify`` reports it (servers' clocks differ a
#: little; an event dated earlier than its predecessor by more was changed outside the ledger)
CLOCK_SKEW = timedelta(seconds=5)


def _fold(app: Any, notes: Iterable[Any], st: _Stream, report: Any, until: Any = None, seen: Any = None) -> None:
    """Decode and apply ``notes`` (one stream, in version order) to ``st``, checking the version sequence and
    the invariants; ``report(version, nid, check, reason)`` gets each anomaly, and a stream that cannot be
    folded further is marked broken. ``until(note)`` is called before each note (to snapshot rows),
    ``seen(note, event)`` after each event applied."""
    for n in notes:
        if until is not None:
            until(n)
        if st.broken:
            continue
        if isinstance(n.state, TextPayload):
            report(n.originator_version, n.id, "decode", "the payload is stored as text, not bytes "
                   "(the row was written outside the ledger)")
            st.broken = True
            continue
        try:
            event = app.mapper.to_domain_event(n)
        except Exception as e:  # CodecError, or anything a broken payload raises
            report(n.originator_version, n.id, "decode", str(e))
            st.broken = True
            continue
        if n.originator_version != st.version + 1:
            report(n.originator_version, n.id, "version",
                   f"version {n.originator_version} follows version {st.version} (expected {st.version + 1})")
            st.broken = True
            continue
        if st.timestamp is not None and event.timestamp < st.timestamp - CLOCK_SKEW:
            report(n.originator_version, n.id, "time",
                   f"version {n.originator_version} is dated {event.timestamp.isoformat()}, before version "
                   f"{st.version} ({st.timestamp.isoformat()}): times go backwards within the stream")
        try:
            if st.evolve is None:
                st.evolve = aggregate_class(event).evolve
            st.state = st.evolve(st.state, event)
        except Exception as e:
            report(n.originator_version, n.id, "replay", f"{type(event).__name__} cannot be applied: "
                   f"{type(e).__name__}: {e}")
            st.broken = True
            continue
        st.version = n.originator_version
        st.timestamp = event.timestamp
        if seen is not None:
            seen(n, event)
        for reason in check(st.state, event, st.memo):
            report(n.originator_version, n.id, "invariant", f"after {type(event).__name__}: {reason}")


def _deployment_at(app: Any, position: int) -> Any:
    """The deployment settings folded up to notification ``position`` (None: no deployment stream yet)."""
    from ledger.catalog.aggregate import Deployment
    from ledger.catalog.state import DEPLOYMENT_ID, DeploymentState
    from ledger.streams import locate

    st = _Stream()
    stream_id, _ = locate(app, Deployment, DEPLOYMENT_ID, app.load)  # maybe not at its natural id
    _fold(app, stream_order(app, position, stream_id), st, lambda *a: None)
    return st.state if isinstance(st.state, DeploymentState) else None


def _streams(notes: Iterator[Any]) -> Iterator[tuple[UUID, list[Any]]]:
    """Consecutive notes of one stream at a time (a stream's events are read in full: a chat's are at most a
    few tens of thousands of small records)."""
    current: list[Any] = []
    for n in notes:
        if current and n.originator_id != current[0].originator_id:
            yield _uuid(current[0].originator_id), current
            current = []
        current.append(n)
    if current:
        yield _uuid(current[0].originator_id), current


def unproven_streams(app: Any, head: int) -> list[str]:
    """The streams an import recorded without proof (``ledger.imports``: a version 1 export, ``--unverified``):
    their chains start at the import, so nothing proves what came before it."""
    from ledger.imports import ImportedWithoutProof

    out: list[str] = []
    start = 0
    while True:
        notes = app.recorder.select_notifications(start=start, limit=500, topics=[ImportedWithoutProof.TOPIC],
                                                  inclusive_of_start=False, stop=head)
        for n in notes:
            out.extend(str(s) for s in app.mapper.to_domain_event(n).streams)
        if len(notes) < 500:
            return out
        start = notes[-1].id


def verify(app: Any, backend: Any = None, projections: list[Any] | None = None,
           decisions: bool = False, heads: bool = False, progress: Any = None,
           upto: int | None = None) -> dict[str, Any]:
    """Decode, replay and check every stored event, stream by stream, and each stream's hash chain
    (``ledger.chain``: the first break, the digest of the log and, with ``heads``, every stream's head);
    compare the known projections with the fold of the streams at the projections' positions, and report a
    view that stopped at an event; with ``decisions``, re-decide every recorded decision
    (``commands.redecide``). ``progress(events done, head)`` is called after each stream. ``upto``: check the
    log up to that notification id only (a kept digest's head; no projections then), and report a log that
    ends before it."""
    assert upto is None or not projections, "a view is at its own position, not at upto"
    chains = LogChains(heads, kept=getattr(app.recorder, "datastore", None) is not None)
    anomalies: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    count = nstreams = 0
    with (backend.snapshot() if backend is not None and projections else nullcontext()) as snap:
        views: list[_View] = []
        for p in projections or []:
            row: dict[str, Any] = {"projection": p.name, "position": None, "head": None, "lag": None,
                                   "rows_compared": 0, "result": "not built"}
            checks.append(row)
            if p.name not in CHECKED_VIEWS:
                row["result"] = "not checked (no fold known)"
                continue
            reader = snap.live(p.name) or snap.build(p.name, p.version)  # live, or the first build under way
            if reader is None:
                continue
            position = reader.position()
            row.update(position=position, live_version=reader.version)
            views.append(_View(backend, p, reader, position, snap.failure(p.name, reader.version), row, anomalies))
        head = app.head()
        if upto is not None:
            if head < upto:
                anomalies.append({"stream_id": None, "version": None, "notification_id": head, "check": "log",
                                  "reason": f"the log ends at notification {head}, before {upto}: events are missing"})
            head = min(head, upto)
        for row in checks:
            row["head"] = head
            if row["position"] is not None:
                row["lag"] = max(head - row["position"], 0)
        deployments = {v.position: _deployment_at(app, v.position) for v in views
                       if v.projection.name == "org_models"}
        end_deployment = _deployment_at(app, head) if deployments else None

        for sid, notes in _streams(stream_order(app, head)):
            nstreams += 1
            count += len(notes)
            if progress is not None:
                progress(count, head)
            st = _Stream()
            at: dict[int, tuple[Any, bool]] = {}  # view index -> (rows at its position, stream broken by then)

            def report(version: Any, nid: Any, kind: str, reason: str) -> None:
                anomalies.append({"stream_id": str(sid), "version": version, "notification_id": nid, "check": kind,
                                  "reason": reason})

            def snapshot_rows(upto: int | None) -> None:
                for i, v in enumerate(views):
                    if i not in at and (upto is None or upto > v.position):
                        rows = (v.rows_of(sid, st, deployments.get(v.position))
                                if not st.broken and isinstance(st.state, v.state_type) else None)
                        at[i] = (rows, st.broken)

            chain = chains.stream(sid, notes)
            if chain.broken_at is not None:
                report(chain.broken_at, chain.broken_nid, "chain", chain.reason)
            results = ChatResults()
            _fold(app, notes, st, report, until=lambda n: snapshot_rows(n.id), seen=results.add)
            snapshot_rows(None)
            if not st.broken:
                cross_check(app, head, results, anomalies.append)
            for i, v in enumerate(views):
                rows, broken = at[i]
                v.stream(str(sid), rows, broken)
                if notes[-1].id > v.position and not st.broken and isinstance(st.state, v.state_type):
                    v.storable(str(sid), v.rows_of(sid, st, end_deployment), st.version)
        for v in views:
            v.finish()
    unhashed = chains.unhashed_anomaly()
    if unhashed is not None:
        anomalies.append(unhashed)
    report: dict[str, Any] = {"chain": {**chains.report(head), "unproven": unproven_streams(app, head)}}
    if decisions:
        from commands.redecide import check_decisions

        tally = check_decisions(app, head)
        anomalies.extend(tally.anomalies)
        report["decisions"] = tally.report()
    return {"ok": not anomalies, "events": count, "streams": nstreams, "head": head,
            "anomalies": anomalies, "projections": checks, **report}
