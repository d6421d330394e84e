"""The ASGI application: ``create_app(url)`` (``chat-ledger serve`` runs it under uvicorn).

Routes: the JSON API (``routes``), the event log and its stream (``stream``), the web pages (``ui``), and
``/openapi.json``, ``/healthz``, ``/readyz``, ``/metrics`` (no token needed for these four). Every error is
``{"error": {"code", "message"}}`` with the status of its code (``service.status_of``).
"""

from __future__ import annotations

import logging
import re
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Union

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.datastructures import State
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from commands.http import evidence, routes, stream, ui
from commands.http.limits import Limits, RateLimited
from commands.http.replica import REPLICA_WAIT
from commands.http.service import Checkpointing, Service, as_error, error_body, status_of
from commands.metrics import COUNTERS
from commands.metrics import render as render_metrics
from ledger.errors import LedgerError

log = logging.getLogger(__name__)

PUBLIC = ("/healthz", "/readyz", "/metrics", "/openapi.json")

#: sent with every response (pages, API, errors, streams): no script but the ledger's own files (the pages run
#: no inline script: ``/ui/static/live.js``), no framing, no referrer, no content sniffing
SECURITY_HEADERS = (
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                 b"img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                                 b"frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)


async def security_headers(message: Any, scope: Any) -> None:
    """``SECURITY_HEADERS`` on every HTTP response that does not set its own (a ``before_send`` hook of the app:
    it sees every response, the router's own 404 and 405 and the error handlers' included)."""
    if message["type"] == "http.response.start":
        present = {k.lower() for k, _ in message.get("headers", ())}
        message["headers"] = [*message.get("headers", ()), *((k, v) for k, v in SECURITY_HEADERS if k not in present)]


class Health(msgspec.Struct):
    status: str


class Ready(msgspec.Struct):
    """``ok`` when the database answers; each projection's position and lag."""

    status: str
    head: int
    projections: list[dict[str, Any]]


@get("/healthz", include_in_schema=True, summary="The process is up (no database access)")
async def healthz() -> Health:
    return Health("ok")


def _projection_status(svc: Service) -> list[dict[str, Any]]:
    from commands.views import all_projections
    from projections import status

    return [{"projection": s.projection, "position": s.position or 0, "lag": s.lag, "state": s.state}
            for s in status(svc.app, all_projections(svc.app), svc.ledger.backend)]


@get("/readyz", sync_to_thread=True, summary="The database is reachable; the views' positions and lag",
     responses=routes.ERRORS)
def readyz(state: State) -> Ready:
    """503 ``database_unavailable`` when the database does not answer, ``replication_unconfirmed`` when it
    cannot confirm a commit now (it waits for a synchronous standby that is not connected)."""
    svc = routes.service(state)
    head = svc.app.head()
    problem = getattr(svc.app.recorder, "commit_confirmation_problem", lambda: None)()
    if problem is not None:
        raise LedgerError("replication_unconfirmed", problem)
    return Ready("ok", head, _projection_status(svc))


@get("/metrics", sync_to_thread=True, media_type="text/plain; version=0.0.4",
     summary="Prometheus metrics of this process")
def metrics(state: State) -> str:
    svc = routes.service(state)
    gauges: list[tuple[str, dict[str, Any], float]] = []
    try:
        gauges.append(("chat_ledger_log_head", {}, svc.app.head()))
        for s in _projection_status(svc):
            gauges.append(("chat_ledger_projection_position", {"projection": s["projection"]}, s["position"]))
            gauges.append(("chat_ledger_projection_lag", {"projection": s["projection"]}, s["lag"]))
        if svc.replica is not None:
            for side, n in svc.replica.served.items():
                gauges.append(("chat_ledger_replica_reads_total", {"served_by": side}, n))
            events, seconds = svc.replica.lag()
            gauges.append(("chat_ledger_replica_lag_events", {}, events))
            gauges.append(("chat_ledger_replica_lag_seconds", {}, seconds))
    except Exception as e:  # the counters still answer when the database does not
        log.warning("metrics: %s", e)
    return render_metrics(gauges)


@get("/openapi.json", include_in_schema=False)
async def openapi_json(request: Request[Any, Any, Any]) -> Response[Any]:
    return Response(openapi_document(request.app), media_type="application/json")


