"""Events of an API token's stream (id = the token id). Only the SHA-256 of the secret is recorded: the
secret itself is shown once, to whoever issued it, and is never stored."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from ledger.base import LedgerCreated, LedgerEvent

TOKEN_TOPIC = "chat-ledger:access.ApiToken"

Role = Literal["member", "admin", "auditor"]
ROLES: tuple[str, ...] = ("member", "admin", "auditor")


class TokenIssued(LedgerCreated):
    """A token was issued for ``user``: in organization ``org`` with ``role`` (both or neither), and/or as a
    deployment administrator. ``issued_by`` is the token user who issued it, None for the local
    administrator (the CLI, whoever holds the database). ``expires_at`` is a fact of the token: it ends then."""

    TOPIC = "chat-ledger:access.TokenIssued"
    token_id: UUID
    hash: str
    user: UUID
    org: UUID | None
    role: Role | None
    deployment_admin: bool
    issued_by: UUID | None
    at: datetime
    #: when it stops authenticating (None: a token issued before tokens aged; it does not expire)
    expires_at: datetime | None = None


class TokenRevoked(LedgerEvent):
    """The token no longer authenticates anyone (for good)."""

    TOPIC = "chat-ledger:access.TokenRevoked"
    token_id: UUID
    revoked_by: UUID | None
    at: datetime


class TokenRotated(LedgerEvent):
    """The token was replaced by ``replaced_by`` (a new secret for the same user, organization and role): it
    keeps working until ``expires_at``, the overlap its holders have to switch."""

    TOPIC = "chat-ledger:access.TokenRotated"
    token_id: UUID
    replaced_by: UUID
    expires_at: datetime
    at: datetime


class SessionStarted(LedgerEvent):
    """A web session was opened by signing in with the token (``/ui/login``): ``session`` is the SHA-256 of the
    session's secret (the cookie's value; never recorded), ``expires_at`` its absolute end, ``idle_seconds`` how
    long it may go unused on a server before that server ends it."""

    TOPIC = "chat-ledger:access.SessionStarted"
    token_id: UUID
    session: str
    expires_at: datetime
    idle_seconds: int
    at: datetime


class SessionEnded(LedgerEvent):
    """The session was ended (a logout): its cookie opens nothing from then on."""

    TOPIC = "chat-ledger:access.SessionEnded"
    token_id: UUID
    session: str
    at: datetime


class TokenUsed(LedgerEvent):
    """The token authenticated a request of the service at ``at``. Recorded at most once per ``interval``
    seconds per token (``decide.use``), so ``tokens list``'s last use is exact to within that interval; a use
    is a fact of the token, like its issue and its end."""

    TOPIC = "chat-ledger:access.TokenUsed"
    token_id: UUID
    at: datetime


# -- people's data in these events (issue 28, point 1: ``ledger.privacy``, docs/privacy.md): none — a token's
# stream names users by id and holds SHA-256 digests of secrets, never text a person wrote.
PERSONAL: dict[type, dict[str, str]] = {}
NOT_PERSONAL: dict[type, dict[str, str]] = {
    TokenIssued: {"hash": "the SHA-256 of the token's secret"},
    SessionStarted: {"session": "the SHA-256 of a web session's secret"},
    SessionEnded: {"session": "the SHA-256 of a web session's secret"},
}
