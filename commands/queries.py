"""Read-side queries that work by replay of a stream (the views' queries are in ``commands.views``)."""

from __future__ import annotations

from typing import Any, Iterator
from uuid import UUID

import msgspec

from ledger.audit.timeline import iso, parse_time, version_as_of
from ledger.chat import events as ev
from ledger.chat.aggregate import Chat
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
        raise LedgerError("chat_not_found", "chat not found")
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
        raise LedgerError("chat_not_found", "chat not found")
    return events


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


def chat_version_as_of(app: Any, chat_id: UUID, at_version: int | None, as_of: str) -> int:
    """The chat's stream version at TIME (``show CHAT --as-of TIME``)."""
    version = cut_version(chat_events(app, chat_id), at_version, as_of)
    assert version is not None
    return version


def resolve_chat_model(app: Any, chat_id: UUID, context: str, user_id: UUID | None = None) -> dict[str, Any]:
    """The model a chat's generation would run on now for ``context``, and why. Records nothing."""
    from commands.catalog import find_catalog, find_deployment, owners_of
    from commands.uow import UnitOfWork
    from ledger.catalog.resolve import ChatModelFacts, resolve_model

    chat = load_chat(app, chat_id).state
    uow = UnitOfWork(app)
    catalog = find_catalog(uow, chat.organization_id)
    ids = [chat.model_config_id]
    if catalog is not None:
        ids += [o.model_config_id for o in catalog.admin_overrides.values()]
    resolved = resolve_model(
        context,  # type: ignore[arg-type]
        ChatModelFacts(organization_id=chat.organization_id, owner_id=chat.owner_id,
                       model_config_id=chat.model_config_id),
        catalog, find_deployment(uow), user_id, owners_of(uow, catalog, ids))
    row = {"chat_id": str(chat.chat_id), **msgspec.to_builtins(resolved)}
    row.setdefault("reason", None)
    row.setdefault("requested_model_config_id", None)
    row.setdefault("reasoning_effort", None)
    return row
