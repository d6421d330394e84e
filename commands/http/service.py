"""Per-process state of the ledger service, and how a request becomes a principal or an error response.

One ``Service`` per ``serve`` process: the open ledger (``commands.api.Ledger``: the same service layer as
the CLI), the token index, the streams' scopes, the log watcher that wakes the event streams, and a
projection follower keeping the views caught up (under the build lease: one follower per build at a time
across every process, so any number of processes serve one PostgreSQL ledger).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar
from uuid import UUID

import msgspec
from litestar.concurrency import sync_to_thread

from commands.access import REFUSALS, Principal, Scopes, refusal
from commands.api import Ledger
from commands.failures import as_ledger_error
from commands.groupcommit import GroupCommitter
from commands.http.limits import Limits
from commands.http.replica import REPLICA_WAIT, ReplicaReads
from commands.http.watch import LogWatcher
from commands.metrics import COUNTERS
from commands.tokens import USE_INTERVAL, TokenIndex, record_use
from commands.uow import utcnow
from ledger.access.state import TokenState
from ledger.errors import LedgerError

T = TypeVar("T")

log = logging.getLogger(__name__)

#: error codes that are not refusals of a command as such: their HTTP status (every other ``_not_found`` is
#: 404, every other code a refusal of what was asked, 409)
STATUS = {
    **{code: status for code, (status, _) in REFUSALS.items()},
    "invalid_command": 400, "invalid_request": 400, "version_not_found": 404,
    "projection_busy": 503, "database_unavailable": 503, "outcome_unknown": 503, "replication_unconfirmed": 503,
    "database_error": 500, "witness_unknown": 403,
    "internal_error": 500, "projection_error": 500, "undecodable_event": 500, "request_too_large": 413,
}


def status_of(code: str) -> int:
    return STATUS.get(code, 404 if code.endswith("_not_found") else 409)


class ErrorDetail(msgspec.Struct):
    code: str
    message: str


class ErrorBody(msgspec.Struct):
    """Every error response: ``{"error": {"code": ..., "message": ...}}`` (codes in docs/server.md)."""

    error: ErrorDetail


def error_body(e: LedgerError) -> ErrorBody:
    return ErrorBody(ErrorDetail(e.code, e.message))


class Checkpointing(msgspec.Struct, frozen=True):
    """``serve --checkpoint-key FILE --checkpoint-every SECONDS --witness-key FILE...``: the private key the
    service signs its checkpoints with (None: it publishes none), how often, and the public keys of the
    witnesses whose cosignatures it records."""

    key: Any = None
    every: float = 60.0
    witness_keys: tuple[Any, ...] = ()


class Service:
    def __init__(self, url: str, *, follow: bool = True, poll_interval: float | None = None,
                 limits: Limits | None = None, replica_url: str | None = None,
                 replica_wait: float = REPLICA_WAIT, checkpoints: Checkpointing | None = None,
                 retention_every: float = 0.0) -> None:
        from ledger.store import DatabaseURL

        self.url = url
        self.where = DatabaseURL.parse(url).where  # the database, for error messages (never the password)
        self.ledger = Ledger.open(url)
        self.app = self.ledger.app
        self.tokens = TokenIndex(self.app)
        self.scopes = Scopes(self.app)  # who may read what: always the primary's facts, never a standby's
        #: reads from a hot standby (``commands.http.replica``); None: every read is the primary's
        self.replica = (ReplicaReads(self.ledger, Ledger.open_replica(replica_url), replica_wait)
                        if replica_url else None)
        # the live stream tails the standby's log when there is one (woken by the primary's notifications)
        tailed = self.replica.replica.app if self.replica is not None else self.app
        self.watcher = LogWatcher(tailed, url, poll_interval, self.scopes)
        self.committer: GroupCommitter | None = None
        self.follow = follow
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.follower: Any = None
        #: web session (hash) -> when this server last saw it used (``time.monotonic``): a session idle on this
        #: server for its ``idle_seconds`` is ended here
        self._session_seen: dict[str, float] = {}
        self.limits = limits or Limits()
        #: tokens whose use is being recorded (``TokenUsed``), by one thread of its own: a request never waits
        #: for it, and a database that has gone costs the requests nothing more
        self._using: set[UUID] = set()
        self._using_lock = threading.Lock()
        self._recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="token-use")
        #: the service's own checkpoints and the witnesses it takes cosignatures from (``serve --checkpoint-key``)
        self.checkpoints = checkpoints or Checkpointing()
        #: seconds between retention runs (``serve --retention-every``; 0: none)
        self.retention_every = retention_every

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.watcher.start()
        self.committer = GroupCommitter(self.app)
        if self.follow:
            from commands.views import all_projections
            from projections import Follower

            self.follower = Follower(self.app, all_projections(self.app), self.ledger.backend, poll_interval=1.0)
            t = threading.Thread(target=self._follow, name="views-follower", daemon=True)
            t.start()
            self._threads.append(t)
        if self.checkpoints.key is not None:
            t = threading.Thread(target=self._checkpoint, name="checkpoints", daemon=True)
            t.start()
            self._threads.append(t)
        if self.retention_every > 0 and getattr(self.app.mapper, "sealer", None) is not None:
            t = threading.Thread(target=self._retention, name="retention", daemon=True)
            t.start()
            self._threads.append(t)

    def _retention(self) -> None:
        """``retention run`` now and every ``retention_every`` seconds (``commands.protection``): idempotent, so
        several servers of one ledger may run it; a failed run is tried again at the next period."""
        from commands.protection import run_retention

        while True:
            try:
                done = run_retention(self.app, self.ledger.backend)
                COUNTERS.add("chat_ledger_retention_expired_total", len(done["expired"]))
            except Exception as e:
                log.warning("retention run: %s", as_error(e, self.where).message)
            if self._stop.wait(self.retention_every):
                return

    def _checkpoint(self) -> None:
        """Publish a checkpoint now and every ``checkpoints.every`` seconds (``commands.evidence``): several
        servers of one ledger publish each size once, and an idle ledger nothing new."""
        from commands.evidence import publish_checkpoint

        while True:
            try:
                if publish_checkpoint(self.app, self.checkpoints.key) is not None:
                    COUNTERS.add("chat_ledger_checkpoints_published_total")
            except Exception as e:  # the next period tries again; readers keep the last one published
                log.warning("publishing a checkpoint: %s", as_error(e, self.where).message)
            if self._stop.wait(self.checkpoints.every):
                return

    def _follow(self) -> None:
        try:
            self.follower.run(self._stop)
        except Exception as e:  # every projection failed: reads catch up (and report) on their own
            log.error("views follower stopped: %s", e)

    def close(self) -> None:
        self._stop.set()
        if self.committer is not None:
            self.committer.close()  # what was submitted is run and answered first
        self.watcher.close()
        self._recorder.shutdown(wait=True)
        for t in self._threads:
            t.join(timeout=10)
        if self.replica is not None:
            self.replica.replica.close()
        self.ledger.close()

    # -- reads ---------------------------------------------------------------------------------------------------

    def read(self, p: Principal, views: tuple[str, ...], fn: Callable[[Ledger], T]) -> T:
        """``fn(ledger)`` with the views named caught up: on the primary, or on the standby when there is one
        and it has what the token wrote (``commands.http.replica``)."""
        if self.replica is None:
            return fn(self.ledger)
        return self.replica.read(p.token_id or p.user, views, fn)

    def wrote(self, p: Principal) -> None:
        """The token's command was recorded (its next reads must see it)."""
        if self.replica is not None:
            self.replica.wrote(p.token_id or p.user)

    # -- who asks ------------------------------------------------------------------------------------------------

    def principal(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer <secret>`` header (401 codes otherwise)."""
        return self._principal_of(self.tokens.find(_secret(authorization)))

    async def principal_async(self, authorization: str | None) -> Principal:
        """``principal``, for the event loop: from memory when the token index is fresh, else in a thread.
        The loop never waits for the database (one that has gone would stall every request, health checks
        and streams included, for each lookup's timeout in turn)."""
        secret = _secret(authorization)
        token = self.tokens.fresh(secret)
        if token is None:
            token = await sync_to_thread(self.tokens.find, secret)
        return self._principal_of(token)

    def _principal_of(self, token: Any) -> Principal:
        if token is None:
            raise refusal("invalid_token")
        code = self.tokens.refusal(token)
        if code is not None:
            raise refusal(code)
        self._note_use(token)
        return Principal.of(token)

    def _note_use(self, token: TokenState) -> None:
        """Record the token's use (``TokenUsed``) in the background when its last recorded use is older than
        ``USE_INTERVAL`` (the decision is taken again on the token's stream: several servers record it once)."""
        last = token.last_used_at
        if last is not None and (utcnow() - last).total_seconds() < USE_INTERVAL:
            return
        with self._using_lock:
            if token.token_id in self._using:
                return
            self._using.add(token.token_id)

        def record() -> None:
            try:
                record_use(self.app, token.token_id)
            except Exception as e:  # the request was served; its use is recorded by the next one
                log.warning("recording a use of token %s: %s", token.token_id, e)
            finally:
                with self._using_lock:
                    self._using.discard(token.token_id)

        try:
            self._recorder.submit(record)
        except RuntimeError:  # shutting down
            self._using.discard(token.token_id)

    def session_principal(self, secret: str | None) -> Principal:
        """The principal of a web session's secret (the cookie ``/ui/login`` sets): refused when there is no
        such session (``missing_token``, ``invalid_token``), when it ended or expired — absolutely, or idle on
        this server longer than its ``idle_seconds`` — or when its token no longer authenticates."""
        if not secret:
            raise refusal("missing_token")
        found = self.tokens.find_session(secret)
        if found is None:
            raise refusal("invalid_token")
        token, session = found
        code = self.tokens.session_refusal(token, session)
        now = time.monotonic()
        last = self._session_seen.get(session)
        if code is None and last is not None and now - last > token.sessions[session].idle_seconds:
            code = "session_expired"
        if code is not None:
            self._session_seen.pop(session, None)
            raise refusal(code)
        self._note_use(token)
        if len(self._session_seen) > 100_000:
            self._session_seen.clear()
        self._session_seen[session] = now
        return Principal.of(token)

    async def still_refused(self, p: Principal) -> str | None:
        """Why the token ``p`` was resolved from no longer authenticates (revoked, expired, its user removed
        from the organization), or None: what an open stream asks between its writes. Reads the log (in a
        thread) when the token index is older than ``REFRESH_SECONDS``."""
        if p.token_id is None:
            return None
        if self.tokens.stale:
            await sync_to_thread(self.tokens.refresh)
        state = self.tokens.by_id(p.token_id)
        return "invalid_token" if state is None else self.tokens.refusal(state)


def _secret(authorization: str | None) -> str:
    scheme, _, secret = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise refusal("missing_token")
    return secret.strip()


def as_error(e: BaseException, where: str = "the database") -> LedgerError:
    """What any failure of a request says (``commands.failures``), counted by code."""
    error = as_ledger_error(e, where)
    COUNTERS.add("chat_ledger_refusals_total", code=error.code)
    return error
