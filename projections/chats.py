"""The chat views (CONTRACT §5): ``chat_status``, ``unresolved_tool_calls`` and ``chat_queue``.

Each folds chat streams with the chat's own ``evolve`` (``projections.folding``) and writes the rows the
pure row functions of ``ledger.chat.views`` give for the state after each event: an upsert of what
changed, a delete of what is gone. So the views hold exactly the rows computed from the replayed states.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable, Iterator, Mapping

from ledger.chat import events as ev
from ledger.chat.evolve import evolve
from ledger.chat.state import last_assistant_index, outstanding_tool_calls
from ledger.chat.views import queue_row, status_values, unresolved_values
from projections.engine import BIGINT, BOOLEAN, INTEGER, JSON, TEXT, TIMESTAMP, Column, Delete, Projection, RowOp, Rows, Table, Upsert
from projections.folding import StreamFold

CHAT_TOPICS = tuple(sorted(cls.TOPIC for cls in vars(ev).values()
                           if isinstance(cls, type) and issubclass(cls, ev.ChatEvent) and cls.__dict__.get("TOPIC")))

#: events that can change the latest assistant message's outstanding calls
_MESSAGE_EVENTS = tuple(cls for cls in vars(ev).values()
                        if isinstance(cls, type) and issubclass(cls, ev.ChatEvent) and "messages" in getattr(cls, "__dataclass_fields__", {}))
_UNRESOLVED_EVENTS = (*_MESSAGE_EVENTS, ev.MessageEdited, ev.ChatCreated)
_QUEUE_EVENTS = (ev.PromptQueued, ev.QueuedPromptDeleted, ev.QueuedPromptMovedToHead, ev.QueuedPromptPromoted,
                 ev.MessageEdited, ev.ChatEnded)


class ChatStateProjection(Projection):
    """Base: hands ``rows_for(before, after, event)`` the chat's state before and after each event."""

    topics: ClassVar[tuple[str, ...]] = CHAT_TOPICS
    watched: ClassVar[tuple[type, ...]] = ()

    def __init__(self, app: Any) -> None:
        self.fold = StreamFold(app, evolve, ev.ChatCreated)

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        before = self.fold.before(event)
        relevant = not self.watched or isinstance(event, self.watched)
        old = self.keys(before) if relevant and before is not None else {}
        after = self.fold.after(event, before)
        return self.diff(old, after) if relevant else self.touch(after)

    def keys(self, state: Any) -> dict[Any, dict[str, Any]]:  # pragma: no cover - overridden
        raise NotImplementedError

    def diff(self, old: dict[Any, dict[str, Any]], state: Any) -> list[RowOp]:
        new = self.keys(state)
        ops: list[RowOp] = [Delete(self.table, key) for key in old if key not in new]
        ops.extend(Upsert(self.table, row) for key, row in new.items() if old.get(key) != row)
        return ops

    def touch(self, state: Any) -> list[RowOp]:
        return []

    table: ClassVar[str] = ""


class ChatStatusView(ChatStateProjection):
    name = "chat_status"
    version = 1
    table = "status"
    tables = [Table("status", [
        Column("chat_id", TEXT), Column("organization_id", TEXT, False), Column("owner_id", TEXT, False),
        Column("parent_chat_id", TEXT), Column("root_chat_id", TEXT, False), Column("title", TEXT, False),
        Column("status", TEXT, False), Column("execution_state", TEXT, False), Column("archived", BOOLEAN, False),
        Column("queue_length", INTEGER, False), Column("last_error", JSON),
        Column("requires_action_deadline_at", TIMESTAMP), Column("compaction_requested_at", TIMESTAMP),
        Column("hook_allowed_tools", JSON), Column("model_config_id", TEXT), Column("turn_id", TEXT),
        Column("generation_attempt", INTEGER, False), Column("history_version", BIGINT, False),
        Column("worker_id", TEXT), Column("runner_id", TEXT), Column("message_count", INTEGER, False),
        Column("version", BIGINT, False), Column("updated_at", TIMESTAMP, False),
    ], primary_key=["chat_id"], indexes=[["organization_id"], ["status"]])]

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        state = self.fold.after(event, self.fold.before(event))
        return [Upsert("status", StatusRow(state))]


