"""The search view: the text of every chat, indexed by the database's own full-text engine.

Tables of the projection ``search``:

* ``search_docs``: one row per document of a chat — a message (``m<id>``), a queued prompt (``q<id>``,
  removed when it is promoted: its text is then the prompt message's), the title (``t``), an error
  (``e<version>``) — with its words (``body``, ``ledger.chat.searchdocs``), the tools it names, its author,
  time and the stream version that recorded it. Soft-deleted messages and deleted queued prompts stay,
  marked ``deleted``: an auditor searches what was said, including what was edited away. ``body`` is the
  table's ``text_search`` column (SQLite FTS5, PostgreSQL tsvector + GIN).
* ``search_chats``: one row per chat with the facts searches filter on and that change over a chat's life
  (status, archived, model, title, times), from the chat's folded state at the end of each batch.

Maintained exactly once like every view (one tracking position, one transaction per batch) and rebuilt
with them; stream-wise (a chat's rows are its own events').
"""

from __future__ import annotations

from typing import Any, Iterable

from ledger.chat import events as ev
from ledger.chat.evolve import evolve
from ledger.chat.searchdocs import parts_text, tools_column
from ledger.chat.views import uuid_str
from projections.chats import CHAT_TOPICS
from projections.errors import ProjectionError
from projections.folding import StreamFold
from projections.rowops import Delete, RowOp, Rows, Update, Upsert
from projections.schema import BIGINT, BOOLEAN, INTEGER, TEXT, TIMESTAMP, Column, Table
from projections.engine import Projection

DOCS, CHATS = "search_docs", "search_chats"


def _id(u: Any) -> str | None:
    return None if u is None else uuid_str(u)


class SearchView(Projection):
    name = "search"
    streamwise = True
    version = 1
    topics = CHAT_TOPICS
    tables = [
        Table(DOCS, [
            Column("chat_id", TEXT), Column("doc_id", TEXT), Column("organization_id", TEXT, False),
            Column("owner_id", TEXT, False), Column("kind", TEXT, False), Column("message_id", INTEGER),
            Column("role", TEXT), Column("author", TEXT), Column("tools", TEXT, False),
            Column("at", TIMESTAMP, False), Column("version", BIGINT, False), Column("deleted", BOOLEAN, False),
            Column("body", TEXT, False),
        ], primary_key=["chat_id", "doc_id"], indexes=[["organization_id", "at"]], text_search="body"),
        Table(CHATS, [
            Column("chat_id", TEXT), Column("organization_id", TEXT, False), Column("owner_id", TEXT, False),
            Column("parent_chat_id", TEXT), Column("root_chat_id", TEXT, False), Column("title", TEXT, False),
            Column("status", TEXT, False), Column("archived", BOOLEAN, False), Column("model_config_id", TEXT),
            Column("created_at", TIMESTAMP, False), Column("updated_at", TIMESTAMP, False),
            Column("version", BIGINT, False),
        ], primary_key=["chat_id"]),
    ]

    def __init__(self, app: Any) -> None:
        self.fold = StreamFold(app, evolve, ev.ChatCreated)
        self._touched: dict[int, Any] = {}  # chat id -> its state after the batch so far

    def prepare(self, events: Any) -> None:
        self.fold.prefetch(events)

    def begin_batch(self) -> None:
        self._touched.clear()

    def stream_done(self, stream_id: Any) -> None:
        self.fold.forget(stream_id.int)

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        key = event.originator_id.int
        state = self._touched.get(key)
        if state is None:
            state = self._touched[key] = evolve(self.fold.take(event), event)
        elif state.version == event.originator_version - 1:
            evolve(state, event)
        else:
            raise ProjectionError(f"chat {event.originator_id}: event version {event.originator_version} "
                                  f"does not follow {state.version} in this batch")
        return list(_docs(state, event))

    def end_batch(self, rows: Rows) -> Iterable[RowOp]:
        ops: list[RowOp] = []
        for key, s in self._touched.items():
            self.fold.put(key, s.version, s)
            ops.append(Upsert(CHATS, {
                "chat_id": uuid_str(s.chat_id), "organization_id": uuid_str(s.organization_id),
                "owner_id": uuid_str(s.owner_id), "parent_chat_id": _id(s.parent_chat_id),
                "root_chat_id": uuid_str(s.root_chat_id), "title": s.title, "status": s.status,
                "archived": s.archived, "model_config_id": _id(s.model_config_id), "created_at": s.created_at,
                "updated_at": s.updated_at or s.created_at, "version": s.version}, True))
        self._touched.clear()
        return ops


def _doc(state: Any, event: Any, doc_id: str, kind: str, body: str, tools: list[str] = (),  # type: ignore[assignment]
         message_id: int | None = None, role: str | None = None, author: Any = None) -> Upsert:
    return Upsert(DOCS, {
        "chat_id": uuid_str(state.chat_id), "doc_id": doc_id, "organization_id": uuid_str(state.organization_id),
        "owner_id": uuid_str(state.owner_id), "kind": kind, "message_id": message_id, "role": role,
        "author": _id(author), "tools": tools_column(list(tools)), "at": event.timestamp,
        "version": event.originator_version, "deleted": False, "body": body}, True)


def _deleted(state: Any, doc_id: str) -> Update:
    return Update(DOCS, (uuid_str(state.chat_id), doc_id), {"deleted": True})


def _docs(state: Any, event: Any) -> Iterable[RowOp]:
    """The row operations of one event on the chat's documents (``state``: the chat after the event)."""
    for m in getattr(event, "messages", None) or ():
        body, tools = parts_text(m.parts)
        yield _doc(state, event, f"m{m.message_id}", "message", body, tools, m.message_id, m.role, m.created_by)
    cls = event.__class__
    if cls is ev.ChatCreated or cls is ev.TitleSet:
        yield _doc(state, event, "t", "title", event.title)
    elif cls is ev.PromptQueued or cls is ev.QueuedPromptEdited:
        qid = event.prompt.queued_message_id if cls is ev.PromptQueued else event.queued_message_id
        prompt = next((q for q in state.queue if q.queued_message_id == qid), None)
        if prompt is not None:
            body, tools = parts_text(prompt.parts)
            yield _doc(state, event, f"q{qid}", "queued", body, tools, author=prompt.created_by)
    elif cls is ev.QueuedPromptPromoted:
        yield Delete(DOCS, (uuid_str(state.chat_id), f"q{event.queued_message_id}"))
    elif cls is ev.QueuedPromptDeleted:
        yield _deleted(state, f"q{event.queued_message_id}")
    elif cls is ev.MessageEdited or cls is ev.ChatEnded:
        if cls is ev.MessageEdited:
            yield from (_deleted(state, f"m{i}") for i in event.deleted_message_ids)
        yield from (_deleted(state, f"q{i}") for i in event.deleted_queued_message_ids)
    error = getattr(event, "last_error", None)
    if error is not None:
        yield _doc(state, event, f"e{event.originator_version}", "error",
                   f"{error.message}\n{error.kind or ''}".strip())


def search_projections(app: Any) -> list[Projection]:
    return [SearchView(app)]
