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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, ClassVar, Iterable, Mapping, Protocol, Sequence, Union
from uuid import UUID

import msgspec

# -- column types ---------------------------------------------------------------------------------
TEXT = "text"
INTEGER = "integer"
BIGINT = "bigint"
#: an unsigned 64-bit integer (0 .. 2**64 - 1): the Codex-style conversation's counters are ``u64``
UBIGINT = "ubigint"
BOOLEAN = "boolean"
REAL = "real"
JSON = "json"
TIMESTAMP = "timestamp"
COLUMN_TYPES = (TEXT, INTEGER, BIGINT, UBIGINT, BOOLEAN, REAL, JSON, TIMESTAMP)

_INT_RANGES = {INTEGER: (-(2**31), 2**31 - 1), BIGINT: (-(2**63), 2**63 - 1), UBIGINT: (0, 2**64 - 1)}
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
#: PostgreSQL truncates identifiers longer than this; we refuse them instead.
MAX_IDENTIFIER = 63


class ProjectionError(Exception):
    """A projection could not be defined, applied, built or read. The message says which and why."""


class PositionConflict(ProjectionError):
    """A batch was refused because the view is already at or past its first position (exactly once)."""


class BuildsNotAligned(ProjectionError):
    """Two builds cannot be compared: they are not at the same notification position."""


class BuildBusy(ProjectionError):
    """Another writer holds the lease of a build (or of a projection's rebuild); nothing was written."""


class BuildGone(ProjectionError):
    """The build being caught up was dropped meanwhile (a rebuild switched readers and pruned it)."""


class ProjectionFailed(ProjectionError):
    """A projection cannot apply an event: its ``apply`` raised, or the rows it gives cannot be stored.

    ``notification_id`` (with the stream, its version and the topic) names the event; it is None while
    the failure is only known for a whole batch (rows are written at the end of a batch), until the
    runner has narrowed the batch down to the one event."""

    def __init__(self, projection: str, version: int, reason: str, notification_id: int | None = None,
                 stream_id: Any = None, stream_version: int | None = None, topic: str | None = None) -> None:
        self.projection, self.version, self.reason = projection, version, reason
        self.notification_id, self.stream_id = notification_id, stream_id
        self.stream_version, self.topic = stream_version, topic
        if notification_id is None:
            where = "a batch"
        else:
            where = (f"stream {stream_id} version {stream_version} (notification {notification_id}, {topic})")
        super().__init__(f"projection {projection} v{version} cannot apply {where}: {reason}")

    def at(self, notification_id: int, event: Any) -> ProjectionFailed:
        """The same failure, pinned to one event."""
        return ProjectionFailed(self.projection, self.version, self.reason, notification_id,
                                event.originator_id, event.originator_version,
                                getattr(type(event), "TOPIC", type(event).__name__))


def check_identifier(name: str, what: str) -> str:
    if not _IDENT.match(name) or len(name) > MAX_IDENTIFIER:
        raise ProjectionError(f"invalid {what} name {name!r}: use lower-case letters, digits and _ "
                              f"(at most {MAX_IDENTIFIER} characters)")
    return name


def _canonical_json(value: Any) -> Any:
    # Structs, UUIDs, datetimes, enums, tuples -> the builtins a JSON round trip gives back, so a row
    # held in memory equals the same row read back from either database.
    return _json_decode(_json_encode(value))


_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


