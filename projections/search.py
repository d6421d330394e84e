"""The search view: the text of every chat, indexed by the database's own full-text engine.

Tables of the projection ``search``:

* ``search_docs``: one row per document of a chat — a message (``m<id>``), a queued prompt (``q<id>``,
  removed when it is promoted: its text is then the prompt message's), the title (``t``), an error
  (``e<version>``) — with its words (``body``, ``ledger.chat.searchdocs``), the tools it names, its author,
  time and the stream version that recorded it. Soft-deleted messages and deleted queued prompts stay,
  marked ``deleted``: an auditor searches what was said, including what was edited away. ``body`` is the
  table's ``text_search`` column (SQLite FTS5, PostgreSQL tsvector + GIN).
The chat's facts that change over its life (status, model, title) are not copied here: a search joins the
documents with the ``chat_status`` rows of the chat views (``Reader.text_search``), read in the same snapshot.
The documents are a function of each event alone (and of the chat's first event): no fold.

Maintained exactly once like every view (one tracking position, one transaction per batch) and rebuilt
with them; stream-wise (a chat's rows are its own events').
"""

from __future__ import annotations

from typing import Any, Iterable

from ledger.chat import events as ev
from ledger.chat.searchdocs import parts_text, tools_column
from ledger.chat.views import uuid_str
from projections.chats import CHAT_TOPICS
from projections.errors import ProjectionError
from projections.rowops import Delete, RowOp, Rows, Update, Upsert
from projections.schema import BIGINT, BOOLEAN, INTEGER, TEXT, TIMESTAMP, Column, Table
from projections.engine import Projection
from projections.erasure import ERASURE_TOPICS, is_erasure, rederive

DOCS = "search_docs"


def _id(u: Any) -> str | None:
    return u if u is None or isinstance(u, str) else uuid_str(u)


class SearchView(Projection):
    name = "search"
    streamwise = True
    version = 1
    topics = CHAT_TOPICS + ERASURE_TOPICS  # (erasures: ``projections.erasure``; same rows otherwise)
    tables = [
        Table(DOCS, [
            Column("chat_id", TEXT), Column("doc_id", TEXT), Column("organization_id", TEXT, False),
            Column("owner_id", TEXT, False), Column("kind", TEXT, False), Column("message_id", INTEGER),
            Column("role", TEXT), Column("author", TEXT), Column("tools", TEXT, False),
            Column("at", TIMESTAMP, False), Column("version", BIGINT, False), Column("deleted", BOOLEAN, False),
            Column("body", TEXT, False),
        ], primary_key=["chat_id", "doc_id"], indexes=[["organization_id", "at"], ["owner_id"]], text_search="body"),
    ]

    def __init__(self, app: Any) -> None:
        self.app = app
        # chat id -> (organization, owner): facts of the chat's first event that never change, kept for the
        # documents of its later events (read back from the chat's title document when not in memory)
        self._scopes: dict[int, tuple[str, str]] = {}

    def stream_done(self, stream_id: Any) -> None:
        self._scopes.pop(stream_id.int, None)

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        if is_erasure(event):  # the chats' documents rewritten: an erased word is found no more
            return rederive(self, self.app, event, self.position)
        key = event.originator_id.int
        chat = uuid_str(event.originator_id)
        if event.__class__ is ev.ChatCreated:
            scope = (uuid_str(event.organization_id), uuid_str(event.owner_id))
        else:
            scope = self._scopes.get(key)  # type: ignore[assignment]
            if scope is None:
                title = rows.get(DOCS, (chat, "t"))
                if title is None:
                    raise ProjectionError(f"chat {event.originator_id}: no ChatCreated before version "
                                          f"{event.originator_version}")
                scope = (title["organization_id"], title["owner_id"])
        if len(self._scopes) >= MAX_SCOPES:
            self._scopes.clear()
        self._scopes[key] = scope
        return _docs(chat, scope, event, rows)


#: chats whose organization and owner are kept in memory (each a few hundred bytes)
MAX_SCOPES = 100_000


def _docs(chat: str, scope: tuple[str, str], event: Any, rows: Rows) -> list[RowOp]:
    """The row operations of one event on its chat's documents."""
    out: list[RowOp] = []
    org, owner = scope
    at, version = event.timestamp, event.originator_version

    def doc(doc_id: str, kind: str, body: str, tools: list[str] = (), message_id: int | None = None,  # type: ignore[assignment]
            role: str | None = None, author: Any = None) -> None:
        out.append(Upsert(DOCS, {
            "chat_id": chat, "doc_id": doc_id, "organization_id": org, "owner_id": owner, "kind": kind,
            "message_id": message_id, "role": role, "author": _id(author), "tools": tools_column(tools),
            "at": at, "version": version, "deleted": False, "body": body}, True))

    for m in getattr(event, "messages", None) or ():
        body, tools = parts_text(m.parts)
        doc(f"m{m.message_id}", "message", body, tools, m.message_id, m.role, m.created_by)
    cls = event.__class__
    if cls is ev.ChatCreated or cls is ev.TitleSet:
        doc("t", "title", event.title)
    elif cls is ev.PromptQueued:
        body, tools = parts_text(event.prompt.parts)
        doc(f"q{event.prompt.queued_message_id}", "queued", body, tools, author=event.prompt.created_by)
    elif cls is ev.QueuedPromptEdited:  # new words; the author is the prompt's
        before = rows.get(DOCS, (chat, f"q{event.queued_message_id}"))
        body, tools = parts_text(event.parts)
        doc(f"q{event.queued_message_id}", "queued", body, tools, author=before["author"] if before else None)
    elif cls is ev.QueuedPromptPromoted:
        out.append(Delete(DOCS, (chat, f"q{event.queued_message_id}")))
    elif cls is ev.QueuedPromptDeleted:
        out.append(_deleted(chat, f"q{event.queued_message_id}"))
    elif cls is ev.MessageEdited or cls is ev.ChatEnded:
        if cls is ev.MessageEdited:
            out.extend(_deleted(chat, f"m{i}") for i in event.deleted_message_ids)
        out.extend(_deleted(chat, f"q{i}") for i in event.deleted_queued_message_ids)
    error = getattr(event, "last_error", None)
    if error is not None:
        doc(f"e{version}", "error", f"{error.message}\n{error.kind or ''}".strip())
    return out


def _deleted(chat: str, doc_id: str) -> Update:
    return Update(DOCS, (chat, doc_id), {"deleted": True})


def search_projections(app: Any) -> list[Projection]:
    return [SearchView(app)]
