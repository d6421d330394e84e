"""The state of one API token and ``evolve`` (pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from ledger.access import events as ev


class SessionInfo(msgspec.Struct, kw_only=True):
    started_at: datetime
    expires_at: datetime
    idle_seconds: int
    ended_at: datetime | None = None


class TokenState(msgspec.Struct, kw_only=True):
    token_id: UUID
    hash: str
    user: UUID
    org: UUID | None
    role: str | None
    deployment_admin: bool
    issued_by: UUID | None
    issued_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    revoked_by: UUID | None = None
    replaced_by: UUID | None = None
    #: the last recorded use (``TokenUsed``), or None: never used
    last_used_at: datetime | None = None
    #: its web sessions, by the SHA-256 of their secret
    sessions: dict[str, SessionInfo] = msgspec.field(default_factory=dict)
    version: int = 0

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


def evolve(state: TokenState | None, event: Any) -> TokenState:
    if isinstance(event, ev.TokenIssued):
        state = TokenState(token_id=event.token_id, hash=event.hash, user=event.user, org=event.org,
                           role=event.role, deployment_admin=event.deployment_admin, issued_by=event.issued_by,
                           issued_at=event.at, expires_at=event.expires_at)
    elif isinstance(event, ev.TokenRevoked):
        assert state is not None
        state.revoked_at, state.revoked_by = event.at, event.revoked_by
    elif isinstance(event, ev.TokenRotated):
        assert state is not None
        state.expires_at, state.replaced_by = event.expires_at, event.replaced_by
    elif isinstance(event, ev.SessionStarted):
        assert state is not None
        state.sessions[event.session] = SessionInfo(started_at=event.at, expires_at=event.expires_at,
                                                     idle_seconds=event.idle_seconds)
    elif isinstance(event, ev.TokenUsed):
        assert state is not None
        state.last_used_at = event.at
    elif isinstance(event, ev.SessionEnded):
        assert state is not None
        if event.session in state.sessions:
            state.sessions[event.session].ended_at = event.at
    else:  # pragma: no cover - the stream holds token events only
        raise TypeError(f"not a token event: {type(event).__name__}")
    state.version = event.originator_version
    return state


def token_row(state: TokenState) -> dict[str, Any]:
    """What ``tokens list`` shows of a token (never the secret; the hash neither)."""
    return {"token_id": str(state.token_id), "user": str(state.user),
            "org": str(state.org) if state.org else None, "role": state.role,
            "deployment_admin": state.deployment_admin,
            "issued_by": str(state.issued_by) if state.issued_by else None,
            "issued_at": state.issued_at.isoformat(),
            "expires_at": state.expires_at.isoformat() if state.expires_at else None,
            "replaced_by": str(state.replaced_by) if state.replaced_by else None, "revoked": state.revoked,
            "revoked_at": state.revoked_at.isoformat() if state.revoked_at else None,
            "last_used_at": state.last_used_at.isoformat() if state.last_used_at else None}
