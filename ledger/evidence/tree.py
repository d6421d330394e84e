"""The Merkle tree over the ledger's log, stored beside it (issue 27, point 1).

**Leaves** are the stored events in notification order; a leaf's data is what is stored (docs/evidence.md):
the stream id's 16 bytes, the version (8 bytes, big-endian, signed), the topic's UTF-8 length (4 bytes,
big-endian), the topic, and the stored payload bytes — so an erased subject's ciphertext stays provable.

**Storage**: ``merkle_nodes(level, idx, hash)`` holds every complete subtree (level 0: the leaf hashes), and
``merkle_leaves(idx, notification_id)`` which event each leaf is. The tree is derived from the log, like a view:
``catch_up`` appends the events recorded since its last leaf, a page per transaction, reading each page's
right edge from the stored nodes (no rescan). It follows every insert path alike (commands, saves, imports, the
service's group commit), because it reads the log, not the writers. Two processes extending it at once cannot
store a leaf twice (the keys); the loser's page rolls back and it reads again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar
from uuid import UUID

from ledger.chain import piece, scan
from ledger.evidence.merkle import Frontier, Node, leaf_hash, root

T = TypeVar("T")

#: leaves added per transaction
PAGE = 5000


def entry_bytes(stream_id: UUID, version: int, topic: str, state: bytes) -> bytes:
    """The data of a leaf: what the events table stores for the event (the stream id, then the chain's piece)."""
    return stream_id.bytes + piece(topic, version, state)


def entry_hash(n: Any) -> bytes:
    stream = n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id))
    return leaf_hash(entry_bytes(stream, n.originator_version, n.topic, n.state))


@dataclass
class _Sql:
    """The dialect: SQLite (``?``, BLOB) or PostgreSQL (``%s``, bytea, the ledger's schema)."""

    sqlite: bool
    prefix: str

    @property
    def p(self) -> str:
        return "?" if self.sqlite else "%s"

    def ddl(self) -> list[str]:
        blob, big = ("BLOB", "INTEGER") if self.sqlite else ("bytea", "bigint")
        rowid = " WITHOUT ROWID" if self.sqlite else ""
        return [f"CREATE TABLE IF NOT EXISTS {self.prefix}merkle_nodes (level integer NOT NULL, idx {big} NOT NULL, "
                f"hash {blob} NOT NULL, PRIMARY KEY (level, idx)){rowid}",
                f"CREATE TABLE IF NOT EXISTS {self.prefix}merkle_leaves (idx {big} PRIMARY KEY, "
                f"notification_id {big} NOT NULL UNIQUE)"]


