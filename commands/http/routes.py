"""The JSON API: commands, views, history (docs/server.md). Each handler asks the principal's permission
(``commands.access``), calls the service layer — the same functions the CLI calls — and returns what they
return; nothing here decides anything about a chat."""

from __future__ import annotations

import asyncio
import base64
from typing import Any
from uuid import UUID

import msgspec
from litestar import Request, Response, get, post
from litestar.concurrency import sync_to_thread
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter

from commands import access, views
from commands.access import Principal, Resource, check
from commands.groupcommit import Job
from commands.handler import apply_lines, as_line
from commands.search import SearchFilters, SearchPage, search
from commands.http.service import ErrorBody, Service, status_of
from commands.metrics import COUNTERS
from ledger.errors import LedgerError

#: documented error responses of every authenticated route
ERRORS = {status: ResponseSpec(ErrorBody, description=text, generate_examples=False) for status, text in (
    (400, "invalid request (invalid_command, invalid_request)"),
    (401, "missing_token, invalid_token, token_revoked, token_expired"),
    (403, "refused by the authorization rules (not_in_organization, not_chat_owner, admin_required, "
          "read_only_role, deployment_admin_required, actor_mismatch, not_organization_member)"),
    (404, "chat_not_found, stream_not_found, version_not_found, ..."),
    (409, "refused by the ledger's rules (the codes `apply` gives)"),
    (413, "request_too_large: the body is over serve --max-body-bytes"),
    (429, "rate_limited: over the token's write rate or open streams (Retry-After says when to try again)"),
    (503, "projection_busy, database_unavailable, outcome_unknown, replication_unconfirmed"),
)}

JSONL = "application/x-ndjson"
STATUSES = "^(waiting|running|interrupting|requires_action|error|paused)$"
MAX_PAGE = 500


def service(state: State) -> Service:
    return state.service  # type: ignore[no-any-return]


#: the cookie ``/ui/login`` sets: a web session's secret (HttpOnly, SameSite=Strict), never the token's. It is
#: accepted instead of the header on ``GET`` only (reads, such as the web page's ``EventSource``), so no other
#: site can make a browser write
COOKIE = "chat_ledger_session"


async def _principal(request: Request[Any, Any, Any]) -> Principal:
    header = request.headers.get("authorization")
    svc = service(request.app.state)
    if header is None and request.method == "GET" and request.cookies.get(COOKIE):
        return await sync_to_thread(svc.session_principal, request.cookies[COOKIE])
    return await svc.principal_async(header)


#: resolved on the event loop from memory (``Service.principal_async``: the index reads the log, in a
#: thread, only for an unknown secret or every 0.1 s), so most requests make one thread hop, not two
principal_dependency = {"principal": Provide(_principal)}


def bad_request(message: str) -> LedgerError:
    return LedgerError("invalid_request", message)


# -- commands --------------------------------------------------------------------------------------------------

class CommandLine(msgspec.Struct, omit_defaults=True):
    """One command's answer, as ``chat-ledger apply`` prints it: ``result`` when ok, else ``error``."""

    line: int
    ok: bool
    type: str | None
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None


def _counted(row: dict[str, Any]) -> dict[str, Any]:
    outcome = "ok" if row["ok"] else "refused"
    COUNTERS.add("chat_ledger_commands_total", type=row["type"] or "unknown", outcome=outcome)
    if not row["ok"]:
        COUNTERS.add("chat_ledger_refusals_total", code=row["error"]["code"])
    return row


def run_commands(svc: Service, p: Principal, lines: list[bytes]) -> list[dict[str, Any]]:
    """The lines of one request, in order, each in its own transaction (``apply``'s way)."""
    results: list[dict[str, Any]] = []
    apply_lines(svc.app, lines, out=lambda row: results.append(_counted(row)),
                prepare=lambda cmd: access.authorize(p, svc.scopes, cmd))
    return results


async def run_command(svc: Service, p: Principal, line: bytes) -> dict[str, Any]:
    """One command, by the process's writer thread with the other requests' commands pending then
    (``commands.groupcommit``): the same row ``apply`` gives for it."""
    job = Job(line, lambda cmd: access.authorize(p, svc.scopes, cmd))
    return _counted(await asyncio.wrap_future(svc.committer.submit(job)))


@post("/v1/commands", status_code=200, responses=ERRORS,
      summary="Run one command (application/json) or many (application/x-ndjson: one per line)",
      description="The same results and codes as `chat-ledger apply`. One command: its line object, with the "
                  "HTTP status of its error code when refused. JSON Lines: one line object per command, in order "
                  "(status 200). The token's user is each command's actor.")