#: OpenAPI links between operations (what a client, or a stateful fuzzer, may do next with an answer):
#: (method, path) of the source -> link name -> (target operationId, its parameters as runtime expressions)
_CHAT = {"chat_id": "$request.path.chat_id"}
LINKS: dict[tuple[str, str], dict[str, tuple[str, dict[str, str]]]] = {
    ("post", "/v1/commands"): {
        "CreatedChat": ("V1ChatsChatIdGetChat", {"chat_id": "$response.body#/result/chat_id"}),
        "CreatedChatTimeline": ("V1ChatsChatIdTimelineGetTimeline", {"chat_id": "$response.body#/result/chat_id"}),
    },
    ("get", "/v1/chats"): {
        "FirstChat": ("V1ChatsChatIdGetChat", {"chat_id": "$response.body#/items/0/chat_id"}),
        "NextPage": ("V1ChatsListChats", {"cursor": "$response.body#/next_cursor"}),
    },
    ("get", "/v1/search"): {
        "FirstHitChat": ("V1ChatsChatIdGetChat", {"chat_id": "$response.body#/hits/0/chat_id"}),
        "NextPage": ("V1SearchSearchChats", {"q": "$request.query.q", "cursor": "$response.body#/next_cursor"}),
    },
    ("get", "/v1/events"): {
        "NextPage": ("V1EventsGetEvents", {"after": "$response.body#/next_after"}),
        "FirstEventsChat": ("V1ChatsChatIdGetChat", {"chat_id": "$response.body#/events/0/stream_id"}),
    },
    ("get", "/v1/chats/{chat_id}"): {
        "Timeline": ("V1ChatsChatIdTimelineGetTimeline", _CHAT),
        "Unresolved": ("V1ChatsChatIdUnresolvedGetUnresolved", _CHAT),
        "Queue": ("V1ChatsChatIdQueueGetQueue", _CHAT),
        "NextAction": ("V1ChatsChatIdNextActionGetNextAction", _CHAT),
        "ExplainLatestTurn": ("V1ChatsChatIdExplainGetExplain", {**_CHAT, "turn": "latest"}),
        "Models": ("V1OrganizationsOrgIdModelsGetModels", {"org_id": "$response.body#/organization_id"}),
        "ChatEvents": ("V1EventsGetEvents", {"chat": "$request.path.chat_id"}),
    },
    ("get", "/v1/chats/{chat_id}/timeline"): {
        "AtFirstVersion": ("V1ChatsChatIdTimelineGetTimeline", {**_CHAT, "at": "$response.body#/0/version"}),
    },
}


def openapi_document(app: Litestar) -> dict[str, Any]:
    """Litestar's document, with the command union (msgspec's JSON Schema of every command Struct) as the
    body of ``POST /v1/commands``."""
    cached = app.state.get("openapi_document")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    from commands.base import HANDLERS

    doc = app.openapi_schema.to_schema()
    union = tuple(sorted(HANDLERS, key=lambda c: c.__name__))
    (schema,), components = msgspec.json.schema_components([Union[union]],  # noqa: UP007 - a runtime union
                                                             ref_template="#/components/schemas/{name}")
    doc.setdefault("components", {}).setdefault("schemas", {}).update(components)
    op = doc["paths"]["/v1/commands"]["post"]
    op["requestBody"] = {"required": True, "content": {
        "application/json": {"schema": schema},
        routes.JSONL: {"schema": {"type": "string", "description": "one JSON command per line"}}}}
    (line,), line_components = msgspec.json.schema_components([routes.CommandLine],
                                                              ref_template="#/components/schemas/{name}")
    doc["components"]["schemas"].update(line_components)
    op["responses"]["200"] = {
        "description": "The command's line (one command; a refused one has the status of its error code, "
                       "with the same line object), or one line object per command (JSON Lines)",
        "content": {"application/json": {"schema": line},
                    routes.JSONL: {"schema": {"type": "string", "description": "one line object per line"}}}}
    for p in doc["paths"].values():
        for o in p.values():
            if isinstance(o, dict) and o.get("operationId"):
                o.setdefault("security", [{"bearer": []}])
    for public in PUBLIC:
        for o in doc["paths"].get(public, {}).values():
            o["security"] = []
    for (method, path), links in LINKS.items():
        doc["paths"][path][method]["responses"]["200"]["links"] = {
            name: {"operationId": target, "parameters": params} for name, (target, params) in links.items()}
    app.state.openapi_document = doc
    return doc


