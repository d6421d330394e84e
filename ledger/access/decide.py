"""Deciding on a token: issue it, revoke it (pure: the caller gives the clock, the id and the hash)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from uuid import UUID

from ledger.access import events as ev
from ledger.access.state import TokenState
from ledger.base import Emitter
from ledger.errors import LedgerError

_SHA256 = re.compile(r"[0-9a-f]{64}")


def issue(state: TokenState | None, em: Emitter, *, hash: str, user: UUID, org: UUID | None, role: str | None,
          deployment_admin: bool, issued_by: UUID | None, at: datetime,
          expires_at: datetime | None = None) -> list[Any]:
    """A new token. An organization needs a role and a role an organization; a token grants something (an
    organization role or deployment administration); the hash is a SHA-256 hex digest; it expires after it
    is issued."""
    if state is not None:
        raise LedgerError("token_exists", f"token {state.token_id} already exists")
    if (org is None) != (role is None):
        raise LedgerError("invalid_command", "give --org and --role together")
    if role is not None and role not in ev.ROLES:
        raise LedgerError("invalid_command", f"role must be one of {', '.join(ev.ROLES)}, not {role!r}")
    if org is None and not deployment_admin:
        raise LedgerError("invalid_command", "a token grants an organization role (--org, --role) "
                                             "or deployment administration (--deployment-admin)")
    if expires_at is not None and expires_at <= at:
        raise LedgerError("invalid_command", "a token must expire after it is issued")
    if not _SHA256.fullmatch(hash):
        raise LedgerError("invalid_command", "a token hash is a lowercase SHA-256 hex digest")
    em.emit(ev.TokenIssued, originator_topic=ev.TOKEN_TOPIC, token_id=em.originator_id, hash=hash, user=user,
            org=org, role=role, deployment_admin=deployment_admin, issued_by=issued_by, at=at,
            expires_at=expires_at)
    return em.events


def revoke(state: TokenState | None, em: Emitter, *, revoked_by: UUID | None, at: datetime) -> list[Any]:
    """Revoke the token; revoking a revoked token records nothing (the first revocation stands)."""
    if state is None:
        raise LedgerError("token_not_found", "token not found")
    if state.revoked:
        return []
    em.emit(ev.TokenRevoked, token_id=state.token_id, revoked_by=revoked_by, at=at)
    return em.events


def rotate(state: TokenState | None, em: Emitter, *, replaced_by: UUID, expires_at: datetime, at: datetime) -> list[Any]:
    """Replace the token: it works until ``expires_at`` (the overlap; never later than it would have), then the
    new one alone. A revoked, expired or already replaced token is not rotated."""
    if state is None:
        raise LedgerError("token_not_found", "token not found")
    if state.revoked or state.replaced_by is not None or (state.expires_at is not None and state.expires_at <= at):
        why = "revoked" if state.revoked else "already replaced" if state.replaced_by else "expired"
        raise LedgerError("invalid_command", f"token {state.token_id} is {why}: issue a new one (tokens create)")
    if state.expires_at is not None:
        expires_at = min(expires_at, state.expires_at)
    em.emit(ev.TokenRotated, token_id=state.token_id, replaced_by=replaced_by, expires_at=expires_at, at=at)
    return em.events


def start_session(state: TokenState | None, em: Emitter, *, session: str, expires_at: datetime, idle_seconds: int,
                  at: datetime) -> list[Any]:
    """A web session of the token (which must authenticate now: the caller checked it), ending at ``expires_at``
    or, if earlier, with the token."""
    if state is None:
        raise LedgerError("token_not_found", "token not found")
    if not _SHA256.fullmatch(session):
        raise LedgerError("invalid_command", "a session is named by a lowercase SHA-256 hex digest")
    if state.expires_at is not None:
        expires_at = min(expires_at, state.expires_at)
    em.emit(ev.SessionStarted, token_id=state.token_id, session=session, expires_at=expires_at,
            idle_seconds=idle_seconds, at=at)
    return em.events


def end_session(state: TokenState | None, em: Emitter, *, session: str, at: datetime) -> list[Any]:
    """End a session; ending an unknown or ended one records nothing."""
    if state is None or session not in state.sessions or state.sessions[session].ended_at is not None:
        return []
    em.emit(ev.SessionEnded, token_id=state.token_id, session=session, at=at)
    return em.events


def use(state: TokenState | None, em: Emitter, *, at: datetime, interval: float) -> list[Any]:
    """Record a use of the token at ``at``, unless one was recorded less than ``interval`` seconds before (so
    a busy token costs one event per interval, and several servers recording the same use record it once)."""
    if state is None:
        raise LedgerError("token_not_found", "token not found")
    if state.last_used_at is not None and (at - state.last_used_at).total_seconds() < interval:
        return []
    em.emit(ev.TokenUsed, token_id=state.token_id, at=at)
    return em.events
