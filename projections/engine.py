"""The pure part of the projection engine: table specs, row operations, projections, row state.

A projection turns one event into a list of row operations on the tables it owns::

    class ChatStatus(Projection):
        name = "chat_status"
        version = 1
        tables = [Table("status", [Column("chat_id", TEXT), Column("status", TEXT),
                                   Column("queue_length", INTEGER, nullable=False)],
                        primary_key=["chat_id"])]
        topics = [ChatCreated.TOPIC, PromptQueued.TOPIC]          # None = every event

        def apply(self, event, rows):
            if isinstance(event, PromptQueued):
                cur = rows.get("status", event.originator_id)     # current row, or None
                return [Update("status", event.originator_id, {"queue_length": cur["queue_length"] + 1})]
            if isinstance(event, ChatDeleted):                    # multi-row: every row of the chat
                return [Delete("status", event.originator_id), DeleteWhere("calls", {"chat_id": event.originator_id})]
            ...

Contracts:

* ``apply(event, rows)`` is pure: it reads nothing but the event and ``rows``, and it returns the
  operations to perform; it never writes. ``rows`` shows the view as it is *before* this event (every
  earlier event, including the earlier ones of the same batch, already applied). Returned operations are
  applied in order after ``apply`` returns.
* ``rows.get(table, key)`` and ``rows.select(table, where, order_by)`` return plain dicts with canonical
  values (see ``Column.normalize``); treat them as read-only.
* Nothing here knows SQL. A backend provides a ``RowStore`` (point read, filtered read, write of final
  rows) inside its transaction; ``ViewState`` keeps the rows known so far, batches the writes and flushes
  them before any filtered read, so a backend executes one multi-row write per table per batch.

Modules, by role: ``projections.schema`` (column types, ``Column``, ``Table``), ``projections.rowops`` (row
operations, ``Rows``), ``projections.viewstate`` (``ViewState``, ``RowCache``, ``MemoryStore``),
``projections.errors``; this module holds ``Projection`` and re-exports the rest.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, ClassVar, Iterable, Sequence

# The engine's parts, by role (re-exported here: ``from projections.engine import ...`` names them all).
from projections.errors import (  # noqa: F401
    BuildBusy, BuildGone, BuildsNotAligned, PositionConflict, ProjectionError, ProjectionFailed,
)
from projections.rowops import Delete, DeleteWhere, RowOp, Rows, Update, UpdateWhere, Upsert  # noqa: F401
from projections.schema import (  # noqa: F401
    BIGINT, BOOLEAN, COLUMN_TYPES, INTEGER, JSON, MAX_IDENTIFIER, REAL, TEXT, TIMESTAMP, UBIGINT, Column, OrderBy,
    Table, _json_encode, check_identifier, matches, parse_order_by, physical_name, sort_rows,
)
from projections.viewstate import MemoryStore, RowCache, RowStore, ViewState  # noqa: F401


# -- projections ----------------------------------------------------------------------------------
class Projection:
    """Base class of a read model. Subclasses set ``name``, ``version``, ``tables`` and ``apply``.

    * ``name``: identifier (tables are ``<name>_v<version>_<table>``).
    * ``version``: bump it whenever ``apply`` or ``tables`` change meaning; the new version is then
      built beside the live one by a blue/green rebuild (or in place) before it serves readers.
    * ``topics``: the event TOPICs ``apply`` handles, or None for every event. Filtering happens in
      SQL when reading the notification log, and unhandled events are never decoded.
    * ``streamwise``: the rows depend on one stream at a time (see the attribute); rebuilds then read
      the log stream by stream.
    * ``personal``: False for a view that reads no personal field (see the attribute): no sealed value is
      opened for it.
    """

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    tables: ClassVar[Sequence[Table]] = ()
    topics: ClassVar[Sequence[str] | None] = None
    #: True when the rows depend on one stream at a time (a stream's rows are a function of its own events,
    #: and rows of different streams have different keys): a rebuild may then fold the log stream by stream
    #: (``projections.streamwise``). False (log order) for projections that join streams.
    streamwise: ClassVar[bool] = False
    #: False when ``apply`` reads no personal field (``ledger.privacy``): its events are decoded as stored
    #: (``ledger.codec.MsgspecMapper.to_clear_event``: no key opened, none needed; the personal places hold empty
    #: placeholders), so a view that holds no personal data never decrypts any, and its rebuild does not pay for
    #: it. A view with this False holds the same rows on a sealed ledger as on a plain one
    #: (tests/privacy/test_clear_views.py).
    personal: ClassVar[bool] = True
    #: the notification id of the event ``apply`` is given, in a log-order batch (None elsewhere: a stream-wise
    #: build's fold); what an erasure's rewrite of rows reads as of (``projections.erasure``)
    position: int | None = None

    def decoder(self, app: Any) -> Callable[[Any], Any]:
        """How this projection's stored events become events: opening sealed values or not (``personal``)."""
        return app.mapper.to_domain_event if self.personal else app.mapper.to_clear_event

    def prepare(self, events: Sequence[Any]) -> None:
        """Called with a batch's events for this projection (those of its ``topics``) before its
        transaction opens: read anything the projection needs from outside the view here (never while
        the view's locks are held)."""

    def begin_batch(self) -> None:
        """Called before the first event of each batch (one transaction)."""

    def end_batch(self, rows: Rows) -> Iterable[RowOp]:
        """Called after the last event of each batch, before its rows and position are written: a
        projection may emit here, once per key, rows that many events of the batch changed."""
        return ()

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:  # pragma: no cover - abstract
        raise NotImplementedError

    def stream_done(self, stream_id: Any) -> None:
        """A stream-wise build has taken this stream's rows: drop what is kept in memory for it (so the
        build's memory stays flat)."""

    # -- helpers used by the backends ----------------------------------------------------------
    @classmethod
    def table_map(cls) -> dict[str, Table]:
        return {t.name: t for t in cls.tables}

    @classmethod
    def check(cls) -> None:
        check_identifier(cls.name, "projection")
        if not isinstance(cls.version, int) or cls.version < 1:
            raise ProjectionError(f"projection {cls.name}: version must be an integer >= 1")
        if not cls.tables:
            raise ProjectionError(f"projection {cls.name}: no tables")
        names = [t.name for t in cls.tables]
        if len(set(names)) != len(names):
            raise ProjectionError(f"projection {cls.name}: duplicate table names")

    @classmethod
    def topic_set(cls) -> frozenset[str] | None:
        return None if cls.topics is None else frozenset(cls.topics)

    @classmethod
    def definition(cls) -> list[dict[str, Any]]:
        return [t.spec() for t in cls.tables]

    @classmethod
    def fingerprint(cls) -> str:
        fp = cls.__dict__.get("_fingerprint")
        if fp is None:
            fp = hashlib.sha256(_json_encode(cls.definition())).hexdigest()[:16]
            cls._fingerprint = fp  # type: ignore[attr-defined]
        return fp

