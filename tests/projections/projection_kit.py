"""Test-only events and projections for the projection engine (the chat events are not needed).

Streams are "groups" of keyed integer items. ``Items`` keeps one row per item and one summary row
per group; it exercises point reads (``rows.get``), filtered reads (``rows.select``), upserts, updates,
deletes and multi-row deletes/updates, and ignores ``Noted`` events through its topic filter.
"""

from __future__ import annotations

import itertools
import os
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable
from uuid import UUID, uuid5

from ledger.base import LedgerEvent
from ledger.store import DatabaseURL
from projections import (
    BIGINT, BOOLEAN, INTEGER, JSON, TEXT, TIMESTAMP, Column, Delete, DeleteWhere, Projection, Table, Update,
    UpdateWhere, Upsert,
)


class ItemSet(LedgerEvent):
    TOPIC = "test:projections.ItemSet"
    key: str
    value: int
    tag: str


class ItemRemoved(LedgerEvent):
    TOPIC = "test:projections.ItemRemoved"
    key: str


class GroupCleared(LedgerEvent):
    TOPIC = "test:projections.GroupCleared"


class GroupShifted(LedgerEvent):
    TOPIC = "test:projections.GroupShifted"
    delta: int


class GroupRetagged(LedgerEvent):
    TOPIC = "test:projections.GroupRetagged"
    tag: str


class Noted(LedgerEvent):
    """Not handled by ``Items``: filtered out by topic."""

    TOPIC = "test:projections.Noted"
    text: str


ITEM_COLUMNS = [Column("grp", TEXT), Column("key", TEXT), Column("value", INTEGER, nullable=False),
                Column("tag", TEXT), Column("updated_at", TIMESTAMP), Column("meta", JSON)]
GROUP_COLUMNS = [Column("grp", TEXT), Column("items", INTEGER, nullable=False),
                 Column("total", BIGINT, nullable=False), Column("last_key", TEXT), Column("active", BOOLEAN)]


class Items(Projection):
    name = "items"
    version = 1
    tables = [Table("items", ITEM_COLUMNS, ["grp", "key"], indexes=[["tag"]]),
              Table("groups", GROUP_COLUMNS, ["grp"])]
    topics = [ItemSet.TOPIC, ItemRemoved.TOPIC, GroupCleared.TOPIC, GroupShifted.TOPIC, GroupRetagged.TOPIC]

    def item_row(self, e: ItemSet, grp: str) -> dict[str, Any]:
        return {"grp": grp, "key": e.key, "value": e.value, "tag": e.tag, "updated_at": e.timestamp,
                "meta": {"by": e.originator_id, "v": e.originator_version, "tags": (e.tag,)}}

    def apply(self, e: Any, rows: Any) -> list[Any]:
        grp = str(e.originator_id)
        group = rows.get("groups", grp) or {"grp": grp, "items": 0, "total": 0, "last_key": None, "active": True}
        if isinstance(e, ItemSet):
            cur = rows.get("items", (grp, e.key))
            return [Upsert("items", self.item_row(e, grp)),
                    Upsert("groups", {**group, "items": group["items"] + (cur is None),
                                      "total": group["total"] + e.value - (cur["value"] if cur else 0),
                                      "last_key": e.key, "active": True})]
        if isinstance(e, ItemRemoved):
            cur = rows.get("items", {"grp": grp, "key": e.key})
            if cur is None:
                return []
            return [Delete("items", (grp, e.key)),
                    Update("groups", grp, {"items": group["items"] - 1, "total": group["total"] - cur["value"]})]
        if isinstance(e, GroupCleared):
            return [DeleteWhere("items", {"grp": grp}),
                    Upsert("groups", {**group, "items": 0, "total": 0, "active": False})]
        if isinstance(e, GroupShifted):
            # "shift every value": read the group's rows, write each one (multi-row logic via select)
            members = rows.select("items", {"grp": grp}, order_by="key")
            ops: list[Any] = [Update("items", (grp, r["key"]), {"value": r["value"] + e.delta}) for r in members]
            return ops + [Update("groups", grp, {"total": group["total"] + e.delta * len(members)})]
        if isinstance(e, GroupRetagged):
            return [UpdateWhere("items", {"grp": grp}, {"tag": e.tag})]
        raise AssertionError(f"unexpected event {e!r}")


class ItemsV2(Items):
    """Version 2: a new column (``double``) in ``items``; the rest is unchanged."""

    version = 2
    tables = [Table("items", ITEM_COLUMNS + [Column("double", INTEGER)], ["grp", "key"], indexes=[["tag"]]),
              Table("groups", GROUP_COLUMNS, ["grp"])]

    def apply(self, e: Any, rows: Any) -> list[Any]:
        ops = super().apply(e, rows)
        out = []
        for op in ops:
            if isinstance(op, Upsert) and op.table == "items":
                op = Upsert("items", {**op.row, "double": op.row["value"] * 2})
            out.append(op)
        return out


class ItemsUpperTags(Items):
    """Same tables as v1, different values: tags upper-cased (row-level differences)."""

    version = 3

    def item_row(self, e: ItemSet, grp: str) -> dict[str, Any]:
        return {**super().item_row(e, grp), "tag": e.tag.upper()}


_names = itertools.count()


def renamed(cls: type[Projection], prefix: str = "p") -> Projection:
    """An instance of ``cls`` under a fresh name (fresh tables in a shared database)."""
    sub = type(f"{cls.__name__}_{prefix}", (cls,), {"name": f"{prefix}{next(_names)}_{cls.name}"})
    return sub()


# -- writing events --------------------------------------------------------------------------------
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
_group_ns = UUID("3f1c1d8e-58a0-4bb1-9a9c-1d2f0e6f5a10")


class Writer:
    """Appends events to groups (one stream each), keeping versions and timestamps consecutive."""

    def __init__(self, app: Any, run: str = "") -> None:
        self.app = app
        self.run = run or str(next(_names))
        self.versions: dict[UUID, int] = {}
        self.clock = itertools.count()

    def group(self, n: int) -> UUID:
        return uuid5(_group_ns, f"{self.run}/{n}")

    def event(self, cls: type[LedgerEvent], group: int, **fields: Any) -> LedgerEvent:
        gid = self.group(group)
        v = self.versions.get(gid, 0) + 1
        self.versions[gid] = v
        return cls(originator_id=gid, originator_version=v, timestamp=T0 + timedelta(seconds=next(self.clock)),
                   **fields)

    def save(self, events: Iterable[LedgerEvent]) -> None:
        events = list(events)
        if events:
            self.app.save(*events)

    def items(self, n_groups: int = 3, per_group: int = 5) -> list[LedgerEvent]:
        """A plain workload: every group gets ``per_group`` items, plus a note."""
        evs = []
        for i in range(per_group):
            for g in range(n_groups):
                evs.append(self.event(ItemSet, g, key=f"k{i}", value=i * 10 + g, tag=f"t{i % 2}"))
        evs.append(self.event(Noted, 0, text="ignored"))
        return evs


def all_events(app: Any) -> list[Any]:
    return [e for _, e in app.iter_events(0)]


def read_build(backend: Any, projection: Projection, version: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every table of a build (default: the live one), in key order."""
    with backend.reading(projection, version) as r:
        return {name: r.query(name) for name in r.tables}



def pg_admin_conninfo() -> str:
    """A connection to the test server (the same ``CHAT_LEDGER_TEST_PG`` as ``tests/conftest.py``)."""
    return DatabaseURL.parse(os.environ.get("CHAT_LEDGER_TEST_PG",
                                            "postgresql://postgres@127.0.0.1:5432/postgres")).psycopg_conninfo()
