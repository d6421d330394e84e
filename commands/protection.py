"""People's data: erasure, legal holds and retention (issue 28; docs/privacy.md, docs/commands.md).

Commands (``apply``, the HTTP API, the CLI's ``erase``, ``hold`` and ``retention``):

* ``erase_subject {user_id, reason, organization_id?}`` destroys the user's data keys — every chat's and
  conversation's, or only the chats of ``organization_id`` — and records ``SubjectErased`` (who asked, when, why,
  which keys, which chats) on the user's protection stream. Refused with ``legal_hold`` (nothing destroyed) when
  the user, a chat whose content would go, or its organization is held; ``not_sealed`` on a ledger that stores
  people's data unsealed (no master key: there are no keys to destroy). Result ``{user_id, organization_id,
  version, recorded, keys_destroyed, streams}``.
* ``set_legal_hold {target, hold, reason}``: a chat, an organization (known by its catalog) or else a user.
  Result ``{target, kind, held, version, recorded}``.
* ``set_retention_policy {organization_id, content_days}`` (null: kept). Result ``{organization_id,
  content_days, version, recorded}``.
* ``run_retention(app, backend)`` (``retention run``, and ``serve --retention-every``): every chat of an
  organization with a policy whose last activity is older than its ``content_days`` and whose content can still
  be read has its keys destroyed and ``ContentExpired`` recorded; held chats (the chat, its owner or its
  organization) are skipped and listed. Idempotent: a chat erased has no live key left.

Keys are destroyed before the erasure is recorded, so every view that sees the event rewrites its rows from
events that already read ``[erased]``; a command that fails between the two, run again, records the keys it
destroyed then (``ledger.protection.decide.unrecorded``). After either, this process forgets the keys and
decrypted aggregates it kept, and the views are caught up (the erased chats' rows rewritten: ``projections
.erasure``), then scrubbed (SQLite: the full-text index merged and the write-ahead log truncated, so the words
are in neither file).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Callable
from uuid import UUID

import msgspec

from commands.base import Command, emitter, first_result, handles, is_repeat
from commands.uow import UnitOfWork, run, utcnow
from ledger.base import Emitter
from ledger.errors import LedgerError
from ledger.protection import decide as pd
from ledger.protection.decide import Protection, ProtectionState
from ledger.protection.events import ContentErased, KeyId, protection_id
from ledger.sealer import first_fields, stored_id
from ledger.streams import locate

Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
Days = Annotated[int, msgspec.Meta(ge=1, le=365_000)]


class EraseSubject(Command, tag="erase_subject", kw_only=True):
    user_id: UUID
    reason: Reason
    organization_id: UUID | None = None


class SetLegalHold(Command, tag="set_legal_hold", kw_only=True):
    target: UUID
    hold: bool
    reason: Reason


class SetRetentionPolicy(Command, tag="set_retention_policy", kw_only=True):
    organization_id: UUID
    content_days: Days | None


# -- reading the facts ---------------------------------------------------------------------------------------

def _protection(uow: UnitOfWork, target: UUID) -> tuple[UUID, Any]:
    return locate(uow.app, Protection, protection_id(target), uow.get_cached)


def target_kind(app: Any, target: UUID) -> str:
    """What a hold's target is: a chat (a chat stream there), an organization (its catalog), else a user."""
    from ledger.chat.events import ChatCreated

    first = first_fields(app.recorder, target)
    if first is not None and first[0] == ChatCreated.TOPIC:
        return "chat"
    return "organization" if is_organization(app, target) else "user"


def is_organization(app: Any, target: UUID) -> bool:
    """Whether ``target`` is an organization: its catalog has a stream."""
    from ledger.catalog.aggregate import OrganizationCatalog

    return locate(app, OrganizationCatalog, target, lambda i: app.load_cached(i, copy=False))[1] is not None


def chat_organization(app: Any, chat_id: UUID) -> UUID | None:
    """The organization of a chat (None: the stream is not a chat — a conversation)."""
    from ledger.chat.events import ChatCreated

    first = first_fields(app.recorder, chat_id)
    return stored_id(first[1]["organization_id"]) if first is not None and first[0] == ChatCreated.TOPIC else None


def held(uow: UnitOfWork, targets: dict[UUID, str]) -> list[tuple[str, UUID, str | None]]:
    """The targets (id -> kind) on legal hold, with their reasons."""
    out = []
    for target, kind in targets.items():
        agg = _protection(uow, target)[1]
        if agg is not None and agg.state.held:
            out.append((kind, target, agg.state.hold_reason))
    return out


