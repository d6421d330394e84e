"""Time-aligned facts: other streams read as of the log position of a chat version.

A past decision is explained or re-decided with the facts as they were then, never today's
(docs/commands.md, "Time-aligned answers"): the chat at version V is the fold of its first V events, and the
organization's catalog, the deployment, the model-config claims and the tool-call executions are folded
to the same log position — the notification id of the chat's event at version V (``chat_position``).
``Positioned`` reads any stream as of one position (``None``: as of now); ``AsOf`` makes them, keeping a
bounded cache of streams' positions and of folded aggregates, so replaying many decisions over one
catalog folds each catalog version once. The SQL is in ``ledger.positions`` (both backends).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from typing import Any
from uuid import UUID

from ledger import positions
from ledger.errors import LedgerError


def chat_position(app: Any, chat_id: UUID, version: int) -> int:
    """The notification id of the chat's event at ``version`` (``version_not_found`` when it has none)."""
    nid = positions.notification_id(app.recorder, chat_id, version)
    if nid is None:
        raise LedgerError("version_not_found", f"stream {chat_id} has no version {version}")
    return nid


class _LRU(OrderedDict):  # type: ignore[type-arg]
    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def get_or(self, key: Any, make: Any) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = self[key] = make()
        if len(self) > self.maxsize:
            self.popitem(last=False)
        return value


class AsOf:
    """Reads streams as of log positions. ``index`` keeps each stream's (version, notification id) list
    (one query per stream, then a bisect per position: for replaying many positions, e.g. ``events verify
    --decisions``); without it each position costs one indexed query. Both caches are bounded LRUs, so
    memory stays flat however many streams are read."""

    def __init__(self, app: Any, *, index: bool = False, max_streams: int = 256, max_states: int = 256) -> None:
        self.app = app
        self.index = index
        self._nids: _LRU = _LRU(max_streams)
        self._states: _LRU = _LRU(max_states)

    def version(self, stream_id: UUID, position: int) -> int:
        """The stream's version as of notification ``position`` (0: it had no event yet)."""
        if not self.index:
            return positions.version_at(self.app.recorder, stream_id, position)
        rows = self._nids.get_or(stream_id, lambda: positions.positions(self.app.recorder, stream_id))
        i = bisect_right(rows, position, key=lambda row: row[1])  # rows with a notification id <= position
        return rows[i - 1][0] if i else 0

    def load(self, stream_id: UUID, position: int | None) -> Any:
        """The aggregate as of ``position`` (None: now, uncached), or None when it had no event yet. The
        object may be shared with later calls: never record on it."""
        if position is None:
            return self.app.load(stream_id)
        version = self.version(stream_id, position)
        if version == 0:
            return None
        return self._states.get_or((stream_id, version), lambda: self.app.load(stream_id, version=version))

    def at(self, position: int | None) -> Positioned:
        return Positioned(self, position)


class Positioned:
    """Every stream as of one log position (``position`` None: as of now). ``read`` is for catalog-type
    aggregates (catalogs, the deployment, model-config claims: through the application's aggregate cache
    when current), ``load`` for any stream. Readers only: never record on what they return. ``read``
    has the signature of ``UnitOfWork.read``, so the catalog's fact loaders take a ``Positioned``."""

    def __init__(self, reader: AsOf, position: int | None) -> None:
        self.reader = reader
        self.position = position

    @property
    def app(self) -> Any:
        return self.reader.app

    def read(self, stream_id: UUID) -> Any:
        if self.position is None:
            return self.reader.app.load_cached(stream_id, copy=False)
        return self.reader.load(stream_id, self.position)

    def load(self, stream_id: UUID) -> Any:
        return self.reader.load(stream_id, self.position)


def now(app: Any) -> Positioned:
    """Every stream as it is now."""
    return AsOf(app).at(None)


def at_chat_version(app: Any, chat_id: UUID, version: int | None) -> Positioned:
    """Every stream as of the chat's event at ``version`` (None: now)."""
    return AsOf(app).at(None if version is None else chat_position(app, chat_id, version))

