"""Table specs of projections: column types, ``Column`` (with the canonical value a row stores), ``Table``,
and the pure helpers of filtered reads (``matches``, ``parse_order_by``, ``sort_rows``) every store shares."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence, Union
from uuid import UUID

import msgspec

from projections.errors import ProjectionError

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


def _canonical_test(cols: Sequence[Column]) -> Any:
    """A function telling, fast, whether a row is already exactly its normalized form: every column and no
    other, each value one its column's ``normalize`` gives back as the very same object (``Column``'s fast
    paths inline; a json value through its normalization). Generated from the columns, one
    test per column inline (a build checks every row it writes: ``projections.viewstate.check_canonical``)."""
    tests = []
    for i, c in enumerate(cols):
        v = f"row[{c.name!r}]"
        if c.type in _INT_RANGES:
            lo, hi = _INT_RANGES[c.type]
            test = f"(x.__class__ is int and {lo} <= x <= {hi})"
        elif c.type in (TEXT, BOOLEAN, REAL):
            test = f"x.__class__ is {({TEXT: 'str', BOOLEAN: 'bool', REAL: 'float'})[c.type]}"
        elif c.type == TIMESTAMP:
            test = "(x.__class__ is datetime and x.tzinfo is utc)"
        else:  # json: its normalization, as the test says (a value it gives back as the same object)
            test = f"norm{i}(x) is x"
        if c.nullable:
            test = f"x is None or {test}"
        tests.append(f"    x = {v}\n    if not ({test}): return False")
    source = (f"def is_canonical(row):\n    if len(row) != {len(cols)}: return False\n    try:\n"
              + "\n".join("    " + line for t in tests for line in t.split("\n"))
              + "\n    except (KeyError, ProjectionError):\n        return False\n    return True\n")
    namespace: dict[str, Any] = {"datetime": datetime, "utc": timezone.utc, "ProjectionError": ProjectionError,
                                 **{f"norm{i}": c.normalize for i, c in enumerate(cols)}}
    exec(compile(source, "<projections.schema canonical test>", "exec"), namespace)  # noqa: S102 - names checked
    return namespace["is_canonical"]


@dataclass(frozen=True)
class Table:
    """A table a projection owns. Stored as ``<projection>_v<version>_<name>``.

    ``indexes`` lists extra column tuples to index (the primary key is always indexed), for the
    ``where`` filters readers and ``rows.select`` use (e.g. ``("organization_id",)``).

    ``text_search`` names the one text column the database indexes for full-text search with its own
    engine (SQLite FTS5, PostgreSQL ``tsvector`` + GIN), kept in step with the rows by the database itself
    in the batch's transaction (``Reader.text_search`` queries it); None for none.
    """

    name: str
    columns: Sequence[Column]
    primary_key: Sequence[str]
    indexes: Sequence[Sequence[str]] = ()
    text_search: str | None = None

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
        object.__setattr__(self, "is_canonical", _canonical_test(cols))
        # What ``vetted_row`` checks of a row given as canonical: the columns whose values come typed from
        # event data and have limits the backends do not all enforce (integer ranges: SQLite has none) or a
        # canonical form a value may lack (a timestamp in another zone); text and json are taken as given.
        object.__setattr__(self, "_vetted", tuple((c.name, c.normalize) for c in cols if c.type not in (TEXT, JSON)))
        for index in self.indexes:
            for k in index:
                if k not in by_name:
                    raise ProjectionError(f"table {self.name}: index column {k} is not a column")
        if self.text_search is not None and (self.text_search not in by_name or by_name[self.text_search].type != TEXT):
            raise ProjectionError(f"table {self.name}: text_search column {self.text_search} is not a text column")

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

    def vetted_row(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        """A row given as canonical (``Upsert.canonical``): itself when each non-text, non-json value is
        already canonical (one type check each), its normalized form when one is not (a timestamp in another
        zone); an integer out of its column's range is refused as ``normalize_row`` refuses it."""
        for name, norm in self._vetted:  # type: ignore[attr-defined]
            v = row[name]
            if v is not None and norm(v) is not v:
                return self.normalize_row(row)
        return row

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
        spec = {"name": self.name, "columns": [[c.name, c.type, c.nullable] for c in self.columns],
                "primary_key": list(self.primary_key), "indexes": [list(i) for i in self.indexes]}
        if self.text_search is not None:  # (absent otherwise: the fingerprints of older tables stay the same)
            spec["text_search"] = self.text_search
        return spec

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Table:
        return cls(spec["name"], [Column(n, t, bool(nl)) for n, t, nl in spec["columns"]],
                   spec["primary_key"], spec.get("indexes", ()), spec.get("text_search"))


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



def physical_name(projection: str, version: int, table: str) -> str:
    return check_identifier(f"{projection}_v{version}_{table}", "physical table")