async def post_commands(request: Request[Any, Any, Any]) -> Response[Any]:
    # the one hot route: its principal and body are taken here, not through dependency injection and the
    # signature model (a fifth of the route's cost under load); its OpenAPI body is set in ``openapi_document``
    principal = await _principal(request)
    body = await request.body()
    svc = service(request.app.state)
    media = (request.headers.get("content-type") or "application/json").split(";")[0].strip().lower()
    if media in (JSONL, "application/jsonl", "application/json-lines", "text/plain"):
        svc.limits.write(principal, sum(1 for line in body.split(b"\n") if line.strip()))
        results = await sync_to_thread(run_commands, svc, principal, body.split(b"\n"))
        if any(r["ok"] for r in results):
            svc.wrote(principal)
        payload = b"".join(msgspec.json.encode(r) + b"\n" for r in results)
        return Response(payload, media_type=JSONL, status_code=200)
    if media != "application/json":
        raise bad_request(f"unsupported content type {media!r}: application/json or {JSONL}")
    line = as_line(1, body.replace(b"\n", b" ").replace(b"\r", b" "))
    if not line.strip():
        raise LedgerError("invalid_command", "malformed JSON: no command in the body")
    svc.limits.write(principal)
    row = await run_command(svc, principal, line)
    if row["ok"]:
        svc.wrote(principal)
    return Response(msgspec.json.encode(row), media_type="application/json",
                    status_code=200 if row["ok"] else status_of(row["error"]["code"]))


# -- views -------------------------------------------------------------------------------------------------------

class ChatPage(msgspec.Struct):
    """A page of chat_status rows in chat id order; ``next_cursor`` fetches the next page (null: the last)."""

    items: list[dict[str, Any]]
    next_cursor: str | None


def encode_cursor(row: dict[str, Any]) -> str:
    """The opaque cursor after ``row``: its sort key (the chat id), base64url of JSON."""
    return base64.urlsafe_b64encode(msgspec.json.encode([row["chat_id"]])).decode().rstrip("=")


