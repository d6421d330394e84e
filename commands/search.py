"""Search across chats (the service layer's side): a query of the search view, with filters, in pages.

The CLI (``chat-ledger search``), the API (``GET /v1/search``) and the page (``/ui/search``) call
``search``; who may see what is the caller's business (``scope``: the API gives the principal's filter,
``commands.access.chats_filter``; the CLI, the local administrator's tool, gives none).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from uuid import UUID

import msgspec

from ledger.chat.searchdocs import tool_filter
from ledger.errors import LedgerError
from projections.textquery import TextQueryError, parse, snippet, words

#: hits per page at most
MAX_LIMIT = 200
#: matches ranked at most: the newest this many that pass the filters (docs/search.md)
CANDIDATES = 500
STATUSES = ("waiting", "running", "interrupting", "requires_action", "error", "paused")


class SearchFilters(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a search is narrowed to (each None: not narrowed). Ids are full UUIDs; times ISO 8601."""

    org: str | None = None
    owner: str | None = None
    model: str | None = None
    tool: str | None = None
    status: str | None = None
    since: str | None = None
    until: str | None = None


class Hit(msgspec.Struct):
    """One matching document: where it is (chat, message or queued prompt, version), what it is, and the
    snippet around the first match (``snippet``: the text; ``highlights``: [start, end) offsets in it)."""

    chat_id: str
    doc_id: str
    kind: str  # message | queued | title | error
    message_id: int | None
    role: str | None
    author: str | None
    tools: list[str]
    at: str
    version: int
    deleted: bool
    snippet: str
    highlights: list[tuple[int, int]]
    chat: dict[str, Any]


class SearchPage(msgspec.Struct):
    """Hits, best first; ``next_cursor`` fetches the next page of the same search (null: the last).
    ``capped``: more than ``CANDIDATES`` documents match, and the hits are the newest of them, ranked."""

    query: str
    hits: list[Hit]
    next_cursor: str | None
    capped: bool = False


def _uuid(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    try:
        return str(UUID(value))
    except ValueError:
        raise LedgerError("invalid_command", f"{what} is not a UUID: {value!r}") from None


def _fingerprint(query: str, filters: SearchFilters, scope: dict[str, Any]) -> str:
    return hashlib.sha256(msgspec.json.encode([query, filters, sorted(scope.items())])).hexdigest()[:16]


def encode_cursor(offset: int, fingerprint: str) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([offset, fingerprint])).decode().rstrip("=")


def decode_cursor(cursor: str, fingerprint: str) -> int:
    """The offset a cursor of this same search stands for (``invalid_request`` otherwise: a cursor of
    another query or other filters would page through a different list)."""
    try:
        offset, fp = msgspec.json.decode(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(offset, int) or offset < 0 or fp != fingerprint:
            raise ValueError(cursor)
        return offset
    except (ValueError, TypeError, msgspec.DecodeError) as e:
        raise LedgerError("invalid_request", f"cursor is not a next_cursor of this search: {cursor!r}") from e


def search(backend: Any, query: str, filters: SearchFilters = SearchFilters(), *, scope: dict[str, Any] | None = None,
           limit: int = 20, cursor: str | None = None) -> SearchPage:
    """The hits of ``query`` in the search view (caught up by the caller with the chat views), best first. ``scope``: equality
    filters on the documents the caller may read (organization_id, owner_id), applied before anything else."""
    from ledger.audit.timeline import parse_time

    if not 1 <= limit <= MAX_LIMIT:
        raise LedgerError("invalid_command", f"limit must be 1 to {MAX_LIMIT}, not {limit}")
    try:
        terms = parse(query)
    except TextQueryError as e:
        raise LedgerError("invalid_command", f"search query {query!r}: {e}") from None
    if filters.status is not None and filters.status not in STATUSES:
        raise LedgerError("invalid_command", f"status must be one of {', '.join(STATUSES)}, not {filters.status!r}")
    where: dict[str, Any] = dict(scope or {})
    for column, value, what in (("organization_id", filters.org, "org"), ("owner_id", filters.owner, "owner")):
        value = _uuid(value, what)
        if value is not None:
            if column in where and where[column] != value:
                return SearchPage(query, [], None, False)  # outside what the caller may read: nothing
            where[column] = value
    chat_where: dict[str, Any] = {}
    if filters.model is not None:
        chat_where["model_config_id"] = _uuid(filters.model, "model")
    if filters.status is not None:
        chat_where["status"] = filters.status
    try:
        since = parse_time(filters.since) if filters.since else None
        until = parse_time(filters.until) if filters.until else None
    except (ValueError, LedgerError) as e:  # (a bad time is bad input of this search: 400, not a conflict)
        raise LedgerError("invalid_command", getattr(e, "message", str(e))) from None
    fingerprint = _fingerprint(query, filters, where)
    offset = decode_cursor(cursor, fingerprint) if cursor else 0
    contains = tool_filter(filters.tool) if filters.tool else None
    with backend.snapshot() as snap:
        docs, chats = snap.live("search"), snap.live("chat_views")
        if docs is None or chats is None:
            raise LedgerError("projection_error", "the search and chat views have no live build: catch them up first")
        rows = docs.text_search("search_docs", terms, where, join=(chats, "chat_status"), join_where=chat_where,
                                ranges={"at": (since, until)}, contains=contains, limit=limit + 1, offset=offset,
                                candidates=CANDIDATES, newest="at")
        capped = docs.capped
    highlight = words(terms)
    hits = [_hit(doc, chat, highlight) for doc, chat in rows[:limit]]
    more = len(rows) > limit
    return SearchPage(query, hits, encode_cursor(offset + limit, fingerprint) if more else None, capped)


def _hit(doc: dict[str, Any], chat: dict[str, Any] | None, highlight: list[str]) -> Hit:
    from ledger.chat.views import json_row

    text, marks, pos = [], [], 0
    for fragment in snippet(doc["body"], highlight):
        if fragment.hit:
            marks.append((pos, pos + len(fragment.text)))
        text.append(fragment.text)
        pos += len(fragment.text)
    d = json_row(doc)
    facts = json_row(chat) if chat is not None else {}
    return Hit(d["chat_id"], d["doc_id"], d["kind"], d["message_id"], d["role"], d["author"], d["tools"].split(),
               d["at"], d["version"], d["deleted"], "".join(text), marks,
               {k: facts.get(k) for k in ("title", "status", "owner_id", "organization_id", "model_config_id",
                                          "archived", "updated_at")})
