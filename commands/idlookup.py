"""Ids typed by people: a full id, or a unique prefix of one (git-style, ``ledger.ids``), resolved to the
full id from the ledger. Used by every entry point that takes a chat, conversation, stream, organization,
user, model config, turn or tool-call id.

A full UUID is taken as it is (no read). A prefix of at least ``ledger.ids.MIN_PREFIX`` hex digits is
looked up among the ids of its kind: one match names it; none is the kind's not-found error
(``chat_not_found``, ``conversation_not_found``, ``stream_not_found``, ``organization_not_found``,
``user_not_found``, ``model_config_not_found``, ``turn_not_found``, ``tool_call_not_found``); several are ``ambiguous_id``, listing them.
Anything else is ``invalid_command`` (``invalid chat id: 'x'``).
"""

from __future__ import annotations

from typing import Any, Iterable
from uuid import UUID

from ledger import ids
from ledger.errors import LedgerError

#: kind -> (what it is called in messages, its not-found code and message, the first event topics of its streams)
STREAM_KINDS: dict[str, tuple[str, str, str, tuple[str, ...] | None]] = {
    "chat": ("chat id", "chat_not_found", "no chat id starts with {prefix}", ("chat-ledger:chat.ChatCreated",)),
    "conversation": ("conversation id", "conversation_not_found", "conversation not found",
                     ("chat-ledger:conversation.ConversationStarted",)),
    "stream": ("stream id", "stream_not_found", "no events recorded for a stream with id prefix {prefix}", None),
}


def parse_full(value: str, what: str) -> UUID | None:
    """``value`` as a UUID when it is one whole; None when it may be a prefix; ``invalid_command`` else."""
    try:
        return UUID(value)
    except ValueError:
        if ids.looks_like_prefix(value):
            return None
        raise LedgerError("invalid_command", f"invalid {what}: {value!r}") from None


def stream_id(app: Any, value: str, kind: str = "chat") -> UUID:
    """A chat's, a conversation's or any stream's id from ``value`` (full or a unique prefix)."""
    what, code, message, topics = STREAM_KINDS[kind]
    full = parse_full(value, what)
    if full is not None:
        return full
    from ledger.positions import streams_with_prefix

    hex_prefix = value.replace("-", "").lower()
    found = [str(sid) for sid, topic in streams_with_prefix(app.recorder, hex_prefix, limit=ids.SHOWN_CANDIDATES + 1)
             if topics is None or topic in topics]
    return UUID(_one(value, found, what, code, message))


def among(value: str, candidates: Iterable[str], what: str, code: str, message: str) -> str:
    """``value`` itself when it is a candidate, else the one candidate it is a prefix of."""
    pool = set(candidates)
    if value in pool:
        return value
    return _one(value, ids.matching(value, pool), what, code, message)


def _one(value: str, found: list[str], what: str, code: str, message: str) -> str:
    if len(found) > 1:
        raise ids.ambiguous(value, found, what)
    if not found:
        raise LedgerError(code, message.format(prefix=value))
    return found[0]


def organization_id(app: Any, value: str) -> UUID:
    """An organization's id (full, or a prefix of an organization that has a catalog)."""
    full = parse_full(value, "organization id")
    if full is not None:
        return full
    from ledger.positions import streams_with_prefix

    topic = "chat-ledger:catalog.CatalogStarted"
    found = [str(sid) for sid, t in streams_with_prefix(app.recorder, value.replace("-", "").lower(),
                                                        limit=ids.SHOWN_CANDIDATES + 1) if t == topic]
    return UUID(_one(value, found, "organization id", "organization_not_found", "organization not found"))


def user_id(app: Any, value: str, org: UUID | None, also: Iterable[UUID] = ()) -> UUID:
    """A user's id: full, or a prefix of a member (or overriding user) of the organization ``org``, or of one
    of ``also`` (a chat's owner, who may have left the organization)."""
    full = parse_full(value, "user id")
    if full is not None:
        return full
    from commands.catalog import find_catalog

    catalog = find_catalog(app, org) if org is not None else None
    users = set(map(str, catalog.members)) | set(map(str, catalog.user_overrides)) if catalog else set()
    users |= set(map(str, also))
    return UUID(among(value, users, "user id", "user_not_found", "no member of the organization has that id"))


def model_config_id(app: Any, value: str, org: UUID) -> UUID:
    """A model config's id: full, or a prefix of a config of the organization ``org`` (deleted ones too)."""
    full = parse_full(value, "model config id")
    if full is not None:
        return full
    from commands.catalog import find_catalog

    catalog = find_catalog(app, org)
    configs = set(map(str, catalog.configs)) | set(map(str, catalog.deleted)) if catalog else set()
    return UUID(among(value, configs, "model config id", "model_config_not_found",
                      "model config not found"))


def turn_ids(events: Iterable[Any]) -> set[str]:
    """Every turn id a chat's events name."""
    out: set[str] = set()
    for e in events:
        if getattr(e, "turn_id", None):
            out.add(str(e.turn_id))
        for m in getattr(e, "messages", None) or ():
            if getattr(m, "turn_id", None):
                out.add(str(m.turn_id))
    return out


def tool_call_ids(events: Iterable[Any]) -> set[str]:
    """Every tool call's provider id and execution id in a chat's events."""
    from ledger.chat.values import ToolCallPart
    from ledger.chat.views import tool_call_execution_ids

    out: set[str] = set()
    for e in events:
        for m in getattr(e, "messages", None) or ():
            calls = [p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart)]
            if calls and m.role == "assistant":
                out.update(calls)
                out.update(str(x) for x in tool_call_execution_ids(e.originator_id, m.message_id, calls).values())
    return out
