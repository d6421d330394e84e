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

from ledger.positions import version_at
from ledger.protection.events import ERASURE_TOPICS
from projections.rowops import DeleteWhere, RowOp, Upsert
from projections.streamwise import stream_rows

__all__ = ["ERASURE_TOPICS", "is_erasure", "rederive"]


def is_erasure(event: Any) -> bool:
    return getattr(type(event), "TOPIC", None) in ERASURE_TOPICS


def rederive(projection: Any, app: Any, event: Any, position: int | None) -> list[RowOp]:
    """The row operations that make ``projection``'s rows of each stream ``event`` names what its events as of
    ``position`` (the erasure's notification id) give now; none outside a log-order batch."""
    if position is None:
        return []
    app.refresh_keys()  # keys another process destroyed: dropped from this one's memory before decoding
    topics = projection.topic_set()
    ops: list[RowOp] = []
    for stream_id in event.streams:
        version = version_at(app.recorder, stream_id, position)
        events = app.stream(stream_id, lte=version) if version else []
        if not events or (topics is not None and events[0].TOPIC not in topics):
            continue  # (not a stream of this view: a conversation for the chat views, ...)
        for table in projection.tables:
            ops.append(DeleteWhere(table.name, {table.primary_key[0]: str(stream_id)}))
        for table, rows in stream_rows(type(projection)(app), events).items():
            ops.extend(Upsert(table, row) for row in rows)
    return ops
