"""Blue/green comparison of two builds of a projection (``SqlBackend.compare``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

from projections.engine import BuildsNotAligned, ProjectionError, Table, physical_name
from projections.reading import Reader, Reading
from projections.records import Build, Diff, TableDiff
from projections.sqlbase import _digest_value, _iter, _q


#: How many diff entries a ``Diff`` keeps for display (the digest and counts cover all of them).
DIFF_SAMPLES = 20


class Comparing(Reading):
    """Compares two builds at the same position: per table, columns and rows; a digest of all of it."""

    def compare(self, name: str, live_version: int, new_version: int) -> Diff:
        """Compare two builds row by row, in one snapshot, at the same position (else raise).

        Per table: tables only in one version count every row as added/removed; for common tables,
        added/removed columns and columns whose type changed are reported, and rows are compared on the
        common, same-typed columns, matched by the new primary key (if it is among them; otherwise whole
        rows are compared as sets). Any schema difference or differing row makes the diff non-empty.
        The digest covers all of it in a deterministic order, so the same diff gives the same digest."""
        h = hashlib.sha256()
        samples: list[dict[str, Any]] = []
        table_diffs: list[TableDiff] = []
        total = 0

        def record(entry: dict[str, Any]) -> None:
            h.update(json.dumps(entry, sort_keys=True, default=_digest_value).encode())
            h.update(b"\n")
            if len(samples) < DIFF_SAMPLES and "kind" in entry:
                samples.append(entry)

        with self._read_tx() as cur:
            cur.execute(self._sql(f"SELECT {self._BUILD_COLS} FROM {self._qualify('projection_tracking')} "
                                  "WHERE projection = %s AND version IN (%s, %s)"), (name, live_version, new_version))
            builds = {b.version: b for b in map(self._build_from_row, cur.fetchall())}
            if live_version not in builds or new_version not in builds:
                raise ProjectionError(f"projection {name}: cannot compare v{live_version} with v{new_version}: "
                                      "missing build")
            old_b, new_b = builds[live_version], builds[new_version]
            if old_b.position != new_b.position:
                raise BuildsNotAligned(f"projection {name}: v{live_version} is at {old_b.position}, v{new_version} at "
                                      f"{new_b.position}: builds must be compared at the same position")
            old_t, new_t = old_b.table_specs(), new_b.table_specs()
            for tname in sorted(set(old_t) | set(new_t)):
                if tname not in old_t or tname not in new_t:
                    status = "added" if tname not in old_t else "removed"
                    b = new_b if status == "added" else old_b
                    cur.execute(f"SELECT COUNT(*) FROM {self._qualify(physical_name(name, b.version, tname))}")
                    n = cur.fetchone()[0]
                    td = TableDiff(tname, status, rows_added=n if status == "added" else 0,
                                   rows_removed=n if status == "removed" else 0)
                    record({"table": tname, "status": status, "rows": n})
                else:
                    td = self._compare_table(cur, name, old_b.version, old_t[tname], new_b.version, new_t[tname], record)
                    if td.columns_added or td.columns_removed or td.columns_retyped:
                        record({"table": tname, "columns_added": td.columns_added,
                                "columns_removed": td.columns_removed, "columns_retyped": td.columns_retyped})
                table_diffs.append(td)
                total += td.rows_added + td.rows_removed + td.rows_changed
            live_rows, new_rows = (self._rows_digest(cur, name, b) for b in (old_b, new_b))
        equal = total == 0 and all(td.status == "common" and not (td.columns_added or td.columns_removed
                                                                   or td.columns_retyped) for td in table_diffs)
        digest = hashlib.sha256(f"{live_rows}\n{new_rows}\n{h.hexdigest()}".encode()).hexdigest()
        return Diff(name, live_version, new_version, new_b.position, equal, total,
                    digest, table_diffs, samples, live_rows, new_rows)

    def _rows_digest(self, cur: Any, name: str, build: Build) -> str:
        """sha256 over a build's rows: each table by name, each row (canonical JSON) in primary-key order."""
        h = hashlib.sha256()
        tables = build.table_specs()
        reader = Reader(self, cur, name, build.version, tables)
        for tname in sorted(tables):
            h.update(f"table {tname}\n".encode())
            for row in reader.scan(tname):
                h.update(json.dumps(row, sort_keys=True, default=_digest_value).encode())
                h.update(b"\n")
        return h.hexdigest()

    def _compare_table(self, cur: Any, name: str, old_v: int, old: Table, new_v: int, new: Table,
                       record: Any) -> TableDiff:
        old_types = {c.name: c.type for c in old.columns}
        new_types = {c.name: c.type for c in new.columns}
        added = [c for c in new.column_names if c not in old_types]
        removed = [c for c in old.column_names if c not in new_types]
        retyped = [c for c in new.column_names if c in old_types and old_types[c] != new_types[c]]
        common = [c for c in new.column_names if c in old_types and c not in retyped]
        td = TableDiff(new.name, "common", added, removed, retyped)
        o_name = self._qualify(physical_name(name, old_v, old.name))
        n_name = self._qualify(physical_name(name, new_v, new.name))
        cols = [new.column(c) for c in common]
        dec = [self._decoder(c) for c in cols]

        def decode(values: Sequence[Any]) -> dict[str, Any]:
            return {c.name: (d(v) if v is not None else None) for c, d, v in zip(cols, dec, values)}

        if common and all(k in common for k in new.primary_key):
            keys = list(new.primary_key)
            rest = [c for c in common if c not in keys]
            on = " AND ".join(f"n.{_q(k)} = o.{_q(k)}" for k in keys)
            k0 = _q(keys[0])
            cond = [f"n.{k0} IS NULL", f"o.{k0} IS NULL"] + [f"n.{_q(c)} {self.IS_DISTINCT} o.{_q(c)}" for c in rest]
            sel = ", ".join([f"n.{_q(c)}" for c in common] + [f"o.{_q(c)}" for c in common])
            order = ", ".join(f"COALESCE(n.{_q(k)}, o.{_q(k)})" for k in keys)
            cur.execute(f"SELECT {sel} FROM {n_name} n FULL OUTER JOIN {o_name} o ON {on} "
                        f"WHERE {' OR '.join(cond)} ORDER BY {order}")
            n = len(common)
            for r in _iter(cur):
                nrow, orow = decode(r[:n]), decode(r[n:])
                if r[common.index(keys[0])] is None:
                    td.rows_removed += 1
                    record({"table": new.name, "kind": "removed", "key": [orow[k] for k in keys], "old": orow})
                elif r[n + common.index(keys[0])] is None:
                    td.rows_added += 1
                    record({"table": new.name, "kind": "added", "key": [nrow[k] for k in keys], "new": nrow})
                else:
                    td.rows_changed += 1
                    changed = [c for c in rest if nrow[c] != orow[c]]
                    record({"table": new.name, "kind": "changed", "key": [nrow[k] for k in keys],
                            "columns": changed, "old": {c: orow[c] for c in changed},
                            "new": {c: nrow[c] for c in changed}})
        else:
            td.compared_by = "row"
            sel = ", ".join(map(_q, common)) if common else "1"
            order = ", ".join(str(i + 1) for i in range(max(len(common), 1)))
            for kind, a, b in (("added", n_name, o_name), ("removed", o_name, n_name)):
                cur.execute(f"SELECT {sel} FROM {a} EXCEPT SELECT {sel} FROM {b} ORDER BY {order}")
                for r in _iter(cur):
                    row = decode(r) if common else {}
                    if kind == "added":
                        td.rows_added += 1
                    else:
                        td.rows_removed += 1
                    record({"table": new.name, "kind": kind, ("new" if kind == "added" else "old"): row})
        return td