def decode_cursor(cursor: str) -> dict[str, Any]:
    """The keyset condition of a cursor (``invalid_request`` if it is not one this service made)."""
    try:
        (chat_id,) = msgspec.json.decode(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return {"chat_id": str(UUID(chat_id))}
    except (ValueError, TypeError, msgspec.DecodeError) as e:
        raise bad_request(f"cursor is not a next_cursor of this listing: {cursor!r}") from e


def _chat(svc: Service, p: Principal, chat_id: UUID) -> Resource:
    return svc.scopes.check_read(p, svc.scopes.chat(chat_id))


@get("/v1/chats", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="Chats of the token's organization (a member: their own), filtered, in pages")
def list_chats(principal: Principal, state: State, org: UUID | None = None,
               status: str | None = Parameter(default=None, pattern=STATUSES),
               limit: int = Parameter(default=50, ge=1, le=MAX_PAGE),
               cursor: str | None = Parameter(default=None, max_length=200,
                                              description="next_cursor of the previous page (opaque)"),
               shared: bool = Parameter(default=False, description="the organization's shared root chats "
                                        "(share_chat: readable by every member) instead"),
               ) -> ChatPage:
    """A keyset page: the rows after the cursor's chat id, ``limit`` + 1 read (the extra one says whether a
    next page exists), so a page costs the same wherever it is in the listing."""
    svc = service(state)
    where = access.chats_filter(principal, org, shared=shared)
    if status:
        where["status"] = status
    after = decode_cursor(cursor) if cursor is not None else None
    rows = svc.read(principal, ("chat_views",), lambda ledger: [
        views.json_row(r) for r in ledger.views_backend("chat_views").query(
            "chat_views", "chat_status", where=where, order_by=["chat_id"], limit=limit + 1, after=after)])
    page = rows[:limit]
    return ChatPage(page, encode_cursor(page[-1]) if len(rows) > limit else None)


@get("/v1/chats/{chat_id:uuid}", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="One chat's chat_status row")
def get_chat(chat_id: UUID, principal: Principal, state: State) -> dict[str, Any]:
    svc = service(state)
    _chat(svc, principal, chat_id)
    return svc.read(principal, ("chat_views",), lambda ledger: ledger.status(chat_id)[0])


@get("/v1/chats/{chat_id:uuid}/unresolved", sync_to_thread=True, dependencies=principal_dependency,
     responses=ERRORS, summary="Open tool calls of the chat's latest assistant message")
def get_unresolved(chat_id: UUID, principal: Principal, state: State) -> list[dict[str, Any]]:
    svc = service(state)
    _chat(svc, principal, chat_id)
    return svc.read(principal, ("chat_views",), lambda ledger: ledger.unresolved(chat_id))


@get("/v1/chats/{chat_id:uuid}/queue", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="The chat's queued prompts, head first")
def get_queue(chat_id: UUID, principal: Principal, state: State) -> list[dict[str, Any]]:
    svc = service(state)
    _chat(svc, principal, chat_id)
    return svc.read(principal, ("chat_views",), lambda ledger: ledger.queue(chat_id))


@get("/v1/organizations/{org_id:uuid}/models", sync_to_thread=True, dependencies=principal_dependency,
     responses=ERRORS, summary="The organization's models (with a user's overrides and effective models)")
def get_models(org_id: UUID, principal: Principal, state: State, user: UUID | None = None) -> dict[str, Any]:
    check(principal, "read", Resource("catalog", org_id, user))
    return service(state).read(principal, ("org_models",), lambda ledger: ledger.models(org_id, user))


# -- history -------------------------------------------------------------------------------------------------------

def _as_of(at: int | None, as_of: str | None) -> None:
    if at is not None and as_of is not None:
        raise bad_request("give at or as_of, not both")


AT = Parameter(default=None, ge=1, le=2**62, description="a chat version")
AS_OF = Parameter(default=None, description="a time (ISO 8601): the chat's last event at or before it")


@get("/v1/chats/{chat_id:uuid}/timeline", sync_to_thread=True, dependencies=principal_dependency,
     responses=ERRORS, summary="The chat's audit timeline: each event, a summary and the state after it")
def get_timeline(chat_id: UUID, principal: Principal, state: State, at: int | None = AT,
                 as_of: str | None = AS_OF) -> list[dict[str, Any]]:
    svc = service(state)
    _chat(svc, principal, chat_id)
    _as_of(at, as_of)
    return svc.read(principal, (), lambda ledger: ledger.history(chat_id, at, as_of))


@get("/v1/chats/{chat_id:uuid}/explain", sync_to_thread=True, dependencies=principal_dependency,
     responses=ERRORS, summary="Explain a tool call, a queued prompt or a turn from the recorded facts")
def get_explain(chat_id: UUID, principal: Principal, state: State, tool_call: str | None = None,
                queued_message: int | None = Parameter(default=None, ge=0, le=2**62), turn: str | None = None,
                at: int | None = AT, as_of: str | None = AS_OF) -> dict[str, Any]:
    from commands.explain import explain

    svc = service(state)
    _chat(svc, principal, chat_id)
    _as_of(at, as_of)
    return explain(svc.app, chat_id, tool_call=tool_call, queued_message=queued_message, turn=turn,
                   version=at, as_of=as_of)


@get("/v1/chats/{chat_id:uuid}/next-action", sync_to_thread=True, dependencies=principal_dependency,
     responses=ERRORS, summary="What a worker should do next for the chat (or should have done then), and why")
def get_next_action(chat_id: UUID, principal: Principal, state: State, at: int | None = AT,
                    as_of: str | None = AS_OF) -> dict[str, Any]:
    svc = service(state)
    _chat(svc, principal, chat_id)
    _as_of(at, as_of)
    return svc.ledger.next_action(chat_id, at, as_of)


@get("/v1/search", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="Search the chats the token may read: words, \"phrases\", -excluded; best first, in pages")
def search_chats(principal: Principal, state: State, q: str = Parameter(min_length=1, max_length=500),
                 org: UUID | None = None, owner: UUID | None = None, model: UUID | None = None,
                 tool: str | None = Parameter(default=None, max_length=200),
                 status: str | None = Parameter(default=None, pattern=STATUSES),
                 since: str | None = Parameter(default=None, max_length=64),
                 until: str | None = Parameter(default=None, max_length=64),
                 limit: int = Parameter(default=20, ge=1, le=200),
                 cursor: str | None = Parameter(default=None, max_length=200,
                                                description="next_cursor of the previous page (opaque)"),
                 ) -> SearchPage:
    """The same search as ``chat-ledger search``, scoped like every read: the token's organization, and a
    member's own chats only."""
    svc = service(state)
    scope = access.chats_filter(principal, org)
    filters = SearchFilters(str(org) if org else None, str(owner) if owner else None, str(model) if model else None,
                            tool, status, since, until)
    return svc.read(principal, ("chat_views", "search"), lambda ledger: search(
        ledger.views_backend("chat_views", "search"), q, filters, scope=scope, limit=limit, cursor=cursor))


ROUTES = [post_commands, list_chats, search_chats, get_chat, get_unresolved, get_queue, get_models, get_timeline, get_explain,
          get_next_action]