def _ledger_error(request: Request[Any, Any, Any], e: LedgerError) -> Response[Any]:
    COUNTERS.add("chat_ledger_refusals_total", code=e.code)
    headers = {"Retry-After": str(e.retry_after)} if isinstance(e, RateLimited) else None
    return Response(error_body(e), status_code=status_of(e.code), headers=headers)


#: a path that names a chat or an organization by something that is not a UUID (a prefix, as the CLI takes)
_NOT_A_UUID = re.compile(r"^/(?:v1|ui)/(?:chats|organizations|orgs)/(?![0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}"
                         r"[0-9a-fA-F]{12}(?:/|$))([^/]+)")


def _http_error(request: Request[Any, Any, Any], e: HTTPException) -> Response[Any]:
    """Litestar's own errors (no route, bad parameters, body too large) as the ledger's codes: JSON under
    ``/v1/``, an HTML page under ``/ui/``. An id that is not a whole UUID (a prefix the CLI would take) is
    ``invalid_request``, not a missing route."""
    not_uuid = _NOT_A_UUID.match(request.url.path) if e.status_code == 404 else None
    if not_uuid is not None:
        e = ValidationException(detail=f"ids over HTTP are whole UUIDs (prefixes are for the CLI), not "
                                       f"{not_uuid.group(1)!r}")
    if request.url.path.startswith("/ui/") or request.url.path == "/ui":
        return ui.http_error_page(request, e)
    if isinstance(e, ValidationException):
        detail = "; ".join(f"{x.get('key', '')}: {x.get('message', '')}" for x in (e.extra or [])
                           if isinstance(x, dict)) or e.detail
        return _ledger_error(request, LedgerError("invalid_request", str(detail)))
    code = {404: "route_not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
        e.status_code, f"http_{e.status_code}")
    COUNTERS.add("chat_ledger_refusals_total", code=code)
    return Response(error_body(LedgerError(code, str(e.detail))), status_code=e.status_code)


def _other_error(request: Request[Any, Any, Any], e: Exception) -> Response[Any]:
    error = as_error(e, routes.service(request.app.state).where)
    log.error("%s %s: %s: %s", request.method, request.url.path, error.code, error.message)
    return Response(error_body(error), status_code=status_of(error.code))


#: the largest request body ``serve`` accepts unless ``--max-body-bytes`` says otherwise (``request_too_large``)
MAX_BODY_BYTES = 16 * 1024 * 1024


def create_app(url: str, *, follow: bool = True, poll_interval: float | None = None,
               limits: Limits | None = None, max_body_bytes: int = MAX_BODY_BYTES,
               replica_url: str | None = None, replica_wait: float = REPLICA_WAIT,
               checkpoints: Checkpointing | None = None, retention_every: float = 0.0) -> Litestar:
    """The service for the ledger at ``url`` (opened, and created if missing, when the app starts): per-token
    ``limits`` (``commands.http.limits``), bodies of at most ``max_body_bytes``; reads from the hot standby at
    ``replica_url`` when given (``commands.http.replica``); publishes signed checkpoints when ``checkpoints`` has a key
    (``commands.http.service.Checkpointing``)."""
    svc_box: dict[str, Service] = {}

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        svc = Service(url, follow=follow, poll_interval=poll_interval, limits=limits, replica_url=replica_url,
                      replica_wait=replica_wait, checkpoints=checkpoints, retention_every=retention_every)
        app.state.service = svc_box["svc"] = svc
        svc.start()
        try:
            yield
        finally:
            svc.close()

    return Litestar(
        route_handlers=[*routes.ROUTES, *stream.ROUTES, *evidence.ROUTES, ui.router, healthz, readyz, metrics, openapi_json],
        lifespan=[lifespan],
        before_send=[security_headers],
        exception_handlers={LedgerError: _ledger_error, HTTPException: _http_error, Exception: _other_error},
        openapi_config=OpenAPIConfig(
            title="chat-ledger", version="1", description="The ledger service (docs/server.md).",
            components=Components(security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}),
            # Only the JSON document under /schema: the interactive renderers load scripts from other hosts
            path="/schema", render_plugins=[JsonRenderPlugin()]),
        request_max_body_size=max_body_bytes,
        debug=False,
    )
