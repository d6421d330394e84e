"""API tokens in the service layer: issue, revoke, list, and find the token a request's secret names.

A token is a stream of its own (``ledger.access``): ``TokenIssued`` records the SHA-256 of a random secret,
never the secret, which is returned once to whoever issued it, and when the token expires (``DEFAULT_TTL``
after it is issued unless asked otherwise, at most ``MAX_TTL``).

A token authenticates its user until it is revoked, until it expires, and — for a token of an organization —
until its user is removed from that organization (``MemberRemoved`` recorded after the token was issued, in
log order: a re-added member needs a new token). ``TokenIndex.refusal`` says which. ``TokenIndex`` answers "which token is this
secret?" from the log (the issued and revoked events, read by topic), per process: it reads only what was
recorded since its last look, at most every ``REFRESH_SECONDS`` for a known token and at once for an
unknown one, so a revocation recorded by any process takes effect within that time everywhere.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

from commands.uow import UnitOfWork, run, utcnow
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
#: how long a token lives unless ``expires_in`` says otherwise, and the longest it may
DEFAULT_TTL = timedelta(days=90)
MAX_TTL = timedelta(days=365)
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``3600s``, ``2w`` (``invalid_command`` otherwise)."""
    m = _DURATION.match(text)
    if m is None or int(m.group(1)) == 0:
        raise LedgerError("invalid_command", f"a duration is a positive number and a unit (s, m, h, d, w), "
                                             f"e.g. 90d or 12h, not {text!r}")
    return timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})


def _new_secret(expires_in: timedelta) -> str:
    """A new token secret, for a token that lives ``expires_in`` (``invalid_command`` past ``MAX_TTL``)."""
    if expires_in > MAX_TTL:
        raise LedgerError("invalid_command", f"a token lives at most {MAX_TTL.days} days")
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def _token(uow: UnitOfWork, token_id: UUID) -> ApiToken:
    """The token's aggregate (``token_not_found`` when there is none, or the stream is another kind's)."""
    agg = uow.get(token_id)
    if agg is None or not isinstance(agg, ApiToken):
        raise LedgerError("token_not_found", "token not found")
    return agg


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def issue_token(app: Any, *, user: UUID, org: UUID | None = None, role: str | None = None,
                deployment_admin: bool = False, issued_by: UUID | None = None,
                expires_in: timedelta = DEFAULT_TTL) -> dict[str, Any]:
    """Record a new token, expiring ``expires_in`` from now (at most ``MAX_TTL``); its row with ``secret``
    (shown this once: only its hash is recorded)."""
    secret = _new_secret(expires_in)
    token_id = uuid4()

    def work(uow: UnitOfWork) -> dict[str, Any]:
        em = Emitter(token_id, 0, uow.now, actor=issued_by)
        events = decide.issue(None, em, hash=secret_hash(secret), user=user, org=org, role=role,
                              deployment_admin=deployment_admin, issued_by=issued_by, at=uow.now,
                              expires_at=uow.now + expires_in)
        agg = uow.create(ApiToken, events)
        return {**token_row(agg.state), "secret": secret}

    return run(app, work)


def revoke_token(app: Any, token_id: UUID, revoked_by: UUID | None = None) -> dict[str, Any]:
    """Revoke a token (``token_not_found`` when there is none); revoking it again records nothing."""

    def work(uow: UnitOfWork) -> dict[str, Any]:
        agg = _token(uow, token_id)
        events = decide.revoke(agg.state, Emitter(token_id, agg.version, uow.now, actor=revoked_by),
                               revoked_by=revoked_by, at=uow.now)
        uow.record(agg, events)
        return token_row(agg.state)

    return run(app, work)


#: how long a rotated token keeps working beside its replacement, unless asked otherwise
DEFAULT_OVERLAP = timedelta(minutes=10)
#: a web session's absolute life, and how long it may go unused on a server (docs/server.md, "Web pages")
SESSION_LIFETIME = timedelta(hours=12)
SESSION_IDLE = timedelta(minutes=30)


def start_session(app: Any, token_id: UUID, *, lifetime: timedelta = SESSION_LIFETIME,
                  idle: timedelta = SESSION_IDLE) -> str:
    """Open a web session of the token (recorded on its stream as ``SessionStarted`` with the secret's hash);
    the session's secret, for the cookie (the token's secret never is one)."""
    secret = secrets.token_urlsafe(32)

    def work(uow: UnitOfWork) -> None:
        agg = _token(uow, token_id)
        uow.record(agg, decide.start_session(agg.state, Emitter(token_id, agg.version, uow.now, actor=agg.state.user),
                                             session=secret_hash(secret), expires_at=uow.now + lifetime,
                                             idle_seconds=int(idle.total_seconds()), at=uow.now))

    run(app, work)
    return secret


def end_session(app: Any, token_id: UUID, session: str) -> None:
    """End the session whose secret's hash is ``session`` (recorded ``SessionEnded``)."""

    def work(uow: UnitOfWork) -> None:
        agg = uow.get(token_id)
        if agg is not None and isinstance(agg, ApiToken):
            uow.record(agg, decide.end_session(agg.state, Emitter(token_id, agg.version, uow.now,
                                                                  actor=agg.state.user), session=session, at=uow.now))

    run(app, work)