def _sealer(app: Any) -> Any:
    sealer = getattr(app.mapper, "sealer", None)
    if sealer is None:
        raise LedgerError("not_sealed", "this ledger stores people's data unsealed (it was opened without a master "
                                        "key): there are no keys to destroy. Seal it first: `chat-ledger events "
                                        "encrypt-existing` (docs/privacy.md)")
    return sealer


def _keyid(k: Any) -> KeyId:
    return KeyId(k.subject, k.number, k.scope)


def _save(uow: UnitOfWork, agg: Any, events: list[Any]) -> Any:
    if not events:
        return agg
    if agg is None:
        return uow.create(Protection, events)
    uow.record(agg, events)
    return agg


# -- erasure -------------------------------------------------------------------------------------------------

def _erasure_result(user: UUID, org: UUID | None) -> Callable[[ProtectionState | None, list[Any]], dict[str, Any]]:
    def result(state: ProtectionState | None, events: list[Any]) -> dict[str, Any]:
        erased = [e for e in events if isinstance(e, ContentErased)]
        return {"user_id": str(user), "organization_id": None if org is None else str(org),
                "version": state.version if state is not None else 0, "recorded": len(events),
                "keys_destroyed": sum(len(e.keys) for e in erased),
                "streams": [str(s) for e in erased for s in e.streams]}
    return result


@handles(EraseSubject)
def erase_subject(app: Any, cmd: EraseSubject) -> dict[str, Any]:
    ring = _sealer(app).keys
    result = _erasure_result(cmd.user_id, cmd.organization_id)

    orgs: dict[UUID, UUID | None] = {}  # chat -> its organization (None: a conversation), read once

    def org_of(scope: UUID) -> UUID | None:
        if scope not in orgs:
            orgs[scope] = chat_organization(app, scope)
        return orgs[scope]

    def within(keys: list[Any]) -> list[Any]:
        if cmd.organization_id is None:
            return keys
        return [k for k in keys if k.scope is not None and org_of(k.scope) == cmd.organization_id]

    def work(uow: UnitOfWork) -> dict[str, Any]:
        stream_id, agg = _protection(uow, cmd.user_id)
        if is_repeat(agg, cmd):
            return first_result(app, agg, cmd, result)
        state = agg.state if agg is not None else None
        live = within(ring.keys_of(cmd.user_id))
        pending = pd.unrecorded(state, [_keyid(k) for k in within(ring.keys_of(cmd.user_id, live=False))])
        streams = sorted({k.scope for k in [*live, *pending] if k.scope is not None})
        targets: dict[UUID, str] = {cmd.user_id: "user"}
        for stream in streams:
            org = org_of(stream)
            if org is not None:
                targets[stream], targets[org] = "chat", "organization"
        if cmd.organization_id is not None:
            targets[cmd.organization_id] = "organization"
        pd.refuse_held(held(uow, targets))
        keys = sorted({*map(_keyid, ring.destroy(live)), *pending})
        em = emitter(cmd, stream_id, agg.version if agg is not None else 0, uow.now)
        events = pd.erase_subject(state, em, user_id=cmd.user_id, reason=cmd.reason,
                                  organization_id=cmd.organization_id, keys=keys, streams=streams, at=uow.now)
        agg = _save(uow, agg, events)
        return result(agg.state, events)

    out = run(app, work)
    rewrite_views(app)
    return out


# -- legal hold and retention policy -----------------------------------------------------------------------------

def _on_target(app: Any, cmd: Command, target: UUID, decide: Callable[[ProtectionState | None, Emitter], list[Any]],
               result: Callable[[ProtectionState | None, list[Any]], dict[str, Any]]) -> dict[str, Any]:
    """Record what ``decide(state, em)`` returns on the target's protection stream (a repeat: the first result)."""
    def work(uow: UnitOfWork) -> dict[str, Any]:
        stream_id, agg = _protection(uow, target)
        if is_repeat(agg, cmd):
            return first_result(app, agg, cmd, result)
        events = decide(agg.state if agg is not None else None,
                        emitter(cmd, stream_id, agg.version if agg is not None else 0, uow.now))
        agg = _save(uow, agg, events)
        return result(agg.state if agg is not None else None, events)

    return run(app, work)