@dataclass(frozen=True)
class Column:
    """A column: ``type`` is one of ``COLUMN_TYPES``; primary-key columns are never null."""

    name: str
    type: str
    nullable: bool = True

    def __post_init__(self) -> None:
        check_identifier(self.name, "column")
        if self.type not in COLUMN_TYPES:
            raise ProjectionError(f"column {self.name}: unknown type {self.type!r} (one of {', '.join(COLUMN_TYPES)})")
        # ``normalize`` is on the hot path of every row operation: the common case (a value already in
        # canonical form) is one type check; everything else goes through ``_normalize``.
        slow = self._normalize
        exact = {TEXT: str, BOOLEAN: bool, REAL: float}.get(self.type)
        if self.type in _INT_RANGES:
            lo, hi = _INT_RANGES[self.type]
            fast = lambda v: v if v.__class__ is int and lo <= v <= hi else slow(v)  # noqa: E731
        elif exact is not None:
            fast = lambda v: v if v.__class__ is exact else slow(v)  # noqa: E731
        elif self.type == TIMESTAMP:
            fast = lambda v: v if v.__class__ is datetime and v.tzinfo is timezone.utc else slow(v)  # noqa: E731
        else:
            fast = slow
        object.__setattr__(self, "normalize", fast)

    def normalize(self, value: Any) -> Any:  # replaced per instance by a fast path (see __post_init__)
        return self._normalize(value)

    def _normalize(self, value: Any) -> Any:
        """The canonical Python value stored for ``value`` (what reading the row back returns).

        text: str (a UUID becomes its str); integer/bigint/ubigint: int; boolean: bool; real: float;
        json: JSON builtins (Structs, UUIDs and datetimes converted as msgspec encodes them);
        timestamp: an aware datetime in UTC (naive datetimes are refused: time zones must be explicit).
        """
        if value is None:
            if not self.nullable:
                raise ProjectionError(f"column {self.name} is not nullable")
            return None
        t = self.type
        if t == TEXT:
            if isinstance(value, str):
                return value
            if isinstance(value, UUID):
                return str(value)
        elif t in _INT_RANGES:
            if isinstance(value, int) and not isinstance(value, bool):
                lo, hi = _INT_RANGES[t]
                if not lo <= value <= hi:  # the same limits on every backend (Postgres integer is 32-bit)
                    raise ProjectionError(f"column {self.name} ({t}): {value} is out of range")
                return int(value)
        elif t == BOOLEAN:
            if isinstance(value, bool):
                return value
        elif t == REAL:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif t == JSON:
            return _canonical_json(value)
        elif t == TIMESTAMP:
            if isinstance(value, datetime):
                if value.tzinfo is None:
                    raise ProjectionError(f"column {self.name}: naive datetime {value!r} (give a time zone)")
                return value.astimezone(timezone.utc)
        raise ProjectionError(f"column {self.name} ({t}): cannot store {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class Table:
    """A table a projection owns. Stored as ``<projection>_v<version>_<name>``.

    ``indexes`` lists extra column tuples to index (the primary key is always indexed), for the
    ``where`` filters readers and ``rows.select`` use (e.g. ``("organization_id",)``).
    """

    name: str
    columns: Sequence[Column]
    primary_key: Sequence[str]
    indexes: Sequence[Sequence[str]] = ()

    def __post_init__(self) -> None:
        check_identifier(self.name, "table")
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "primary_key", tuple(self.primary_key))
        object.__setattr__(self, "indexes", tuple(tuple(i) for i in self.indexes))
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ProjectionError(f"table {self.name}: duplicate column names")
        if not self.primary_key:
            raise ProjectionError(f"table {self.name}: a primary key is required")
        by_name = {c.name: c for c in self.columns}
        for k in self.primary_key:
            if k not in by_name:
                raise ProjectionError(f"table {self.name}: primary key column {k} is not a column")
            if by_name[k].type in (JSON, REAL):
                raise ProjectionError(f"table {self.name}: primary key column {k} cannot be {by_name[k].type}")
        # Primary-key columns are never null (a key with a null is no key).
        cols = tuple(Column(c.name, c.type, False) if c.name in self.primary_key else c for c in self.columns)
        object.__setattr__(self, "columns", cols)
        object.__setattr__(self, "_by_name", {c.name: c for c in cols})
        object.__setattr__(self, "_names", tuple(c.name for c in cols))
        object.__setattr__(self, "_normalizers", tuple((c.name, c.normalize) for c in cols))
        object.__setattr__(self, "_key_normalizers", tuple(self._by_name[k].normalize for k in self.primary_key))
        for index in self.indexes:
            for k in index:
                if k not in by_name:
                    raise ProjectionError(f"table {self.name}: index column {k} is not a column")

    @property
    def column_names(self) -> tuple[str, ...]:
        return self._names  # type: ignore[attr-defined,no-any-return]

    def column(self, name: str) -> Column:
        try:
            return self._by_name[name]  # type: ignore[attr-defined,no-any-return]
        except KeyError:
            raise ProjectionError(f"table {self.name} has no column {name!r}") from None

    def key_of(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple([row[k] for k in self.primary_key])

    def normalize_key(self, key: Any) -> tuple[Any, ...]:
        """A key given as a mapping of the key columns, a tuple in key order, or a bare value (one-column key)."""
        cls = key.__class__
        if cls is tuple:
            values = key
        elif cls is str or cls is UUID or cls is int:  # the common one-column key, without ABC checks
            values = (key,)
        elif isinstance(key, Mapping):
            extra = set(key) - set(self.primary_key)
            if extra or len(key) != len(self.primary_key):
                raise ProjectionError(f"table {self.name}: key must give exactly {', '.join(self.primary_key)}")
            values = tuple(key[k] for k in self.primary_key)
        elif isinstance(key, tuple):
            values = tuple(key)
        else:
            values = (key,)
        if len(values) != len(self.primary_key):
            raise ProjectionError(f"table {self.name}: key {key!r} does not match ({', '.join(self.primary_key)})")
        return tuple([n(v) for n, v in zip(self._key_normalizers, values)])  # type: ignore[attr-defined]

    def normalize_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A full row: every column (missing nullable columns are null); unknown columns are refused."""
        get = row.get
        out = {name: norm(get(name)) for name, norm in self._normalizers}  # type: ignore[attr-defined]
        if not row.keys() <= out.keys():
            unknown = set(row) - set(out)
            raise ProjectionError(f"table {self.name} has no column(s) {', '.join(sorted(unknown))}")
        return out

    def normalize_changes(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in changes.items():
            if name in self.primary_key:
                raise ProjectionError(f"table {self.name}: cannot change primary key column {name} (delete and upsert)")
            out[name] = self.column(name).normalize(value)
        return out

    def normalize_where(self, where: Mapping[str, Any] | None) -> dict[str, Any]:
        """Equality filters; a list/tuple/set value means "one of" (SQL IN); None means IS NULL."""
        out: dict[str, Any] = {}
        for name, value in (where or {}).items():
            col = self.column(name)
            if isinstance(value, (list, tuple, set, frozenset)):
                out[name] = tuple(col.normalize(v) for v in value)
            elif value is None:
                out[name] = None
            else:
                out[name] = col.normalize(value)
        return out

    def spec(self) -> dict[str, Any]:
        """A JSON description (stored with each build; the fingerprint of a definition)."""
        return {"name": self.name, "columns": [[c.name, c.type, c.nullable] for c in self.columns],
                "primary_key": list(self.primary_key), "indexes": [list(i) for i in self.indexes]}

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Table:
        return cls(spec["name"], [Column(n, t, bool(nl)) for n, t, nl in spec["columns"]],
                   spec["primary_key"], spec.get("indexes", ()))


def matches(row: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Does a row satisfy normalized ``where`` filters (see ``Table.normalize_where``)."""
    for name, value in where.items():
        v = row[name]
        if isinstance(value, tuple):
            if v not in value:
                return False
        elif v != value:  # None == None: IS NULL
            return False
    return True


OrderBy = Union[str, Sequence[str], None]


def parse_order_by(table: Table, order_by: OrderBy) -> list[tuple[str, bool]]:
    """``"col"``, ``"-col"`` (descending) or a sequence of them -> [(column, descending)].
    Without an order the primary key order is used, so results are always deterministic."""
    if order_by is None:
        items: Sequence[str] = table.primary_key
    elif isinstance(order_by, str):
        items = [order_by]
    else:
        items = order_by
    out = []
    for item in items:
        desc = item.startswith("-")
        name = item[1:] if desc else item
        if table.column(name).type == JSON:
            raise ProjectionError(f"table {table.name}: cannot order by json column {name}")
        out.append((name, desc))
    return out


def sort_rows(rows: list[dict[str, Any]], order: list[tuple[str, bool]]) -> list[dict[str, Any]]:
    """Sort like SQL with NULLS FIRST ascending (the order both backends are told to use)."""
    for name, desc in reversed(order):
        rows.sort(key=lambda r: (False, 0) if r[name] is None else (True, r[name]), reverse=desc)
    return rows


# -- row operations -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Upsert:
    """Insert the row, or replace the existing row with the same key. The row is the whole row:
    columns not given are null."""

    table: str
    row: Mapping[str, Any]


@dataclass(frozen=True)
class Update:
    """Change some columns of the row with this key; nothing happens when there is no such row."""

    table: str
    key: Any
    changes: Mapping[str, Any]


@dataclass(frozen=True)
class Delete:
    """Delete the row with this key (nothing happens when there is none)."""

    table: str
    key: Any


@dataclass(frozen=True)
class DeleteWhere:
    """Delete every row matching ``where`` (e.g. every row of one chat)."""

    table: str
    where: Mapping[str, Any]


@dataclass(frozen=True)
class UpdateWhere:
    """Change some columns of every row matching ``where``."""

    table: str
    where: Mapping[str, Any]
    changes: Mapping[str, Any]


RowOp = Union[Upsert, Update, Delete, DeleteWhere, UpdateWhere]


class Rows(Protocol):
    """Read-only access to the view's current rows, given to ``Projection.apply``."""

    def get(self, table: str, key: Any) -> dict[str, Any] | None: ...

    def select(self, table: str, where: Mapping[str, Any] | None = None,
               order_by: OrderBy = None) -> list[dict[str, Any]]: ...


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
    """

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    tables: ClassVar[Sequence[Table]] = ()
    topics: ClassVar[Sequence[str] | None] = None
    #: True when the rows depend on one stream at a time (a stream's rows are a function of its own events,
    #: and rows of different streams have different keys): a rebuild may then fold the log stream by stream
    #: (``projections.streamwise``). False (log order) for projections that join streams.
    streamwise: ClassVar[bool] = False

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
        import hashlib

        fp = cls.__dict__.get("_fingerprint")
        if fp is None:
            fp = hashlib.sha256(_json_encode(cls.definition())).hexdigest()[:16]
            cls._fingerprint = fp  # type: ignore[attr-defined]
        return fp


def physical_name(projection: str, version: int, table: str) -> str:
    return check_identifier(f"{projection}_v{version}_{table}", "physical table")


# -- the state of a view inside one write transaction ---------------------------------------------
class RowStore(Protocol):
    """What a backend provides inside its write transaction (rows are normalized dicts)."""

    def fetch(self, table: Table, key: tuple[Any, ...]) -> dict[str, Any] | None: ...

    def fetch_where(self, table: Table, where: Mapping[str, Any],
                    order: list[tuple[str, bool]]) -> list[dict[str, Any]]: ...

    def write(self, table: Table, deletes: list[tuple[Any, ...]], upserts: list[dict[str, Any]]) -> None: ...


class RowCache:
    """Rows known to equal the committed view (``None`` = known absent), kept across batches.

    Only valid while this writer is the only one that committed since it filled the cache: the
    backend checks that with the tracking row (same writer token, same position) at the start of each
    batch and clears the cache otherwise, and after any failed batch. Bounded: when it grows past
    ``max_rows`` the oldest half is forgotten (they are read again on demand).
    """

    def __init__(self, max_rows: int = 100_000) -> None:
        self.max_rows = max_rows
        self.rows: dict[tuple[str, tuple[Any, ...]], dict[str, Any] | None] = {}
        #: tables whose every row is in ``rows`` (a build created empty by this writer, nothing
        #: forgotten since): a key missing from ``rows`` is known to be absent, no read needed.
        self.complete: set[str] = set()

    def clear(self) -> None:
        self.rows.clear()
        self.complete.clear()

    def trim(self) -> None:
        if len(self.rows) > self.max_rows:
            drop = len(self.rows) - self.max_rows // 2
            for k in list(self.rows)[:drop]:
                del self.rows[k]
            self.complete.clear()


class ViewState:
    """The ``rows`` given to ``apply`` and the executor of row operations for one batch.

    ``known`` holds the current state of every row read or written so far; ``dirty`` the keys whose
    state differs from the store. ``flush`` writes the final state of dirty keys (deletes, then
    upserts of whole rows), once per table; it runs before each filtered read and at commit, so a
    filtered read always sees every operation applied before it.
    """

    def __init__(self, tables: Mapping[str, Table], store: RowStore, cache: RowCache | None = None) -> None:
        self.tables = dict(tables)
        self.store = store
        self.known = cache.rows if cache is not None else {}
        self.complete = cache.complete if cache is not None else set()
        self.dirty: dict[str, set[tuple[Any, ...]]] = {name: set() for name in self.tables}
        # Upserted rows not normalized yet: a key upserted by many events of one batch (a chat's status
        # row) is normalized once, when it is read or flushed, not once per event.
        self._raw: set[tuple[str, tuple[Any, ...]]] = set()
        self._ops = {Upsert: self._upsert, Update: self._update_op, Delete: self._delete,
                     DeleteWhere: self._delete_where, UpdateWhere: self._update_where}

    def table(self, name: str) -> Table:
        try:
            return self.tables[name]
        except KeyError:
            raise ProjectionError(f"unknown table {name!r} (tables: {', '.join(self.tables)})") from None

    # -- Rows --------------------------------------------------------------------------------------
    def get(self, table: str, key: Any) -> dict[str, Any] | None:
        t = self.table(table)
        k = t.normalize_key(key)
        row = self._get(t, k)
        return dict(row) if row is not None else None

    def _get(self, t: Table, k: tuple[Any, ...]) -> dict[str, Any] | None:
        ck = (t.name, k)
        if ck in self.known:
            if ck in self._raw:
                return self._normalized(t, ck)
            return self.known[ck]
        if t.name in self.complete:
            return None
        row = self.store.fetch(t, k)
        self.known[ck] = row
        return row

    def select(self, table: str, where: Mapping[str, Any] | None = None,
               order_by: OrderBy = None) -> list[dict[str, Any]]:
        t = self.table(table)
        w = t.normalize_where(where)
        order = parse_order_by(t, order_by)
        self.flush()
        rows = self.store.fetch_where(t, w, order)
        for row in rows:
            self.known[(t.name, t.key_of(row))] = row
        return [dict(r) for r in rows]

    # -- operations --------------------------------------------------------------------------------
    def apply(self, op: RowOp) -> None:
        handler = self._ops.get(op.__class__)
        if handler is None:
            raise ProjectionError(f"not a row operation: {op!r}")
        handler(self.table(op.table), op)

    def _upsert(self, t: Table, op: Upsert) -> None:
        row = op.row
        try:
            k = t.normalize_key(tuple([row[c] for c in t.primary_key]))
        except KeyError as e:
            raise ProjectionError(f"table {t.name}: upsert without key column {e}") from None
        ck = (t.name, k)
        self.known[ck] = row
        self._raw.add(ck)
        self.dirty[t.name].add(k)

    def _normalized(self, t: Table, ck: tuple[str, tuple[Any, ...]]) -> dict[str, Any]:
        row = t.normalize_row(self.known[ck])  # type: ignore[arg-type]
        self.known[ck] = row
        self._raw.discard(ck)
        return row

    def _update_op(self, t: Table, op: Update) -> None:
        self._update(t, t.normalize_key(op.key), t.normalize_changes(op.changes))

    def _delete(self, t: Table, op: Delete) -> None:
        self._set(t, t.normalize_key(op.key), None)

    def _delete_where(self, t: Table, op: DeleteWhere) -> None:
        for row in self.select(t.name, op.where):
            self._set(t, t.key_of(row), None)

    def _update_where(self, t: Table, op: UpdateWhere) -> None:
        changes = t.normalize_changes(op.changes)
        for row in self.select(t.name, op.where):
            self._update(t, t.key_of(row), changes)

    def _update(self, t: Table, k: tuple[Any, ...], changes: dict[str, Any]) -> None:
        current = self._get(t, k)
        if current is not None:
            self._set(t, k, {**current, **changes})

    def _set(self, t: Table, k: tuple[Any, ...], row: dict[str, Any] | None) -> None:
        ck = (t.name, k)
        self.known[ck] = row
        self._raw.discard(ck)
        self.dirty[t.name].add(k)

    def flush(self) -> None:
        for name, keys in self.dirty.items():
            if not keys:
                continue
            t = self.tables[name]
            deletes, upserts = [], []
            for k in keys:
                ck = (name, k)
                row = self._normalized(t, ck) if ck in self._raw else self.known[ck]
                if row is None:
                    deletes.append(k)
                else:
                    upserts.append(row)
            self.store.write(t, deletes, upserts)
            keys.clear()


# -- an in-memory store: the reference semantics, and pure unit tests of projections ---------------
class MemoryStore:
    """A ``RowStore`` over dicts. ``run(projection, events)`` is the whole pipeline without a database."""

    def __init__(self, tables: Sequence[Table]) -> None:
        self.tables = {t.name: t for t in tables}
        self.data: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {t.name: {} for t in tables}

    def fetch(self, table: Table, key: tuple[Any, ...]) -> dict[str, Any] | None:
        row = self.data[table.name].get(key)
        return dict(row) if row is not None else None

    def fetch_where(self, table: Table, where: Mapping[str, Any],
                    order: list[tuple[str, bool]]) -> list[dict[str, Any]]:
        rows = [dict(r) for r in self.data[table.name].values() if matches(r, where)]
        return sort_rows(rows, order)

    def write(self, table: Table, deletes: list[tuple[Any, ...]], upserts: list[dict[str, Any]]) -> None:
        data = self.data[table.name]
        for k in deletes:
            data.pop(k, None)
        for row in upserts:
            data[table.key_of(row)] = dict(row)

    def rows(self, table: str) -> list[dict[str, Any]]:
        t = self.tables[table]
        return sort_rows([dict(r) for r in self.data[table].values()], parse_order_by(t, None))

    def apply(self, projection: Projection, events: Iterable[Any]) -> None:
        state = ViewState(self.tables, self)
        topics = projection.topic_set()
        projection.begin_batch()
        for event in events:
            if topics is not None and getattr(type(event), "TOPIC", None) not in topics:
                continue
            for op in projection.apply(event, state) or ():
                state.apply(op)
        for op in projection.end_batch(state) or ():
            state.apply(op)
        state.flush()

    @classmethod
    def run(cls, projection: Projection, events: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
        """Every table's rows (in key order) after applying ``events``: a pure oracle for tests."""
        store = cls(projection.tables)
        store.apply(projection, events)
        return {name: store.rows(name) for name in store.tables}

