"""Reads of the views: ``SqlBackend.reading``/``snapshot``/``query`` and their ``Reader`` and ``Snapshot``."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from projections.engine import OrderBy, Projection, ProjectionError, Table, parse_order_by, physical_name
from projections.builds import Bookkeeping
from projections.records import Failure
from projections.sqlbase import _q


class Reading(Bookkeeping):
    """Reads of a live build (or a given one), each in one read transaction."""

    @contextmanager
    def reading(self, projection: Projection | type[Projection] | str,
                version: int | None = None) -> Iterator[Reader]:
        """A reader of the LIVE version's tables (or of build ``version``), all reads in one snapshot::

            with backend.reading("chat_status") as r:
                chats = r.query("status", where={"organization_id": org}, order_by="-updated_at")

        Raises ``ProjectionError`` when the projection has no live version yet (catch it up first)."""
        name = projection if isinstance(projection, str) else projection.name
        with self._read_tx() as cur:
            reader = self._reader(cur, name, version)
            if reader is None:
                if version is not None:
                    raise ProjectionError(f"projection {name} has no build v{version}")
                raise ProjectionError(f"projection {name} has no live version yet: catch it up first")
            yield reader

    def _reader(self, cur: Any, name: str, version: int | None) -> Reader | None:
        if version is None:
            cur.execute(self._sql(
                f"SELECT l.version, t.fingerprint, t.definition FROM {self._qualify('projection_live')} l "
                f"JOIN {self._qualify('projection_tracking')} t ON t.projection = l.projection "
                "AND t.version = l.version WHERE l.projection = %s"), (name,))
        else:
            cur.execute(self._sql(
                f"SELECT version, fingerprint, definition FROM {self._qualify('projection_tracking')} "
                "WHERE projection = %s AND version = %s"), (name, version))
        row = cur.fetchone()
        if row is None:
            return None
        version, fingerprint, definition = row
        tables = self._definitions.get((name, version, fingerprint))
        if tables is None:
            specs = json.loads(definition) if isinstance(definition, str) else definition
            tables = {s["name"]: Table.from_spec(s) for s in specs}
            self._definitions[(name, version, fingerprint)] = tables
        return Reader(self, cur, name, version, tables)

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One read transaction over every projection's live build, position and recorded failure (what
        ``events verify`` compares with the log)."""
        with self._read_tx() as cur:
            yield Snapshot(self, cur)

    def stored_form(self, table: Table, row: dict[str, Any]) -> dict[str, Any]:
        """A normalized row as reading it back from this database gives it (PostgreSQL: see NUL)."""
        return row

    def query(self, projection: Projection | type[Projection] | str, table: str,
              where: Mapping[str, Any] | None = None, order_by: OrderBy = None,
              limit: int | None = None, version: int | None = None,
              after: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of ``table`` in the live version (or build ``version``): ``where`` = {column: value |
        [values] | None}, ``order_by`` = "col" | "-col" | [..] (default: primary key order), ``after`` =
        {column: value, ..}: only rows whose (columns) > (values), a keyset page. Values are
        canonical (text as str, timestamps as aware UTC datetimes, json as builtins)."""
        with self.reading(projection, version) as r:
            return r.query(table, where, order_by, limit, after)


class Reader:
    """Reads one live version inside one read transaction (see ``SqlBackend.reading``)."""

    def __init__(self, backend: Reading, cur: Any, name: str, version: int, tables: dict[str, Table]) -> None:
        self.backend, self.cur, self.projection, self.version, self.tables = backend, cur, name, version, tables

    def query(self, table: str, where: Mapping[str, Any] | None = None, order_by: OrderBy = None,
              limit: int | None = None, after: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        t = self.tables.get(table)
        if t is None:
            raise ProjectionError(f"projection {self.projection} v{self.version} has no table {table!r}")
        return self.backend._select(self.cur, t, physical_name(self.projection, self.version, table),
                                    t.normalize_where(where), parse_order_by(t, order_by), limit, after)

    def scan(self, table: str, page: int = 1000) -> Iterator[dict[str, Any]]:
        """Every row of ``table`` in primary-key order, read ``page`` rows at a time (memory stays bounded)."""
        t = self.tables[table]
        b = self.backend
        keys = t.primary_key
        encoders = [b._encoder(t.column(k)) for k in keys]
        select = f"SELECT {', '.join(map(_q, t.column_names))} FROM {b._qualify(physical_name(self.projection, self.version, table))}"
        after = f" WHERE ({', '.join(map(_q, keys))}) > ({', '.join([b.PARAM] * len(keys))})"
        order = f" ORDER BY {', '.join(map(_q, keys))} LIMIT {int(page)}"
        last: tuple[Any, ...] | None = None
        while True:
            if last is None:
                self.cur.execute(select + order)
            else:
                self.cur.execute(select + after + order, [e(v) for e, v in zip(encoders, last)])
            rows = b._decode_rows(t, self.cur.fetchall())
            if not rows:
                return
            yield from rows
            last = t.key_of(rows[-1])

    def text_search(self, table: str, terms: Any, where: Mapping[str, Any] | None = None,
                    join: tuple[Reader, str] | None = None, join_where: Mapping[str, Any] | None = None,
                    ranges: Mapping[str, tuple[Any, Any]] | None = None,
                    contains: Mapping[str, str] | None = None, limit: int = 20, offset: int = 0,
                    candidates: int = 2000, newest: str | None = None) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """Rows of ``table`` whose ``text_search`` column matches ``terms`` (``projections.textquery.parse``),
        best first (the engine's rank; ties in primary-key order), filtered by ``where`` (equality, as
        ``query``), ``ranges`` ({column: (low, high)}, inclusive, None for open), ``contains`` ({text column:
        substring}) and, when ``join`` names a table of another reader of the same snapshot (``Snapshot.live``)
        whose one-column primary key is a column of ``table``, by ``join_where`` on that table's row (a row
        without one is no hit). Each hit: (row, joined row or None). Only the newest ``candidates`` matches are ranked
        (by column ``newest`` where the engine's index cannot give insertion order — SQLite's can); ``self.capped`` says afterwards whether there were more."""
        from projections.textquery import fts5, tsquery

        t = self.tables[table]
        if t.text_search is None:
            raise ProjectionError(f"table {table} of {self.projection} has no text search")
        b = self.backend
        name = physical_name(self.projection, self.version, table)
        frm, cond, rank, rank_params, recency = b._text_search_sql(name, t.text_search, "d", newest)
        match = tsquery(terms) if b.PARAM == "%s" else fts5(terms)
        cols = [f"d.{_q(c)}" for c in t.column_names]
        conds = [cond]
        params: list[Any] = [match]
        scope = t.normalize_where(where)
        w, p = b._where(t, scope, "d.")
        if w:
            conds.append(w[len(" WHERE "):])
            params += p
        for col, (low, high) in (ranges or {}).items():
            enc = b._encoder(t.column(col))
            norm = t.column(col).normalize
            if low is not None:
                conds.append(f"d.{_q(col)} >= {b.PARAM}")
                params.append(enc(norm(low)))
            if high is not None:
                conds.append(f"d.{_q(col)} <= {b.PARAM}")
                params.append(enc(norm(high)))
        for col, sub in (contains or {}).items():
            t.column(col)
            conds.append(f"d.{_q(col)} LIKE {b.PARAM} ESCAPE '\\'")
            params.append(_like(sub))
        j: Table | None = None
        if join is not None:
            other, jname = join
            j = other.tables[jname]
            key = j.primary_key[0]
            frm += f" JOIN {b._qualify(physical_name(other.projection, other.version, jname))} c ON c.{_q(key)} = d.{_q(key)}"
            cols += [f"c.{_q(c)}" for c in j.column_names]
            w, p = b._where(j, j.normalize_where(join_where), "c.")
            if w:
                conds.append(w[len(" WHERE "):])
                params += p
        # Rank the newest ``candidates`` matches that pass the filters, not every match: the engine's rank costs
        # a little per matching row, and a word in most documents matches hundreds of thousands; the newest are
        # read from the index in order and the query stops at the bound. (``capped`` tells the caller.)
        n = len(t.column_names)
        width = n + (len(j.column_names) if j is not None else 0)
        keys = ", ".join(f"x{t.column_names.index(k)}" for k in t.primary_key)

        def run(source: str, source_params: list[Any]) -> list[Any]:
            inner = (f"SELECT {', '.join(f'{c} AS x{i}' for i, c in enumerate(cols))}, {rank} AS x_rank FROM "
                     f"{source} WHERE {' AND '.join(conds)} ORDER BY {recency} DESC LIMIT {int(candidates)}")
            sql = (f"SELECT {', '.join(f'x{i}' for i in range(width))}, count(*) OVER () FROM ({inner}) h "
                   f"ORDER BY x_rank, {keys} LIMIT {int(limit)} OFFSET {int(offset)}")
            # (the rank's parameters, if any, come first: the rank is in the inner select list)
            all_params = [match] * rank_params + source_params + params
            self.cur.execute(sql, all_params)
            return self.cur.fetchall()  # type: ignore[no-any-return]

        raw = None
        walk = self._walk(t, name, terms, scope, newest, candidates)
        if walk is not None:
            # The newest rows in scope first, read in order of the recency index and matched one by one: for
            # a query most documents match, the newest ``candidates`` matches are among them, found without
            # reading every match (which the engine's own index would give, in no order of time). Only a
            # walk that found all ``candidates`` answers; otherwise the usual query does (the same rows).
            source, source_params = walk
            table = f"{b._qualify(name)} d"  # (the FROM of a dialect that walks is the table, then the join)
            if not frm.startswith(table):
                raise ProjectionError(f"a walk of table {name} in {frm!r}")
            raw = run(source + frm[len(table):], source_params)
            if not raw or raw[0][-1] < candidates:
                raw = None
        if raw is None:
            raw = run(frm, [])
        self.capped = bool(raw) and raw[0][-1] >= candidates
        rows = b._decode_rows(t, [r[:n] for r in raw])
        joined = b._decode_rows(j, [r[n:width] for r in raw]) if j is not None else [None] * len(rows)
        return list(zip(rows, joined))

    #: rows of the newest a search walks at most (``_walk``), and how many times the candidates the statistics
    #: must expect to find among them
    WALK_ROWS = 20_000
    WALK_MARGIN = 1

    def _walk(self, t: Table, name: str, terms: Any, where: Mapping[str, Any] | None, newest: str | None,
              candidates: int) -> tuple[str, list[Any]] | None:
        """The newest ``WALK_ROWS`` rows in scope (``where``, normalized), as a FROM source, for a query with a
        phrase whose words the database's statistics say are common enough that its ``candidates`` newest matches
        are likely among a ``WALK_MARGIN``-th of them (words of different terms taken as independent, a phrase as
        common as its rarest word), and reading them costs less than checking every match the GIN index gives;
        None otherwise, or where the engine gives matches newest first itself. (PostgreSQL's planner takes a
        phrase to match a small fixed share of the rows, whatever its words: for a common phrase it reads every
        match through the GIN index and sorts them by time.)"""
        b = self.backend
        if newest is None or t.text_search is None or not any(len(term.words) > 1 for term in terms):
            return None  # (a query of words alone: the planner estimates from the same statistics, and well)
        stats = b._text_statistics(self.cur, name, t.text_search)
        if stats is None or not stats.words:
            return None
        share = 1.0
        for term in terms:
            if not term.excluded:
                share *= min(stats.words.get(w, 0.0) for w in term.words)
        if share == 0 or candidates / share * self.WALK_MARGIN > self.WALK_ROWS:
            return None  # (its candidates are not expected among the rows a walk reads)
        # The walk reads about candidates / share rows, the GIN index every match in scope, each of which costs
        # about as many times more to check as the phrase has words (the positions of each, in the row)
        matches = share * stats.rows * stats.share(where)
        if candidates / share >= max(len(term.words) for term in terms) * matches:
            return None
        w, p = b._where(t, where, "w.")
        return (f"(SELECT * FROM {b._qualify(name)} w{w} ORDER BY w.{_q(newest)} DESC LIMIT {self.WALK_ROWS}) d",
                list(p))

    def distinct(self, table: str, column: str, where: Mapping[str, Any] | None = None,
                 contains: Mapping[str, str] | None = None) -> set[Any]:
        """The distinct values of ``column`` in the rows of ``table`` matching ``where`` (equality, as ``query``)
        and ``contains`` ({text column: substring})."""
        t = self.tables[table]
        b = self.backend
        w, params = b._where(t, t.normalize_where(where), "")
        conds = [w[len(" WHERE "):]] if w else []
        for col, sub in (contains or {}).items():
            t.column(col)
            conds.append(f"{_q(col)} LIKE {b.PARAM} ESCAPE '\\'")
            params = [*params, _like(sub)]
        sql = (f"SELECT DISTINCT {_q(t.column(column).name)} FROM "
               f"{b._qualify(physical_name(self.projection, self.version, table))}"
               + (f" WHERE {' AND '.join(conds)}" if conds else ""))
        self.cur.execute(sql, params)
        return {r[0] for r in self.cur.fetchall()}

    def position(self) -> int:
        """The notification the rows read here reflect (same snapshot as ``query``)."""
        b = self.backend
        self.cur.execute(b._sql(f"SELECT position FROM {b._qualify('projection_tracking')} "
                                "WHERE projection = %s AND version = %s"), (self.projection, self.version))
        return self.cur.fetchone()[0]


class Snapshot:
    """Reads of several projections in one read transaction (``SqlBackend.snapshot``)."""

    def __init__(self, backend: Reading, cur: Any) -> None:
        self.backend, self.cur = backend, cur

    def live(self, name: str) -> Reader | None:
        """A reader of the projection's live build, or None when nothing is live."""
        return self.backend._reader(self.cur, name, None)

    def build(self, name: str, version: int) -> Reader | None:
        """A reader of build ``version``, or None when there is no such build."""
        return self.backend._reader(self.cur, name, version)

    def failure(self, name: str, version: int) -> Failure | None:
        b = self.backend
        q = b._FAILURES.format(b._qualify("projection_failures")) + " WHERE projection = %s AND version = %s"
        return b._failures(self.cur, q, (name, version)).get((name, version))


def _like(sub: str) -> str:
    """A LIKE pattern matching ``sub`` anywhere (its wildcards escaped with ``\\``)."""
    return "%" + sub.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