@handles(SetLegalHold)
def set_legal_hold(app: Any, cmd: SetLegalHold) -> dict[str, Any]:
    kind = target_kind(app, cmd.target)

    def result(state: ProtectionState | None, events: list[Any]) -> dict[str, Any]:
        return {"target": str(cmd.target), "kind": kind, "held": bool(state is not None and state.held),
                "version": state.version if state is not None else 0, "recorded": len(events)}

    return _on_target(app, cmd, cmd.target, lambda state, em: pd.set_hold(
        state, em, target=cmd.target, kind=kind, hold=cmd.hold, reason=cmd.reason), result)


def retention_policy(app: Any, organization_id: UUID) -> int | None:
    agg = locate(app, Protection, protection_id(organization_id), lambda i: app.load_cached(i, copy=False))[1]
    return agg.state.content_days if agg is not None else None


@handles(SetRetentionPolicy)
def set_retention_policy(app: Any, cmd: SetRetentionPolicy) -> dict[str, Any]:
    def result(state: ProtectionState | None, events: list[Any]) -> dict[str, Any]:
        return {"organization_id": str(cmd.organization_id),
                "content_days": state.content_days if state is not None else None,
                "version": state.version if state is not None else 0, "recorded": len(events)}

    return _on_target(app, cmd, cmd.organization_id, lambda state, em: pd.set_retention(
        state, em, organization_id=cmd.organization_id, content_days=cmd.content_days), result)


def run_retention(app: Any, backend: Any, now: datetime | None = None) -> dict[str, Any]:
    """Erase the content of every chat past its organization's retention (module docstring); what it did:
    ``{expired: [{chat_id, organization_id, last_activity, keys}], held: [{chat_id, organization_id, targets}],
    organizations}``."""
    from commands import views

    ring = _sealer(app).keys
    now = now or utcnow()
    views.catch_up_views(app, backend, ("chat_views",))
    live = ring.live_scopes()
    rows = [r for r in backend.query("chat_views", "chat_status") if UUID(str(r["chat_id"])) in live]
    orgs = sorted({str(r["organization_id"]) for r in rows})
    expired: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for org_text in orgs:
        org = UUID(org_text)
        days = retention_policy(app, org)
        if days is None:
            continue
        cutoff = now - timedelta(days=days)
        for row in rows:
            if row["organization_id"] != org_text or row["updated_at"] >= cutoff:
                continue
            chat, owner = UUID(str(row["chat_id"])), UUID(str(row["owner_id"]))
            done = _expire(app, ring, chat, org, owner, days, row["updated_at"])
            (expired if "keys" in done else skipped).append(done)
    if expired:
        rewrite_views(app, backend)
    return {"expired": expired, "held": skipped, "organizations": len(orgs), "at": now.isoformat()}


def _expire(app: Any, ring: Any, chat: UUID, org: UUID, owner: UUID, days: int, last: datetime) -> dict[str, Any]:
    def work(uow: UnitOfWork) -> dict[str, Any]:
        on_hold = held(uow, {chat: "chat", owner: "user", org: "organization"})
        if on_hold:
            return {"chat_id": str(chat), "organization_id": str(org),
                    "targets": [{"kind": k, "target": str(t)} for k, t, _ in on_hold]}
        stream_id, agg = _protection(uow, chat)
        state = agg.state if agg is not None else None
        keys = sorted({*map(_keyid, ring.destroy(ring.keys_in([chat]))),
                       *pd.unrecorded(state, [_keyid(k) for k in ring.keys_in([chat], live=False)])})
        em = Emitter(stream_id, agg.version if agg is not None else 0, uow.now)
        events = pd.expire_content(state, em, chat_id=chat, organization_id=org, content_days=days,
                                   last_activity=last, keys=keys, at=uow.now)
        _save(uow, agg, events)
        return {"chat_id": str(chat), "organization_id": str(org), "last_activity": last.isoformat(),
                "keys": len(keys)}

    return run(app, work)


# -- after an erasure: no decrypted content left in this process or the views --------------------------------

def rewrite_views(app: Any, backend: Any = None) -> None:
    """Forget this process's kept keys and aggregates, catch every view up (the erased streams' rows rewritten)
    and scrub the views' database files (``SqlBackend.scrub``); ``backend``: the views' (default: opened here from
    the ledger's database, and closed; an in-memory ledger has none)."""
    from commands import views
    from projections import open_backend

    app.refresh_keys()
    own = backend is None
    if own:
        if getattr(app, "database_url", None) is None:
            return
        backend = open_backend(app.database_url)
    try:
        views.catch_up_views(app, backend)
        backend.scrub()
    finally:
        if own:
            backend.close()