def rotate_token(app: Any, token_id: UUID, *, overlap: timedelta = DEFAULT_OVERLAP,
                 expires_in: timedelta = DEFAULT_TTL, issued_by: UUID | None = None) -> dict[str, Any]:
    """Issue a new token for the same user, organization, role and deployment role, and let the old one work
    only ``overlap`` more (both recorded in one transaction). The new row, with its ``secret`` (shown once)
    and ``replaces``/``old_expires_at``."""
    secret = _new_secret(expires_in)
    new_id = uuid4()

    def work(uow: UnitOfWork) -> dict[str, Any]:
        old = _token(uow, token_id)
        s = old.state
        uow.record(old, decide.rotate(s, Emitter(token_id, old.version, uow.now, actor=issued_by),
                                      replaced_by=new_id, expires_at=uow.now + overlap, at=uow.now))
        events = decide.issue(None, Emitter(new_id, 0, uow.now, actor=issued_by), hash=secret_hash(secret),
                              user=s.user, org=s.org, role=s.role, deployment_admin=s.deployment_admin,
                              issued_by=issued_by, at=uow.now, expires_at=uow.now + expires_in)
        new = uow.create(ApiToken, events)
        return {**token_row(new.state), "secret": secret, "replaces": str(token_id),
                "old_expires_at": old.state.expires_at.isoformat()}

    return run(app, work)


#: seconds between two recorded uses of one token (``TokenUsed``): the precision of ``tokens list``'s last use
USE_INTERVAL = 60.0


def record_use(app: Any, token_id: UUID, *, interval: float = USE_INTERVAL) -> None:
    """Record that the token was used now (``TokenUsed``), unless a use was recorded within ``interval``."""

    def work(uow: UnitOfWork) -> None:
        agg = _token(uow, token_id)
        uow.record(agg, decide.use(agg.state, Emitter(token_id, agg.version, uow.now, actor=agg.state.user),
                                   at=uow.now, interval=interval))

    run(app, work)


def _token_events(app: Any, after: int, limit: int = 1000) -> list[Any]:
    """Token events and what ends a member's tokens (a catalog's start names its organization)."""
    from ledger.catalog import events as cev

    return app.recorder.select_notifications(start=after, limit=limit, inclusive_of_start=False,
                                             topics=[ev.TokenIssued.TOPIC, ev.TokenRevoked.TOPIC, ev.TokenRotated.TOPIC,
                                                     ev.SessionStarted.TOPIC, ev.SessionEnded.TOPIC, ev.TokenUsed.TOPIC,
                                                     cev.CatalogStarted.TOPIC, cev.MemberRemoved.TOPIC])


def list_tokens(app: Any) -> list[dict[str, Any]]:
    """Every token in the order issued (revoked ones too), without secrets or hashes."""
    index = TokenIndex(app)
    index.refresh()
    return [{**token_row(s), "ended": index.refusal(s)} for s in index.states()]


class TokenIndex:
    """secret hash -> token state, kept from the log (thread-safe; module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._by_hash: dict[str, TokenState] = {}
        self._by_id: dict[UUID, TokenState] = {}
        self._issued: dict[UUID, int] = {}  # token id -> the notification that issued it
        self._removed: dict[tuple[UUID, UUID], int] = {}  # (organization, user) -> their last removal's notification
        self._orgs: dict[UUID, UUID] = {}  # catalog stream id -> its organization
        self._sessions: dict[str, UUID] = {}  # a session secret's hash -> its token
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
                kind = type(event).__name__
                if kind == "CatalogStarted":
                    self._orgs[event.originator_id] = event.organization_id
                elif kind == "MemberRemoved":
                    org = self._orgs.get(event.originator_id, event.originator_id)
                    self._removed[(org, event.user_id)] = n.id
                else:
                    state = evolve(self._by_id.get(event.originator_id), event)
                    self._by_id[state.token_id] = self._by_hash[state.hash] = state
                    self._issued.setdefault(state.token_id, n.id)
                    if kind == "SessionStarted":
                        self._sessions[event.session] = state.token_id
                self._position = n.id
            if len(notes) < 1000:
                break

    def refusal(self, state: TokenState, now: Any = None) -> str | None:
        """Why ``state``'s token no longer authenticates (``token_revoked``, ``token_expired``,
        ``not_organization_member``), or None while it does."""
        if state.revoked:
            return "token_revoked"
        if state.expires_at is not None and (now or utcnow()) >= state.expires_at:
            return "token_expired"
        if state.org is not None and self._removed.get((state.org, state.user), -1) > self._issued.get(state.token_id, 0):
            return "not_organization_member"
        return None

    def find_session(self, secret: str) -> tuple[TokenState, str] | None:
        """The token and session hash of a session's ``secret`` (the log is read when it is not known or the
        last look is older than ``REFRESH_SECONDS``), or None."""
        h = secret_hash(secret)
        if h not in self._sessions or self.stale:
            self.refresh()
        token_id = self._sessions.get(h)
        return None if token_id is None else (self._by_id[token_id], h)

    def session_refusal(self, state: TokenState, session: str, now: Any = None) -> str | None:
        """Why a session no longer opens anything (``session_ended``: logged out; ``session_expired``: past its
        absolute end), or its token's refusal, or None."""
        info = state.sessions.get(session)
        if info is None or info.ended_at is not None:
            return "session_ended"
        if (now or utcnow()) >= info.expires_at:
            return "session_expired"
        return self.refusal(state, now)

    def by_id(self, token_id: UUID) -> TokenState | None:
        return self._by_id.get(token_id)

    @property
    def stale(self) -> bool:
        """The log was not looked at within ``REFRESH_SECONDS``."""
        return time.monotonic() - self._checked > REFRESH_SECONDS

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
        return None if state is None or self.stale else state
