"""Read-side queries that work by replay of a stream (the views' queries are in ``commands.views``)."""

from __future__ import annotations

from typing import Any, Iterator
from uuid import UUID

import msgspec

from ledger.audit.timeline import iso, parse_time, version_as_of
from ledger.base import fast_project
from ledger.chat import events as ev
from ledger.chat.aggregate import Chat
from ledger.chat.state import ChatState
from ledger.errors import LedgerError


def chat_ids(app: Any) -> Iterator[UUID]:
    """Every chat in creation order (scans only ChatCreated notifications)."""
    start = 0
    while True:
        notes = app.recorder.select_notifications(start=start, limit=1000, topics=[ev.ChatCreated.TOPIC],
                                                  inclusive_of_start=False)
        if not notes:
            return
        for n in notes:
            yield n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id))
        start = notes[-1].id


def load_chat(app: Any, chat_id: UUID, version: int | None = None) -> Chat:
    agg = app.load(chat_id, version=version)
    if not isinstance(agg, Chat):
        raise LedgerError("chat_not_found", f"chat {chat_id} not found")
    return agg


def stream_events(app: Any, stream_id: UUID) -> list[Any]:
    """Every event of a stream (``stream_not_found`` when it has none)."""
    events = app.stream(stream_id)
    if not events:
        raise LedgerError("stream_not_found", f"no events recorded for {stream_id}")
    return events


def chat_events(app: Any, chat_id: UUID) -> list[Any]:
    """Every event of a chat's stream (``chat_not_found`` when the stream is not a chat)."""
    events = app.stream(chat_id)
    if not events or not isinstance(events[0], ev.ChatCreated):
        raise LedgerError("chat_not_found", f"chat {chat_id} not found")
    return events


def chain_status(app: Any, stream_id: UUID, version: int | None = None) -> dict[str, Any]:
    """The stream's hash chain status up to ``version`` (None: its head), as the audit shows it."""
    from commands.asof import chat_position
    from ledger.chain import stream_status

    return stream_status(app, stream_id, chat_position(app, stream_id, version) if version is not None else None)


def audit_timeline(app: Any, stream_id: UUID, events: list[Any], upto: int | None) -> dict[str, Any]:
    """The audit of a stream up to ``upto``: its timeline (``ledger.audit.timeline``) with its hash chain's
    status (``chain``), as the audit text, the static page and the web page show it."""
    from ledger.audit.timeline import timeline

    data = timeline(events, upto)
    data["chain"] = chain_status(app, stream_id, upto)
    return data


def cut_version(events: list[Any], at_version: int | None, as_of: str | None) -> int | None:
    """The version a stream version (``at_version``) or a time (``as_of``) selects (None: the latest)."""
    if as_of is not None:
        at = parse_time(as_of)
        version = version_as_of(events, at)
        if version is None:
            raise LedgerError("stream_not_found", f"{events[0].originator_id} had no events at {iso(at)} "
                                                  f"(its first is at {iso(events[0].timestamp)})")
        return version
    if at_version is not None and not 1 <= at_version <= events[-1].originator_version:
        raise LedgerError("version_not_found", f"version {at_version} is not in 1..{events[-1].originator_version}")
    return at_version


def chat_at(app: Any, chat_id: Any, version: int | None = None,
            as_of: str | None = None) -> tuple[ChatState, list[Any]]:
    """The chat as of ``version`` or the time ``as_of`` (default now) and its events up to it.
    A version outside the stream is ``version_not_found``; a time before it ``stream_not_found``."""
    if as_of is None and version is None:
        events = app.stream(chat_id)
    else:
        events = chat_events(app, chat_id)
        version = cut_version(events, version, as_of)
        events = events[:version]
    chat = fast_project(None, events) if events else None
    if not isinstance(chat, Chat):
        raise LedgerError("chat_not_found", f"chat {chat_id} not found")
    return chat.state, events


def resolve_chat_model(app: Any, chat_id: UUID, context: str, user_id: UUID | None = None, *,
                       version: int | None = None, as_of: str | None = None,
                       with_current_settings: bool = False) -> dict[str, Any]:
    """The model a chat's generation would run on for ``context``, and why: now, or (``version`` /
    ``as_of``) for the chat as it was then with the catalog and the deployment as of the same log position.
    ``with_current_settings`` adds what today's catalog gives for that chat state, and the differences.
    Records nothing."""
    from commands.asof import AsOf, chat_position
    from ledger.audit.redecide import differences

    state, _ = chat_at(app, chat_id, version, as_of)
    reader = AsOf(app)
    past = version is not None or as_of is not None
    position = chat_position(app, chat_id, state.version) if past else None
    row = {"chat_id": str(state.chat_id), **_resolve(reader.at(position), state, context, user_id),
           "facts_as_of": {"chat_version": state.version, "notification_id": position}}
    if with_current_settings:
        now = _resolve(reader.at(None), state, context, user_id)
        row["current_settings"] = now
        row["differences"] = differences({k: row.get(k) for k in now}, now, ("as_of", "current"))
    return row


def shown_chat(app: Any, chat_id: UUID, version: int | None = None, as_of: str | None = None) -> dict[str, Any]:
    """``show``'s answer: the chat (as of ``version``/``as_of``) with the facts of other streams as of the same
    log position — the model its generation resolves to (``model``) and each unresolved call's execution
    (``execution``: status and claim epoch, or unclaimed)."""
    from commands.asof import AsOf, chat_position
    from ledger.chat.views import show
    from ledger.toolcalls.aggregate import ToolCallExecution

    state, events = chat_at(app, chat_id, version, as_of)
    past = version is not None or as_of is not None
    position = chat_position(app, chat_id, state.version) if past else None
    facts = AsOf(app).at(position)
    data = show(state, events)
    data["facts_as_of"] = {"chat_version": state.version, "notification_id": position}
    data["model"] = _resolve(facts, state, "root", None, soft=True)
    for row in data["unresolved"]:
        agg = facts.load(UUID(row["execution_id"])) if row.get("execution_id") else None
        row["execution"] = ({"status": agg.state.status, "claim_epoch": agg.state.claim_epoch}
                            if isinstance(agg, ToolCallExecution) else
                            {"status": "unclaimed", "claim_epoch": 0} if row.get("execution_id") else None)
    return data


def _resolve(facts: Any, chat: Any, context: str, user_id: UUID | None, soft: bool = False) -> dict[str, Any]:
    from commands.catalog import find_catalog, find_deployment, owners_of
    from ledger.catalog.resolve import ChatModelFacts, resolve_model

    catalog = find_catalog(facts, chat.organization_id)
    ids = [chat.model_config_id]
    if catalog is not None:
        ids += [o.model_config_id for o in catalog.admin_overrides.values()]
    try:
        resolved = resolve_model(
            context,  # type: ignore[arg-type]
            ChatModelFacts(organization_id=chat.organization_id, owner_id=chat.owner_id,
                           model_config_id=chat.model_config_id),
            catalog, find_deployment(facts), user_id, owners_of(facts, catalog, ids))
    except LedgerError as e:
        if facts.position is None and not soft:
            raise
        return {"context": context, "error": {"code": e.code, "message": e.message}}  # (a past state may resolve nothing)
    row = msgspec.to_builtins(resolved)
    row.setdefault("reason", None)
    row.setdefault("requested_model_config_id", None)
    row.setdefault("reasoning_effort", None)
    config = catalog.configs.get(resolved.model_config_id) if catalog is not None else None
    row["provider"], row["model"] = (config.provider, config.model) if config is not None else (None, None)
    return row
