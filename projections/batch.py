"""The write paths of ``SqlBackend``: the exactly-once batch and stream-wise row inserts.

Exactly once: ``apply_batch`` checks the build's lease and locks the tracking row, refuses a batch read from
another position than the tracked one, or whose first position is at or below it (``PositionConflict``,
nothing written), applies the events, writes the rows and the new position, and commits: rows and position
move together or not at all."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Mapping, Sequence

from projections.engine import (
    PositionConflict, Projection, ProjectionError, ProjectionFailed, Table, ViewState, physical_name,
)
from projections.builds import Bookkeeping, index_name
from projections.sqlbase import _now, _q, _Writer, transient_errors


#: ``_batch_writes``' "most rows" for stream-wise inserts: always the bulk path (PostgreSQL: COPY).
COPY_ROWS = 1_000_000


class Batches(Bookkeeping):
    """Writes rows into a build: batches of events (``apply_batch``), or stream-wise rows (``insert_rows``)."""

    def apply_batch(self, projection: Projection, version: int, items: Sequence[tuple[int, Any]],
                    upto: int | None = None, after: int | None = None) -> int:
        """Apply ``items`` ((notification id, event), ids ascending) to build ``version`` and move its
        position to ``max(last id, upto)``, in one transaction. Returns the new position.

        ``upto`` lets a topic-filtered projection record that it has seen every notification up to a
        head even when the last ones were not for it (an empty ``items`` just moves the position).
        ``after`` is the position the batch was read from: the batch is refused unless the build is
        still there. Raises ``PositionConflict`` (nothing written) when the build moved from ``after``, or
        when the first position (first id, or ``upto`` for an empty batch) is at or below the tracked
        position; ``BuildBusy`` when another writer holds the build's lease. A failure of the projection on
        the events, or rows it gives that cannot be stored, raise ``ProjectionFailed`` and roll the whole
        batch back: the previous position and rows stay."""
        if not items and upto is None:
            raise ValueError("empty batch without upto")
        ids = [i for i, _ in items]
        if any(b <= a for a, b in zip(ids, ids[1:])):
            raise ProjectionError("batch notification ids must be strictly ascending")
        first = ids[0] if ids else upto
        assert first is not None
        new_position = max(ids[-1] if ids else 0, upto or 0)
        key = (projection.name, version)
        writer = self._writers.get(key)
        if writer is None:
            writer = self._writers.setdefault(key, _Writer(self.cache_rows))
        topics = projection.topic_set()
        if topics is not None:  # not for this projection (catch-up filters in SQL already)
            items = [(nid, e) for nid, e in items if getattr(type(e), "TOPIC", None) in topics]
        with writer.lock:
            # Whatever the projection reads from elsewhere (a fold's states from the event store) is
            # read now, before the view transaction holds its locks (on SQLite, the file's write lock).
            try:
                projection.prepare([e for _, e in items])
            except (ProjectionError, *transient_errors()):
                raise
            except Exception as e:
                raise ProjectionFailed(projection.name, version, f"{type(e).__name__}: {e}") from e
            return self._apply_batch(projection, version, items, first, new_position, after, writer)

    def _batch_writes(self, cur: Any, most_rows: int) -> Any:
        """Context of a batch's row writes and position update (``most_rows``: the most rows written
        to one table); dialects may send them together."""
        return nullcontext()

    def _apply_batch(self, projection: Projection, version: int, items: Sequence[tuple[int, Any]],
                     first: int, new_position: int, after: int | None, writer: _Writer) -> int:
        name = projection.name
        try:
            with self._write_tx() as cur:
                self._check_lease(cur, name, version)
                cur.execute(self._sql(
                    f"SELECT position, writer, fingerprint FROM {self._qualify('projection_tracking')} "
                    f"WHERE projection = %s AND version = %s{self.FOR_UPDATE}"), (name, version))
                row = cur.fetchone()
                if row is None:
                    raise ProjectionError(f"projection {name} v{version} has no tables here "
                                          "(create the build first)")
                position, token, fingerprint = row
                if fingerprint != projection.fingerprint():
                    raise ProjectionError(
                        f"projection {name} v{version} was built with other tables than the "
                        "code defines: bump the projection's version or rebuild it")
                if after is not None and position != after:
                    raise PositionConflict(
                        f"batch refused: projection {name} v{version} is at notification {position}, the "
                        f"batch was read at {after} (another writer moved or reset the build)")
                if first <= position:
                    raise PositionConflict(
                        f"batch refused: projection {name} v{version} is at notification "
                        f"{position}, the batch starts at {first} (already applied)")
                if token != writer.token or position != writer.position:
                    writer.cache.clear()  # someone else wrote since we filled the cache
                if position == 0:  # (a stream-wise build that stopped midway left its indexes suspended)
                    self._resume_indexes(cur, projection, version)
                state = ViewState(projection.table_map(), _TxStore(self, cur, name, version), writer.cache)
                projection.begin_batch()
                for nid, event in items:
                    projection.position = nid
                    try:
                        ops = projection.apply(event, state)
                        for op in ops or ():
                            state.apply(op)
                    except Exception as e:
                        if isinstance(e, transient_errors()) and not self._is_row_error(e):
                            raise
                        raise ProjectionFailed(name, version, f"{type(e).__name__}: {e}").at(nid, event) from e
                    finally:
                        projection.position = None
                try:
                    for op in projection.end_batch(state) or ():
                        state.apply(op)
                    with self._batch_writes(cur, max(map(len, state.dirty.values()), default=0)):
                        state.flush()
                        cur.execute(self._sql(
                            f"UPDATE {self._qualify('projection_tracking')} SET position = %s, writer = %s, "
                            "updated_at = %s WHERE projection = %s AND version = %s"),
                            (new_position, writer.token, self._encode_ts(_now()), name, version))
                        cur.execute(self._sql(
                            f"DELETE FROM {self._qualify('projection_failures')} WHERE projection = %s "
                            "AND version = %s AND notification_id <= %s"), (name, version, new_position))
                except Exception as e:
                    # Rows are computed and written for the whole batch at its end: which event gave a row
                    # that cannot be stored is not known here (the runner narrows the batch down).
                    if isinstance(e, transient_errors()) and not self._is_row_error(e):
                        raise
                    raise ProjectionFailed(name, version, f"{type(e).__name__}: {e}") from e
        except BaseException:
            writer.invalidate()  # the cache may hold rows of the rolled-back batch
            raise
        writer.position = new_position
        writer.cache.trim()
        return new_position

    # -- stream-wise builds (``projections.streamwise``) -------------------------------------------
    def insert_rows(self, projection: Projection, version: int, rows: Mapping[str, Sequence[dict[str, Any]]],
                    position: int | None = None, delegate: str | None = None) -> None:
        """Insert normalized rows into build ``version`` while it is built stream-wise (none of their keys is
        in it yet: a duplicate key is an error), in one transaction; with ``position``, the build's position
        moves there from 0 in the same transaction (the last one of the build). Checks the build's lease:
        held by the calling thread, or, with ``delegate`` (the holder's lease token), by the rebuilding process
        this worker writes for. The build's row cache is dropped (rows were written around it)."""
        name = projection.name
        with self._write_tx() as cur:
            if delegate is None:
                self._check_lease(cur, name, version)
            else:
                self._check_delegate(cur, name, version, delegate)
            most = max(map(len, rows.values()), default=0)
            with self._batch_writes(cur, max(most, COPY_ROWS)):
                for table in projection.tables:
                    some = rows.get(table.name)
                    if some:
                        self._insert_rows(cur, table, physical_name(name, version, table.name), some)
                if position is not None:
                    self._resume_indexes(cur, projection, version)
                    for table in projection.tables:  # (only here: the statistics of a table with every row in)
                        self._analyze(cur, physical_name(name, version, table.name))
                    cur.execute(self._sql(
                        f"UPDATE {self._qualify('projection_tracking')} SET position = %s, writer = NULL, "
                        "updated_at = %s WHERE projection = %s AND version = %s AND position = 0"),
                        (position, self._encode_ts(_now()), name, version))
                    if cur.rowcount != 1:
                        raise PositionConflict(f"projection {name} v{version} is no longer an empty build at 0")
        self._forget(name, version)

    def suspend_indexes(self, projection: Projection, version: int) -> None:
        """Before a stream-wise build of ``version`` (empty, at position 0, its lease held): its secondary and
        full-text indexes are dropped or stop following the rows one by one; the build's last ``insert_rows``
        (the one that sets its position) builds them over every row at once, in its transaction. (Sorting
        once is several times cheaper than keeping an index of rows that arrive stream by stream, in no order
        of its columns: docs/commands.md, "Stream-wise rebuilds".) Absent only while the build is at position
        0: a batch applied at position 0 (a build that stopped midway) restores them first."""
        if not any(t.text_search or t.indexes for t in projection.tables):
            return
        with self._write_tx() as cur:
            self._check_lease(cur, projection.name, version)
            for table in projection.tables:
                name = physical_name(projection.name, version, table.name)
                for i in range(1, len(table.indexes) + 1):
                    cur.execute(f"DROP INDEX IF EXISTS {self._qualify(index_name(name, i))}")
                if table.text_search is not None:
                    self._suspend_text_search(cur, name, table.text_search)

    def _resume_indexes(self, cur: Any, projection: Projection, version: int) -> None:
        for table in projection.tables:
            name = physical_name(projection.name, version, table.name)
            self._create_indexes(cur, name, table)
            if table.text_search is not None:
                self._resume_text_search(cur, name, table.text_search)

    def _insert_rows(self, cur: Any, table: Table, name: str, rows: Sequence[dict[str, Any]]) -> None:
        cols = table.column_names
        cur.executemany(f"INSERT INTO {self._qualify(name)} ({', '.join(map(_q, cols))}) "
                        f"VALUES ({', '.join([self.PARAM] * len(cols))})", list(map(self._row_encoder(table), rows)))


class _TxStore:
    """The ``RowStore`` of one build inside a backend's write transaction."""

    def __init__(self, backend: Batches, cur: Any, projection: str, version: int) -> None:
        self.b, self.cur, self.projection, self.version = backend, cur, projection, version
        self._fetch_sql: dict[str, str] = {}

    def _name(self, table: Table) -> str:
        return physical_name(self.projection, self.version, table.name)

    def fetch(self, table: Table, key: tuple[Any, ...]) -> dict[str, Any] | None:
        sql = self._fetch_sql.get(table.name)
        if sql is None:
            cond = " AND ".join(f"{_q(k)} = {self.b.PARAM}" for k in table.primary_key)
            sql = self._fetch_sql[table.name] = (
                f"SELECT {', '.join(map(_q, table.column_names))} FROM {self.b._qualify(self._name(table))} WHERE {cond}")
        enc = [self.b._encoder(table.column(k)) for k in table.primary_key]
        self.cur.execute(sql, tuple(e(v) for e, v in zip(enc, key)))
        row = self.cur.fetchone()
        return self.b._decode_rows(table, [row])[0] if row is not None else None

    def fetch_where(self, table: Table, where: Mapping[str, Any], order: list[tuple[str, bool]]) -> list[dict[str, Any]]:
        return self.b._select(self.cur, table, self._name(table), where, order)

    def write(self, table: Table, deletes: list[tuple[Any, ...]], upserts: list[dict[str, Any]]) -> None:
        name = self._name(table)
        qname = self.b._qualify(name)
        enc = [self.b._encoder(table.column(k)) for k in table.primary_key]
        if deletes:
            if len(table.primary_key) == 1:
                e = enc[0]
                for i in range(0, len(deletes), self.b.CHUNK):
                    chunk = deletes[i:i + self.b.CHUNK]
                    self.cur.execute(f"DELETE FROM {qname} WHERE {_q(table.primary_key[0])} IN "
                                     f"({', '.join([self.b.PARAM] * len(chunk))})", [e(k[0]) for k in chunk])
            else:
                cond = " AND ".join(f"{_q(k)} = {self.b.PARAM}" for k in table.primary_key)
                self.cur.executemany(f"DELETE FROM {qname} WHERE {cond}",
                                     [tuple(e(v) for e, v in zip(enc, k)) for k in deletes])
        if upserts:
            self.b._upsert_rows(self.cur, table, name, upserts)
