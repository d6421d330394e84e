"""API tokens in the service layer: issue, revoke, list, and find the token a request's secret names.

A token is a stream of its own (``ledger.access``): ``TokenIssued`` records the SHA-256 of a random secret,
never the secret, which is returned once to whoever issued it. ``TokenIndex`` answers "which token is this
secret?" from the log (the issued and revoked events, read by topic), per process: it reads only what was
recorded since its last look, at most every ``REFRESH_SECONDS`` for a known token and at once for an
unknown one, so a revocation recorded by any process takes effect within that time everywhere.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from typing import Any
from uuid import UUID, uuid4

from commands.uow import UnitOfWork, run
from ledger.access import decide
from ledger.access import events as ev
from ledger.access.aggregate import ApiToken
from ledger.access.state import TokenState, evolve, token_row
from ledger.base import Emitter
from ledger.errors import LedgerError

#: how stale a known token's state may be (a revocation takes effect everywhere within this time)
REFRESH_SECONDS = 0.1
#: the prefix of every secret (so a leaked one is recognizable in logs and scanners)
SECRET_PREFIX = "clt_"


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def issue_token(app: Any, *, user: UUID, org: UUID | None = None, role: str | None = None,
                deployment_admin: bool = False, issued_by: UUID | None = None) -> dict[str, Any]:
    """Record a new token; its row with ``secret`` (shown this once: only its hash is recorded)."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    token_id = uuid4()

    def work(uow: UnitOfWork) -> dict[str, Any]:
        em = Emitter(token_id, 0, uow.now, actor=issued_by)
        events = decide.issue(None, em, hash=secret_hash(secret), user=user, org=org, role=role,
                              deployment_admin=deployment_admin, issued_by=issued_by, at=uow.now)
        agg = uow.create(ApiToken, events)
        return {**token_row(agg.state), "secret": secret}

    return run(app, work)


def revoke_token(app: Any, token_id: UUID, revoked_by: UUID | None = None) -> dict[str, Any]:
    """Revoke a token (``token_not_found`` when there is none); revoking it again records nothing."""

    def work(uow: UnitOfWork) -> dict[str, Any]:
        agg = uow.get(token_id)
        if agg is not None and not isinstance(agg, ApiToken):
            raise LedgerError("token_not_found", "token not found")
        state = agg.state if agg is not None else None
        events = decide.revoke(state, Emitter(token_id, agg.version if agg else 0, uow.now, actor=revoked_by),
                               revoked_by=revoked_by, at=uow.now)
        uow.record(agg, events)
        return token_row(agg.state)

    return run(app, work)


def _token_events(app: Any, after: int, limit: int = 1000) -> list[Any]:
    return app.recorder.select_notifications(start=after, limit=limit, inclusive_of_start=False,
                                             topics=[ev.TokenIssued.TOPIC, ev.TokenRevoked.TOPIC])


def list_tokens(app: Any) -> list[dict[str, Any]]:
    """Every token in the order issued (revoked ones too), without secrets or hashes."""
    index = TokenIndex(app)
    index.refresh()
    return [token_row(s) for s in index.states()]


class TokenIndex:
    """secret hash -> token state, kept from the log (thread-safe; module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._by_hash: dict[str, TokenState] = {}
        self._by_id: dict[UUID, TokenState] = {}
        self._position = 0
        self._checked = 0.0
        self._began = -1.0  # when the last look at the log began
        self._failure: Exception | None = None  # how it failed, or None
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Read what was recorded since the last look. Callers that asked while another was reading wait for
        it, and take the outcome of the next look, which began after they asked (it saw all they need); its
        failure too, so a database that has gone costs a burst of requests two waits (the look under way
        and the next), not one each in turn."""
        asked = time.monotonic()
        with self._lock:
            if self._began >= asked:
                if self._failure is not None:
                    raise self._failure
                return
            self._began = time.monotonic()
            try:
                self._read()
            except Exception as e:
                self._failure = e
                raise
            self._failure = None
            self._checked = self._began

    def _read(self) -> None:
        while True:
            notes = _token_events(self.app, self._position)
            for n in notes:
                event = self.app.mapper.to_domain_event(n)
                state = evolve(self._by_id.get(event.originator_id), event)
                self._by_id[state.token_id] = self._by_hash[state.hash] = state
                self._position = n.id
            if len(notes) < 1000:
                break

    def states(self) -> list[TokenState]:
        return sorted(self._by_id.values(), key=lambda s: (s.issued_at, str(s.token_id)))

    def find(self, secret: str) -> TokenState | None:
        """The token of ``secret`` (revoked ones too: the caller says why it is refused), or None."""
        state = self.fresh(secret)
        if state is None:
            self.refresh()
            state = self._by_hash.get(secret_hash(secret))
        return state

    def fresh(self, secret: str) -> TokenState | None:
        """The token of ``secret`` when it is known and the log was looked at within ``REFRESH_SECONDS``;
        else None (``find`` must read the log). Never waits for the database: an event loop may ask."""
        state = self._by_hash.get(secret_hash(secret))
        if state is None or time.monotonic() - self._checked > REFRESH_SECONDS:
            return None
        return state