class StatusRow(Mapping[str, Any]):
    """The status row of a chat, computed from its folded state when the batch first reads or writes it.

    The fold updates a chat's state in place, so when a batch holds many events of one chat, the row is
    computed once, from the state after the last of them — the row the batch must leave — instead of
    once per event (rows of a batch are written once per key, last write wins)."""

    __slots__ = ("state", "_values")

    def __init__(self, state: Any) -> None:
        self.state = state
        self._values: dict[str, Any] | None = None

    def _row(self) -> dict[str, Any]:
        if self._values is None:
            self._values = status_values(self.state)
        return self._values

    def __getitem__(self, key: str) -> Any:
        if key == "chat_id" and self._values is None:
            return self.state.chat_id
        return self._row()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._row())

    def __len__(self) -> int:
        return len(self._row())

    def get(self, key: str, default: Any = None) -> Any:
        return self._row().get(key, default)

    def keys(self) -> Any:
        return self._row().keys()


class UnresolvedToolCallsView(ChatStateProjection):
    name = "unresolved_tool_calls"
    version = 1
    table = "calls"
    watched = _UNRESOLVED_EVENTS
    tables = [Table("calls", [
        Column("chat_id", TEXT), Column("tool_call_id", TEXT), Column("assistant_message_id", INTEGER, False),
        Column("tool_name", TEXT, False), Column("kind", TEXT, False), Column("execution_id", TEXT),
        Column("args", JSON), Column("since", TIMESTAMP, False),
    ], primary_key=["chat_id", "tool_call_id"])]

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        before = self.fold.before(event)
        if not isinstance(event, self.watched):
            self.fold.after(event, before)
            return []
        old_sig = _outstanding(before) if before is not None else None
        after = self.fold.after(event, before)
        new_sig = _outstanding(after)
        if new_sig == old_sig:
            return []  # the latest assistant message and its open calls are unchanged: so are the rows
        # Rows of one assistant message's call never change while it stays open: delete the calls no
        # longer open, insert the newly open ones.
        chat_id = str(event.originator_id)
        same_message = old_sig is not None and new_sig is not None and old_sig[0] == new_sig[0]
        kept = set(old_sig[1:]) if same_message else set()
        new_ids = set(new_sig[1:]) if new_sig else set()
        ops: list[RowOp] = [Delete("calls", (chat_id, cid)) for cid in (old_sig[1:] if old_sig else ())
                            if cid not in new_ids or not same_message]
        ops.extend(Upsert("calls", row) for row in unresolved_values(after) if row["tool_call_id"] not in kept)
        return ops

    def keys(self, state: Any) -> dict[Any, dict[str, Any]]:
        return {(r["chat_id"], r["tool_call_id"]): r for r in unresolved_values(state)}


def _outstanding(state: Any) -> tuple[Any, ...] | None:
    """What the unresolved rows of a chat depend on: the latest assistant message and its open calls."""
    i = last_assistant_index(state)
    if i < 0:
        return None
    calls = outstanding_tool_calls(state, count_own_results=False)
    return (state.messages[i].message_id, *(c.tool_call_id for c in calls)) if calls else None


class ChatQueueView(ChatStateProjection):
    name = "chat_queue"
    version = 1
    table = "queue"
    watched = _QUEUE_EVENTS
    tables = [Table("queue", [
        Column("chat_id", TEXT), Column("queued_message_id", INTEGER), Column("position", BIGINT, False),
        Column("created_by", TEXT, False), Column("text", TEXT, False), Column("turn_id", TEXT, False),
        Column("hook_prefix", JSON, False), Column("hook_allowed_tools", JSON), Column("model_config_id", TEXT),
    ], primary_key=["chat_id", "queued_message_id"])]

    def keys(self, state: Any) -> dict[Any, dict[str, Any]]:
        return {(str(state.chat_id), q.queued_message_id): queue_row(state.chat_id, q) for q in state.queue}


def chat_projections(app: Any) -> list[Projection]:
    return [ChatStatusView(app), UnresolvedToolCallsView(app), ChatQueueView(app)]