class StoredTree:
    """The stored tree of one ledger application (``app``: a ``ChatLedgerApp`` on SQLite or PostgreSQL)."""

    def __init__(self, app: Any) -> None:
        from eventsourcing.sqlite import SQLiteDatastore

        self.app = app
        self.datastore = app.recorder.datastore
        sqlite = isinstance(self.datastore, SQLiteDatastore)
        self.sql = _Sql(sqlite, "" if sqlite else f'"{self.datastore.schema}".')
        self._made = False

    # -- reading ---------------------------------------------------------------------------------------------

    def _rows(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement, params)
            return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in c.fetchall()]

    def size(self) -> int:
        """Leaves stored (the tree's size; 0 before the first checkpoint made the tables). Reads only."""
        try:
            return self._state()[0]
        except Exception as e:  # noqa: BLE001 - no tree yet (either database's "no such table")
            if "merkle_leaves" in str(e) or "no such table" in str(e) or "does not exist" in str(e):
                return 0
            raise

    def node(self, level: int, index: int) -> bytes:
        rows = self._rows(f"SELECT hash FROM {self.sql.prefix}merkle_nodes WHERE level = {self.sql.p} "
                          f"AND idx = {self.sql.p}", (level, index))
        if not rows:
            raise LookupError(f"the stored tree has no node ({level}, {index})")
        return bytes(rows[0][0])

    def root(self, size: int) -> bytes:
        return self.batched(lambda node: root(node, size))

    def batched(self, compute: Callable[[Node], T]) -> T:
        """``compute(node)`` with every node it reads fetched in one select: a first pass records which nodes it
        asks for (the proofs' and roots' shapes depend on sizes and indexes, never on the hashes), the second runs
        on them. So a proof costs two round trips, not one per node."""
        wanted: set[tuple[int, int]] = set()

        def record(level: int, index: int) -> bytes:
            wanted.add((level, index))
            return bytes(32)

        compute(record)
        found = self._nodes(wanted)

        def node(level: int, index: int) -> bytes:
            if (level, index) not in found:
                raise LookupError(f"the stored tree has no node ({level}, {index})")
            return found[level, index]

        return compute(node)

    def _nodes(self, keys: set[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        out: dict[tuple[int, int], bytes] = {}
        listed, p = sorted(keys), self.sql.p
        for i in range(0, len(listed), 200):
            chunk = listed[i:i + 200]
            pairs = ", ".join(f"({p}, {p})" for _ in chunk)
            for level, idx, h in self._rows(  # (a join: both databases then read each node by the key)
                    f"WITH k(level, idx) AS (VALUES {pairs}) SELECT n.level, n.idx, n.hash FROM k JOIN "
                    f"{self.sql.prefix}merkle_nodes n ON n.level = k.level AND n.idx = k.idx",
                    tuple(x for pair in chunk for x in pair)):
                out[int(level), int(idx)] = bytes(h)
        return out

    def leaf_of(self, stream_id: UUID, version: int) -> tuple[int, str, bytes] | None:
        """``(leaf index, topic, stored payload)`` of a stream's event at ``version``; None when there is no such
        event or the tree does not hold it yet: one select, by the events table's key and the leaves' key."""
        events, leaves = self.app.recorder.events_table_name, f"{self.sql.prefix}merkle_leaves"
        if self.sql.sqlite:
            rows = self._rows(f"SELECT l.idx, e.topic, e.state FROM {events} e JOIN {leaves} l "
                              "ON l.notification_id = e.rowid WHERE e.originator_id = ? AND e.originator_version = ?",
                              (stream_id.hex, version))
        else:
            rows = self._rows(f'SELECT l.idx, e.topic, e.state FROM {self.sql.prefix}"{events}" e JOIN {leaves} l '
                              "ON l.notification_id = e.notification_id WHERE e.originator_id = %s "
                              "AND e.originator_version = %s", (stream_id, version))
        return (int(rows[0][0]), rows[0][1], bytes(rows[0][2])) if rows else None

    def leaves(self, upto: int) -> Iterator[tuple[int, int, bytes]]:
        """``(leaf index, notification id, stored leaf hash)`` of the first ``upto`` leaves, in order."""
        p, last = self.sql.p, -1
        while last + 1 < upto:
            rows = self._rows(
                f"SELECT l.idx, l.notification_id, n.hash FROM {self.sql.prefix}merkle_leaves l "
                f"JOIN {self.sql.prefix}merkle_nodes n ON n.level = 0 AND n.idx = l.idx "
                f"WHERE l.idx > {p} AND l.idx < {p} ORDER BY l.idx LIMIT {PAGE}", (last, upto))
            if not rows:
                return
            for idx, nid, h in rows:
                yield int(idx), int(nid), bytes(h)
            last = int(rows[-1][0])

    # -- extending -------------------------------------------------------------------------------------------

    def ensure(self) -> None:
        """Make the tables (once per process; idempotent)."""
        if self._made:
            return
        with self.datastore.transaction(commit=True) as c:
            for statement in self.sql.ddl():
                c.execute(statement)
        self._made = True

    def _edge(self, size: int) -> list[bytes]:
        """The complete subtrees on the right edge of the stored tree of ``size`` leaves, largest first."""
        edge, start = [], 0
        for level in range(size.bit_length() - 1, -1, -1):
            if size >> level & 1:
                edge.append(self.node(level, start >> level))
                start += 1 << level
        return edge

    def catch_up(self, head: int | None = None) -> int:
        """Append every event recorded up to notification ``head`` (default: the log's head) that the tree does
        not hold yet; returns the tree's size."""
        from eventsourcing.persistence import IntegrityError

        self.ensure()
        head = self.app.head() if head is None else head
        lost = 0  # pages another process stored first (it extends the same tree: read again and go on)
        while lost < 100:
            size, last = self._state()
            page = list(_take(scan(self.app, head, after=last, by_notification=True), PAGE))
            if not page:
                return size
            frontier = Frontier(size, self._edge(size))
            nodes: list[tuple[int, int, bytes]] = []
            leaves: list[tuple[int, int]] = []
            for n in page:
                leaves.append((frontier.size, n.id))
                nodes.extend(frontier.append(entry_hash(n)))
            try:
                self._store(leaves, nodes, size)
            except IntegrityError:
                lost += 1
        raise RuntimeError("the Merkle tree could not be extended: other writers kept extending it")

    def _state(self) -> tuple[int, int]:
        """(size, the last leaf's notification id): two reads by the keys' indexes, never a count of the rows
        (leaves are numbered 0..size-1 without gaps, and each page appends after the greatest)."""
        t = f"{self.sql.prefix}merkle_leaves"  # (one max per select: SQLite reads a max by its index only alone)
        rows = self._rows(f"SELECT (SELECT max(idx) FROM {t}) AS last_idx, (SELECT max(notification_id) FROM {t}) "
                          "AS last_nid")
        return (0, 0) if rows[0][0] is None else (int(rows[0][0]) + 1, int(rows[0][1]))

    def _store(self, leaves: list[tuple[int, int]], nodes: list[tuple[int, int, bytes]], size: int) -> None:
        prefix = self.sql.prefix
        with self.datastore.transaction(commit=True) as c:
            c.execute(f"SELECT coalesce(max(idx) + 1, 0) FROM {prefix}merkle_leaves")
            row = c.fetchone()
            now = row[0] if not isinstance(row, dict) else next(iter(row.values()))
            if int(now) != size:  # another process extended it meanwhile: this page is not ours to add
                from eventsourcing.persistence import IntegrityError

                raise IntegrityError(f"the tree grew from {size} to {now} meanwhile")
            if self.sql.sqlite:
                c.executemany(f"INSERT INTO {prefix}merkle_leaves (idx, notification_id) VALUES (?, ?)", leaves)
                c.executemany(f"INSERT INTO {prefix}merkle_nodes (level, idx, hash) VALUES (?, ?, ?)", nodes)
                return
            # PostgreSQL: COPY (psycopg's), several times faster than row-by-row inserts for a page of leaves
            with c.copy(f"COPY {prefix}merkle_leaves (idx, notification_id) FROM STDIN") as copy:
                for row in leaves:
                    copy.write_row(row)
            with c.copy(f"COPY {prefix}merkle_nodes (level, idx, hash) FROM STDIN") as copy:
                for row in nodes:
                    copy.write_row(row)


def _take(it: Iterator[Any], n: int) -> Iterator[Any]:
    for i, x in enumerate(it):
        if i >= n:
            return
        yield x
