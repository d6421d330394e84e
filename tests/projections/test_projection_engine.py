"""The pure engine: table specs, value normalization, row operations over the in-memory store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

import pytest

from tests.projections.projection_kit import GroupCleared, GroupShifted, ItemRemoved, Items, ItemSet, Noted, Writer
from projections import (
    INTEGER, JSON, TEXT, TIMESTAMP, Column, Delete, MemoryStore, Projection, ProjectionError, Table, Update, Upsert,
)
from projections.engine import ViewState


class FakeApp:
    def save(self, *events):  # Writer only needs save when asked to
        raise AssertionError


def test_table_spec_validation() -> None:
    with pytest.raises(ProjectionError, match="primary key"):
        Table("t", [Column("a", TEXT)], [])
    with pytest.raises(ProjectionError, match="not a column"):
        Table("t", [Column("a", TEXT)], ["b"])
    with pytest.raises(ProjectionError, match="cannot be json"):
        Table("t", [Column("a", JSON)], ["a"])
    with pytest.raises(ProjectionError, match="invalid table name"):
        Table("Bad-Name", [Column("a", TEXT)], ["a"])
    with pytest.raises(ProjectionError, match="unknown type"):
        Column("a", "varchar")
    t = Table("t", [Column("a", TEXT), Column("b", INTEGER)], ["a"])
    assert t.column("a").nullable is False  # key columns are never null
    assert Table.from_spec(t.spec()) == t


def test_normalize_values() -> None:
    uid = UUID(int=5)
    assert Column("a", TEXT).normalize(uid) == str(uid)
    ts = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    out = Column("t", TIMESTAMP).normalize(ts)
    assert out == ts and out.tzinfo is timezone.utc
    with pytest.raises(ProjectionError, match="naive"):
        Column("t", TIMESTAMP).normalize(datetime(2026, 1, 1))
    assert Column("j", JSON).normalize({"u": uid, "t": (1, 2)}) == {"u": str(uid), "t": [1, 2]}
    with pytest.raises(ProjectionError, match="cannot store"):
        Column("n", INTEGER).normalize("3")
    with pytest.raises(ProjectionError, match="out of range"):
        Column("n", INTEGER).normalize(2**31)
    assert Column("n", "bigint").normalize(2**31) == 2**31
    with pytest.raises(ProjectionError, match="not nullable"):
        Column("n", INTEGER, nullable=False).normalize(None)


def test_row_operations_semantics() -> None:
    t = Table("t", [Column("k", TEXT), Column("v", INTEGER), Column("w", TEXT)], ["k"])
    store = MemoryStore([t])
    state = ViewState({"t": t}, store)
    state.apply(Upsert("t", {"k": "a", "v": 1, "w": "x"}))
    state.apply(Upsert("t", {"k": "b", "v": 2}))  # missing nullable column -> null
    state.apply(Update("t", "a", {"v": 10}))  # merges into the existing row
    state.apply(Update("t", "zzz", {"v": 10}))  # no such row: nothing happens
    assert state.get("t", "a") == {"k": "a", "v": 10, "w": "x"}
    assert state.get("t", "b") == {"k": "b", "v": 2, "w": None}
    assert store.rows("t") == []  # nothing written before a flush
    state.apply(Delete("t", {"k": "b"}))
    state.flush()
    assert store.rows("t") == [{"k": "a", "v": 10, "w": "x"}]
    # A bad row is refused when the batch reads or writes it (rows are normalized once per batch).
    state.apply(Upsert("t", {"k": "c", "nope": 1}))
    with pytest.raises(ProjectionError, match="no column"):
        state.flush()
    with pytest.raises(ProjectionError, match="primary key"):
        state.apply(Update("t", "a", {"k": "b"}))
    with pytest.raises(ProjectionError, match="unknown table"):
        state.get("nope", "a")


def test_select_sees_earlier_operations_of_the_batch() -> None:
    t = Table("t", [Column("g", TEXT), Column("k", INTEGER), Column("v", INTEGER)], ["g", "k"])
    store = MemoryStore([t])
    state = ViewState({"t": t}, store)
    for k in (3, 1, 2):
        state.apply(Upsert("t", {"g": "x", "k": k, "v": k}))
    state.apply(Upsert("t", {"g": "y", "k": 1, "v": None}))
    assert [r["k"] for r in state.select("t", {"g": "x"})] == [1, 2, 3]
    assert [r["k"] for r in state.select("t", {"g": "x"}, order_by="-v")] == [3, 2, 1]
    assert [r["g"] for r in state.select("t", {"v": None})] == ["y"]
    assert [r["k"] for r in state.select("t", {"k": [1, 3], "g": "x"})] == [1, 3]


def test_items_projection_in_memory() -> None:
    w = Writer(FakeApp(), run="mem")
    events = [
        w.event(ItemSet, 0, key="a", value=1, tag="x"),
        w.event(ItemSet, 0, key="b", value=2, tag="x"),
        w.event(ItemSet, 0, key="a", value=5, tag="y"),
        w.event(GroupShifted, 0, delta=10),
        w.event(ItemRemoved, 0, key="b"),
        w.event(Noted, 0, text="ignored"),
        w.event(ItemSet, 1, key="a", value=7, tag="x"),
        w.event(GroupCleared, 1),
    ]
    view = MemoryStore.run(Items(), events)
    g0, g1 = str(w.group(0)), str(w.group(1))
    assert [(r["grp"], r["key"], r["value"], r["tag"]) for r in view["items"]] == [(g0, "a", 15, "y")]
    groups = {r["grp"]: r for r in view["groups"]}
    assert (groups[g0]["items"], groups[g0]["total"], groups[g0]["active"]) == (1, 15, True)
    assert (groups[g1]["items"], groups[g1]["total"], groups[g1]["active"]) == (0, 0, False)


def test_projection_checks() -> None:
    class NoTables(Projection):
        name = "empty"

    with pytest.raises(ProjectionError, match="no tables"):
        NoTables.check()
    assert Items.fingerprint() == Items.fingerprint()
