"""Row operations: what ``Projection.apply`` and ``end_batch`` return (``Upsert``, ``Update``, ``Delete``,
``DeleteWhere``, ``UpdateWhere``), and ``Rows``, the read-only view of current rows they are given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Union

from projections.schema import OrderBy


@dataclass(frozen=True)
class Upsert:
    """Insert the row, or replace the existing row with the same key. The row is the whole row:
    columns not given are null.

    ``canonical=True`` says the row is already what ``Table.normalize_row`` would make of it (every column,
    each value canonical: the output of a trusted pure row function such as ``ledger.chat.views``): the
    write path then stores it without normalizing each column (the hot path of a catch-up at thousands of
    chats); only the values that come typed from event data are checked, one type check each
    (``Table.vetted_row``: an integer out of range is refused on every backend, a timestamp in another zone
    converted). ``MemoryStore`` (the reference semantics, and what stream-wise builds fold
    with) checks every such row against its normalized form and refuses one that differs, so the tests
    comparing stream-wise and log-order builds check the claim."""

    table: str
    row: Mapping[str, Any]
    canonical: bool = False


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

