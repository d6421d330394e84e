"""The pure rules of data protection: a target's state from its events, and the decisions on it.

* A legal hold is set or cleared with a reason; setting a hold that is set (clearing one that is not) records
  nothing.
* A retention policy is an organization's: ``content_days`` at least 1, or None (content kept); the same
  policy again records nothing.
* An erasure or an expiry is refused (``legal_hold``) when any target it touches is held: the caller names
  them (``refuse_held``) before destroying any key. Once keys are destroyed it is recorded, with every key
  destroyed that no erasure of the stream recorded yet (a command that failed after destroying them, run
  again, records them then).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import msgspec

from ledger.base import DeciderAggregate, Emitter, remember_idempotency_key
from ledger.errors import LedgerError
from ledger.protection import events as ev


class ProtectionState(msgspec.Struct):
    target: UUID
    kind: str
    held: bool = False
    hold_reason: str | None = None
    content_days: int | None = None
    #: every key an erasure or expiry of this stream recorded
    erased: set[ev.KeyId] = msgspec.field(default_factory=set)
    erasures: int = 0
    version: int = 0
    idempotency: dict[str, list[int]] = msgspec.field(default_factory=dict)


def evolve(state: ProtectionState | None, event: Any) -> ProtectionState:
    if isinstance(event, ev.ProtectionStarted):
        state = ProtectionState(event.target, event.kind)
    assert state is not None
    if isinstance(event, ev.LegalHoldSet):
        state.held, state.hold_reason = True, event.reason
    elif isinstance(event, ev.LegalHoldCleared):
        state.held, state.hold_reason = False, None
    elif isinstance(event, ev.RetentionPolicySet):
        state.content_days = event.content_days
    elif isinstance(event, ev.ContentErased):
        state.erased |= set(event.keys)
        state.erasures += 1
    state.version = event.originator_version
    remember_idempotency_key(state.idempotency, event)
    return state


def _started(state: ProtectionState | None, em: Emitter, target: UUID, kind: str) -> None:
    if state is None:
        em.emit(ev.ProtectionStarted, originator_topic=ev.PROTECTION_TOPIC, target=target, kind=kind)
    elif state.kind != kind:
        raise LedgerError("invalid_command", f"{target} is a {state.kind}, not a {kind}")


def set_hold(state: ProtectionState | None, em: Emitter, *, target: UUID, kind: str, hold: bool,
             reason: str) -> list[Any]:
    if (state.held if state is not None else False) == hold:
        return []
    _started(state, em, target, kind)
    em.emit(ev.LegalHoldSet if hold else ev.LegalHoldCleared, reason=reason)
    return em.events


def set_retention(state: ProtectionState | None, em: Emitter, *, organization_id: UUID,
                  content_days: int | None) -> list[Any]:
    if content_days is not None and content_days < 1:
        raise LedgerError("invalid_command", "content_days must be at least 1 (or null: content is kept)")
    if state is not None and state.content_days == content_days:
        return []
    _started(state, em, organization_id, "organization")
    em.emit(ev.RetentionPolicySet, content_days=content_days)
    return em.events


def refuse_held(held: list[tuple[str, UUID, str | None]]) -> None:
    """``legal_hold`` naming the held targets (kind, id, reason), when there are any."""
    if held:
        named = "; ".join(f"{kind} {target} ({reason})" for kind, target, reason in held)
        raise LedgerError("legal_hold", f"on legal hold: {named}; nothing was erased")


def unrecorded(state: ProtectionState | None, keys: list[ev.KeyId]) -> list[ev.KeyId]:
    """The keys no erasure of this stream recorded yet."""
    done = state.erased if state is not None else set()
    return sorted(k for k in keys if k not in done)


def erase_subject(state: ProtectionState | None, em: Emitter, *, user_id: UUID, reason: str,
                  organization_id: UUID | None, keys: list[ev.KeyId], streams: list[UUID],
                  at: datetime) -> list[Any]:
    """Record the erasure of a user's content (always: a request with no key left to destroy is recorded too —
    the record that it was asked and done)."""
    _started(state, em, user_id, "user")
    em.emit(ev.SubjectErased, reason=reason, organization_id=organization_id, keys=keys, streams=streams, at=at)
    return em.events


def expire_content(state: ProtectionState | None, em: Emitter, *, chat_id: UUID, organization_id: UUID,
                   content_days: int, last_activity: datetime, keys: list[ev.KeyId], at: datetime) -> list[Any]:
    """Record the expiry of a chat's content under its organization's policy (nothing when no key was destroyed:
    a run again finds nothing to do)."""
    if not keys:
        return []
    _started(state, em, chat_id, "chat")
    em.emit(ev.ContentExpired, organization_id=organization_id, content_days=content_days,
            last_activity=last_activity, keys=keys, streams=[chat_id], at=at)
    return em.events


class Protection(DeciderAggregate):
    """A target's protection stream; ``state`` is a ``ProtectionState``."""

    TOPIC: ClassVar[str] = ev.PROTECTION_TOPIC
    CACHED: ClassVar[bool] = True
    state: ProtectionState
    evolve = staticmethod(evolve)
