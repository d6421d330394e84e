"""The state of a view inside one write transaction (``ViewState``: the ``rows`` given to ``apply`` and the
executor of row operations), the row cache a writer keeps across its batches (``RowCache``), and
``MemoryStore``, a ``RowStore`` over dicts: the reference semantics, the pure oracle of tests and the
store a stream-wise build folds each stream with."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol, Sequence

from projections.errors import ProjectionError
from projections.rowops import Delete, DeleteWhere, RowOp, Update, UpdateWhere, Upsert
from projections.schema import JSON, TIMESTAMP, OrderBy, Table, _json_encode, matches, parse_order_by, sort_rows


class Folding(Protocol):
    """What ``MemoryStore`` needs of a projection (``projections.engine.Projection`` has it): its tables, its
    topics and its per-batch hooks. A protocol, so that this module never imports the engine that re-exports it."""

    tables: Sequence[Table]

    def topic_set(self) -> frozenset[str] | None: ...

    def begin_batch(self) -> None: ...

    def apply(self, event: Any, rows: Any) -> Iterable[RowOp]: ...

    def end_batch(self, rows: Any) -> Iterable[RowOp]: ...


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

    #: check each ``Upsert(..., canonical=True)`` row against ``Table.normalize_row`` (``MemoryStore`` does,
    #: so every stream-wise build and every test oracle checks the rows it is given as canonical)
    check_canonical = False

    def __init__(self, tables: Mapping[str, Table], store: RowStore, cache: RowCache | None = None,
                 check_canonical: bool | None = None) -> None:
        if check_canonical is not None:
            self.check_canonical = check_canonical
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
        if op.canonical:
            if self.check_canonical:
                check_canonical(t, row)  # the whole normalization: what vetting checks is checked
            else:
                row = t.vetted_row(row)  # (integer ranges and timestamps checked: they come from event data)
            # Canonical (``Upsert.canonical``): its key is its key columns' values as they are.
            self._set(t, tuple([row[c] for c in t.primary_key]), row)  # type: ignore[arg-type]
            return
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


def check_canonical(t: Table, row: Mapping[str, Any]) -> None:
    """Refuse a row given as canonical (``Upsert.canonical``) that is not exactly its normalized form:
    every column present, no other, each value of the type normalization gives (``1`` is not ``1.0``,
    ``True`` is not ``1``) and equal to it (JSON values equal and encoding the same: a tuple is not a list)."""
    # The common case first: every value is what its column's normalization gives back as the very same object
    # (its fast path: the value is already canonical), and the row has exactly the table's columns.
    if t.is_canonical(row):  # type: ignore[attr-defined]
        return
    normal = t.normalize_row(row)
    if row.keys() != normal.keys():
        raise ProjectionError(f"table {t.name}: a canonical row must give every column "
                              f"(missing: {', '.join(sorted(normal.keys() - row.keys()))})")
    for c in t.columns:
        a, b = row[c.name], normal[c.name]
        same = a == b and (_json_encode(a) == _json_encode(b) if c.type == JSON else a.__class__ is b.__class__)
        if not same or (c.type == TIMESTAMP and a is not None and a.tzinfo is not b.tzinfo):
            raise ProjectionError(f"table {t.name}: row given as canonical has column {c.name} = {a!r}, "
                                  f"not its canonical value {b!r}")


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

    def apply(self, projection: Folding, events: Iterable[Any]) -> None:
        state = ViewState(self.tables, self, check_canonical=True)
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
    def run(cls, projection: Folding, events: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
        """Every table's rows (in key order) after applying ``events``: a pure oracle for tests."""
        store = cls(projection.tables)
        store.apply(projection, events)
        return {name: store.rows(name) for name in store.tables}

