"""What a view does when content is erased (issue 28, docs/privacy.md): the rows of each chat or conversation an
erasure event names (``ledger.protection.events.ContentErased.streams``) are deleted and computed again from the
stream's events as of the erasure's log position — decoded now, so ``[erased]`` where the keys were destroyed.

Inside the view's exactly-once batch like any event: every process that catches the view up does it once, at
the erasure's place in the log, whoever recorded the erasure. The projections whose rows hold people's text
(``chat_views``, ``search``, ``conversations``) add ``ERASURE_TOPICS`` to their topics and call ``rederive`` from
their ``apply``; before that they drop what they keep in memory of those streams (decrypted state).

A stream-wise build folds each stream from its own events, already decoded with the keys as they are: there an
erasure event has nothing to do (``position`` is None outside a log-order batch)."""

from __future__ import annotations

from typing import Any

from ledger.protection.events import ERASURE_TOPICS
from projections.rowops import DeleteWhere, RowOp, Upsert
from projections.streamwise import read_streams, stream_rows

MAX_VERSION = 2**62  # (every version of a stream: those after the erasure's position are left out by position)

__all__ = ["ERASURE_TOPICS", "is_erasure", "prefetch", "rederive"]


def is_erasure(event: Any) -> bool:
    return getattr(type(event), "TOPIC", None) in ERASURE_TOPICS


def prefetch(app: Any, fold: Any, events: Any) -> None:
    """A folding view's ``prepare``: the states its batch needs (``StreamFold.prefetch``), with a batch that holds an
    erasure decoded with the keys as they are now (destroyed ones dropped first) and the erasure events — another
    stream's — left out."""
    if any(map(is_erasure, events)):
        app.refresh_keys()
        events = [e for e in events if not is_erasure(e)]
    fold.prefetch(events)


def rederive(projection: Any, app: Any, event: Any, position: int | None,
             clear: set[Any] | frozenset[Any] = frozenset()) -> list[RowOp]:
    """The row operations that make ``projection``'s rows of each stream ``event`` names what its events as of
    ``position`` (the erasure's notification id) give now; none outside a log-order batch.

    Upserts: the view's rows of a stream at the erasure's position are those of its events up to there (what
    "incremental equals rebuild" promises), so the rows computed again have the same keys and replace them one for
    one. A stream in ``clear`` (one whose rows the projection had not yet written in this batch) has its rows
    deleted first, as its pending changes are dropped. The streams' events are read together (one query per 500
    streams), and those of another kind (a conversation, for the chat views) are left alone."""
    if position is None:
        return []
    app.refresh_keys()  # keys another process destroyed: dropped from this one's memory before decoding
    topics = projection.topic_set()
    by_stream: dict[Any, list[Any]] = {}
    for nid, stored in read_streams(app, {s: MAX_VERSION for s in event.streams}):
        if nid <= position:
            by_stream.setdefault(stored.originator_id, []).append(stored)
    ops: list[RowOp] = []
    fresh = type(projection)(app)
    for stream_id, stored in by_stream.items():
        if topics is not None and stored[0].topic not in topics:
            continue  # (not a stream of this view)
        if stream_id in clear:
            ops.extend(DeleteWhere(t.name, {t.primary_key[0]: str(stream_id)}) for t in projection.tables)
        events = [app.mapper.to_domain_event(s) for s in stored]
        for table, rows in stream_rows(fresh, events).items():
            ops.extend(Upsert(table, row) for row in rows)
    return ops
