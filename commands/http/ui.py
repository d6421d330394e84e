"""The web audit pages at ``/ui/`` (docs/server.md): server-side rendered from the audit page's templates
(``ledger.audit.render``; the chat page is the static ``audit --html`` page's data and template, with this
module's ``link`` and ``explain``), read with the same principal and the same ``commands.access`` checks
as the JSON API's reads.

A browser sends no ``Authorization`` header on navigation, so ``/ui/login`` takes the token's secret in a
form and sets it as an HttpOnly, SameSite=Strict cookie; every page (and the API's ``GET`` routes, for the
page's live ``EventSource``) accepts that cookie. Without one a page redirects to the login form; a page of
another organization is a 403 page with the refusal's code.
"""

from __future__ import annotations

import functools
from hmac import compare_digest
from pathlib import Path
from secrets import token_urlsafe
from typing import Any
from urllib.parse import quote, urlencode
from uuid import UUID

from litestar import Request, Response, Router, get, post
from litestar.concurrency import sync_to_thread
from litestar.datastructures import State
from litestar.di import Provide
from litestar.enums import MediaType, RequestEncodingType
from litestar.exceptions import HTTPException
from litestar.params import Body, Parameter, QueryParameter
from litestar.response import Redirect

from commands import access, views
from commands.access import Principal, Resource, check
from commands.http.routes import COOKIE, STATUSES, service
from commands.http.service import status_of
from commands.tokens import end_session, start_session
from commands.metrics import COUNTERS
from ledger.audit.render import ON_PAGE, anchor, render, render_page
from ledger.errors import LedgerError

#: rows a chat list shows at most
LIST_LIMIT = 200
EXPLAIN = ("tool_call", "queued_message", "turn")


def ui_link(kind: str, ident: Any) -> str:
    """``link`` of the templates on the service: anchors on the page, another chat's page."""
    if kind in ON_PAGE:
        return "#" + anchor(kind, ident)
    return f"/ui/chats/{ident}"


async def _cookie_principal(request: Request[Any, Any, Any]) -> Principal:
    return await sync_to_thread(service(request.app.state).session_principal, request.cookies.get(COOKIE))


#: as the API's (``routes.principal_dependency``): from memory on the event loop, the log in a thread
dependencies = {"principal": Provide(_cookie_principal)}


@get("/static/live.js", include_in_schema=False, cache=False)
async def live_js() -> Response[bytes]:
    """The pages' one script (``static/live.js``): a file the ledger serves, so no page runs inline script."""
    return Response(_LIVE_JS, media_type="text/javascript; charset=utf-8", headers={"Cache-Control": "no-cache"})


_LIVE_JS = (Path(__file__).parent / "static" / "live.js").read_bytes()


def html(text: str, status: int = 200) -> Response[str]:
    return Response(text, media_type=MediaType.HTML, status_code=status,
                    headers={"Cache-Control": "no-store"})  # (the security headers: ``app.security_headers``)


def page(template: str, p: Principal | None, http_status: int = 200, **context: Any) -> Response[str]:
    return html(render(template, me=p, short=lambda v: "-" if v is None else str(v)[:8], **context), http_status)


# -- errors ----------------------------------------------------------------------------------------------------

def _login_redirect(request: Request[Any, Any, Any], code: str | None = None) -> Response[Any]:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    query = {"next": target, **({"error": code} if code and code != "missing_token" else {})}
    return Redirect(f"/ui/login?{urlencode(query)}", status_code=303)


def ledger_error_page(request: Request[Any, Any, Any], e: LedgerError) -> Response[Any]:
    COUNTERS.add("chat_ledger_refusals_total", code=e.code)
    status = status_of(e.code)
    if status == 401:
        return _login_redirect(request, e.code)
    return page("ui_error.html", None, status, status=status, code=e.code, message=e.message)


def http_error_page(request: Request[Any, Any, Any], e: HTTPException) -> Response[Any]:
    code = {404: "route_not_found", 405: "method_not_allowed", 400: "invalid_request", 413: "request_too_large"}.get(
        e.status_code, f"http_{e.status_code}")
    return ledger_error_page(request, LedgerError(code, str(e.detail)))


# -- login -------------------------------------------------------------------------------------------------------

def _safe_next(target: str | None) -> str:
    """Where to go after logging in: a page of /ui/ only (never another site)."""
    return target if target and target.startswith("/ui/") and not target.startswith("/ui//") else "/ui/"


#: the login form's double-submit token: a random value set as this cookie by the form's page and sent back
#: in the form's hidden ``csrf_token`` field; a POST whose field does not match its cookie is refused. Another
#: site can make a browser post the form (a login CSRF: signing the victim in with the attacker's token), but
#: it cannot read or set this site's cookie, so it cannot send the matching field.
CSRF_COOKIE = "chat_ledger_csrf"
CSRF_PATH = "/ui/login"


def _csrf_value(request: Request[Any, Any, Any]) -> str:
    known = request.cookies.get(CSRF_COOKIE, "")
    return known if len(known) == 43 and known.replace("-", "").replace("_", "").isalnum() else token_urlsafe(32)


def _login_page(request: Request[Any, Any, Any], http_status: int = 200, **context: Any) -> Response[str]:
    csrf = _csrf_value(request)
    response = page("ui_login.html", None, http_status, csrf=csrf, **context)
    response.set_cookie(CSRF_COOKIE, csrf, path=CSRF_PATH, httponly=True, samesite="strict",
                        secure=_secure(request))
    return response


@get("/login", include_in_schema=False)
async def login_form(request: Request[Any, Any, Any], next: str | None = None,
                     error: str | None = None) -> Response[str]:
    message = access.REFUSALS[error][1] if error in access.REFUSALS else None
    return _login_page(request, next=_safe_next(next), error=error, message=message)


FORM = Body(media_type=RequestEncodingType.URL_ENCODED)


@post("/login", include_in_schema=False, sync_to_thread=True)
def login(request: Request[Any, Any, Any], data: dict[str, str] = FORM) -> Response[Any]:
    secret = (data.get("token") or "").strip()
    target = _safe_next(data.get("next"))
    sent, expected = data.get("csrf_token") or "", request.cookies.get(CSRF_COOKIE) or ""
    if not expected or not compare_digest(sent.encode(), expected.encode()):
        COUNTERS.add("chat_ledger_refusals_total", code="csrf_token_mismatch")
        return _login_page(request, 403, next=target, error="csrf_token_mismatch",
                           message="the form was not sent from this site's login page: open it and sign in again")
    svc = service(request.app.state)
    try:
        p = svc.principal(f"Bearer {secret}" if secret else None)
    except LedgerError as e:
        COUNTERS.add("chat_ledger_refusals_total", code=e.code)
        return _login_page(request, 401, next=target, error=e.code, message=e.message)
    assert p.token_id is not None
    session = start_session(svc.app, p.token_id)  # a session of its own: the token's secret is never the cookie
    response: Response[Any] = Redirect(target, status_code=303)
    response.set_cookie(COOKIE, session, path="/", httponly=True, samesite="strict", secure=_secure(request))
    return response


def _secure(request: Request[Any, Any, Any]) -> bool:
    """Cookies are ``Secure`` when the page was served over TLS, or a proxy in front says it was
    (``X-Forwarded-Proto: https``)."""
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "").lower() == "https"


def _same_origin(request: Request[Any, Any, Any]) -> bool:
    """A form posted from this site's own pages: the browser says so (``Sec-Fetch-Site: same-origin``, or an
    ``Origin`` naming this host). Another site can make a browser post, but not with these headers."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    return origin is not None and origin.split("://", 1)[-1] == request.headers.get("host", "")


@post("/logout", include_in_schema=False, sync_to_thread=True)
def logout(request: Request[Any, Any, Any]) -> Response[Any]:
    """End the web session (recorded ``SessionEnded``: its cookie opens nothing anywhere from then on), for a
    form posted from this site only (``csrf_origin_mismatch`` otherwise, nothing ended)."""
    if not _same_origin(request):
        COUNTERS.add("chat_ledger_refusals_total", code="csrf_origin_mismatch")
        return page("ui_error.html", None, 403, status=403, code="csrf_origin_mismatch",
                    message="the logout was not sent from this site's pages: nothing was ended")
    svc = service(request.app.state)
    secret = request.cookies.get(COOKIE)
    found = svc.tokens.find_session(secret) if secret else None
    if found is not None:
        end_session(svc.app, found[0].token_id, found[1])
        svc.tokens.refresh()  # ended here at once (other servers: within the index's 0.1 s)
    response: Response[Any] = Redirect("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


# -- pages -------------------------------------------------------------------------------------------------------

@get("/", include_in_schema=False, sync_to_thread=True, dependencies=dependencies)
def home(principal: Principal) -> Response[Any]:
    if principal.org is None:
        raise access.refusal("not_in_organization")
    return Redirect(f"/ui/orgs/{principal.org}/chats", status_code=303)


@get("/orgs/{org:uuid}/chats", include_in_schema=False, sync_to_thread=True, dependencies=dependencies)
def chats(org: UUID, principal: Principal, state: State,
          status: str | None = Parameter(default=None, pattern=STATUSES + "|^$"),
          q: str | None = None, owner: str | None = Parameter(default=None, max_length=64),
          model: str | None = Parameter(default=None, max_length=64),
          tool: str | None = Parameter(default=None, max_length=200),
          since: str | None = Parameter(default=None, max_length=64),
          until: str | None = Parameter(default=None, max_length=64),
          has: str | None = Parameter(default=None, pattern="^(error|unresolved)?$"),
          cursor: str | None = Parameter(default=None, max_length=300)) -> Response[str]:
    """The organization's chats (a member's own), newest activity first, filtered (``commands.chatlist``), in
    pages; with ``q``, only those the search finds."""
    from commands.chatlist import ChatListFilters, chat_list

    svc = service(state)
    where = access.chats_filter(principal, org)
    head = svc.app.head()
    form = {"status": status or "", "q": q or "", "owner": owner or "", "model": model or "", "tool": tool or "",
            "since": since or "", "until": until or "", "has": has or ""}
    try:
        filters = ChatListFilters(status=status or None, owner=UUID(owner) if owner else None,
                                  model=UUID(model) if model else None, tool=tool or None,
                                  since=_when(since), until=_until(until), has=has or None)  # type: ignore[arg-type]
    except ValueError as e:
        raise LedgerError("invalid_request", f"a filter is not valid: {e}") from None
    backend = views.catch_up_views(svc.app, svc.ledger.backend, ("chat_views", "search"))
    listed = chat_list(backend, where, filters, LIST_LIMIT, cursor)
    rows = listed.rows
    if q and q.strip():  # the search view: titles, messages, tool calls and results, queued prompts, errors
        from commands.search import MAX_LIMIT, search

        scope = {k: v for k, v in where.items() if k in ("organization_id", "owner_id")}
        found = {h.chat_id for h in search(backend, q, scope=scope, limit=MAX_LIMIT).hits}
        rows = [r for r in rows if r["chat_id"] in found]
    more = None if listed.next_cursor is None else (
        f"/ui/orgs/{org}/chats?" + urlencode({**{k: v for k, v in form.items() if v}, "cursor": listed.next_cursor}))
    return page("ui_chats.html", principal, org=str(org), rows=rows, form=form, more=more, matched=listed.matched,
                statuses=STATUSES.strip("^$()").split("|"), limit=LIST_LIMIT,
                live={"stream": f"/v1/events/stream?org={org}&after={head}", "types": _live_types(chat_only=True)})


def _when(text: str | None) -> Any:
    """A time filter: ISO 8601, UTC unless it says; a date alone is the whole day (``since`` its start, ``until``
    its end)."""
    from ledger.audit.timeline import parse_time

    try:
        return parse_time(text) if text else None
    except LedgerError as e:
        raise ValueError(e.message) from None  # (the filters' invalid_request)


def _until(text: str | None) -> Any:
    from datetime import timedelta

    at = _when(text)
    return at if at is None or "T" in (text or "") else at + timedelta(days=1) - timedelta(microseconds=1)


@get("/search", include_in_schema=False, sync_to_thread=True, dependencies=dependencies)
def search_page(principal: Principal, state: State, q: str | None = Parameter(default=None, max_length=500),
                tool: str | None = Parameter(default=None, max_length=200),
                status: str | None = Parameter(default=None, pattern=STATUSES + "|^$"),
                since: str | None = Parameter(default=None, max_length=64),
                until: str | None = Parameter(default=None, max_length=64),
                cursor: str | None = Parameter(default=None, max_length=200)) -> Response[str]:
    """Ranked hits of the search view with their snippets (the API's ``/v1/search``, as a page)."""
    from commands.search import SearchFilters, search

    form = {"q": q or "", "tool": tool or "", "status": status or "", "since": since or "", "until": until or ""}
    result = None
    if q and q.strip():
        svc = service(state)
        scope = access.chats_filter(principal, None)
        backend = views.catch_up_views(svc.app, svc.ledger.backend, ("chat_views", "search"))
        result = search(backend, q, SearchFilters(tool=tool or None, status=status or None, since=since or None,
                                                  until=until or None), scope=scope, limit=50, cursor=cursor)
    more = None
    if result is not None and result.next_cursor:
        more = "/ui/search?" + urlencode({**{k: v for k, v in form.items() if v}, "cursor": result.next_cursor})
    return page("ui_search.html", principal, form=form, result=result, more=more,
                statuses=STATUSES.strip("^$()").split("|"), hit_link=_hit_link, fragments=_fragments)


def _hit_link(hit: Any) -> str:
    """Where a hit is on its chat's page: the message's (or queued prompt's) anchor."""
    if hit.kind == "message" and hit.message_id is not None:
        return f"/ui/chats/{hit.chat_id}#{anchor('message', hit.message_id)}"
    if hit.kind == "queued":
        return f"/ui/chats/{hit.chat_id}#{anchor('queued', hit.doc_id[1:])}"
    return f"/ui/chats/{hit.chat_id}"


def _fragments(hit: Any) -> list[tuple[str, bool]]:
    """The snippet cut at its highlights: (text, highlighted) pairs the template escapes."""
    out, pos = [], 0
    for start, end in hit.highlights:
        out += [(hit.snippet[pos:start], False), (hit.snippet[start:end], True)]
        pos = end
    return out + [(hit.snippet[pos:], False)]


@functools.cache
def _live_types(chat_only: bool = False) -> tuple[str, ...]:
    """The event types a chat's stream carries (its own and, unless ``chat_only``, its tool calls'
    executions'): the names the page's ``EventSource`` listens to."""
    from ledger.chat import events as chat
    from ledger.toolcalls import events as tc

    return tuple(sorted(n for mod in ((chat,) if chat_only else (chat, tc)) for n, c in vars(mod).items()
                        if isinstance(c, type) and c.__dict__.get("TOPIC") and c.__module__ == mod.__name__))


@get("/chats/{chat_id:uuid}", include_in_schema=False, sync_to_thread=True, dependencies=dependencies)
def chat(chat_id: UUID, principal: Principal, state: State,
         at: int | None = Parameter(default=None, ge=1, le=2**62),
         as_of: str | None = Parameter(default=None, max_length=64), full: bool = False,
         before: int | None = Parameter(default=None, ge=1, le=2**62)) -> Response[str]:
    """The chat's page: as it is (followed live), or as it was at version ``at`` / at the time ``as_of``, with a
    stepper through its versions and a link to what the last step changed (``/diff``). A long chat (more than
    ``CHAT_LEDGER_UI_LONG_CHAT`` events, default 2,000) opens on a window of its latest events
    (``ledger.audit.window``; ``before``: the window ending there) unless the whole page is asked for (``full``)."""
    from commands.audit_page import page_data
    from commands.chatlist import family
    from commands.queries import audit_timeline, chat_events, cut_version

    svc = service(state)
    svc.scopes.check_read(principal, svc.scopes.chat(chat_id))
    head = svc.app.head()  # before reading: an event after it reaches the page through the stream
    backend = views.catch_up_views(svc.app, svc.ledger.backend, ("chat_views",))  # (the window's facts, the family)
    if at is None and as_of is None and not full:
        windowed = _chat_window(svc, backend, principal, chat_id, before)
        if windowed is not None:
            return windowed
    events = chat_events(svc.app, chat_id)
    upto = cut_version(events, at, as_of)
    latest = events[-1].originator_version
    data = page_data(svc.app, chat_id, events, upto, audit_timeline(svc.app, chat_id, events, upto))

    def explain(what: str, ident: Any) -> str:
        return f"/ui/chats/{chat_id}/explain?{what}={quote(str(ident))}"

    evidence = data.get("evidence")
    proof_link = None if evidence is None else (  # (the API's route: a page's session cookie reads it too)
        lambda v: f"/v1/proofs/inclusion?stream={chat_id}&version={v}&size={evidence['log_size']}")
    shown = data["version"]
    root = svc.scopes.chat(chat_id).root if data["parent_chat_id"] or data["children"] else None  # (a family)
    tree = family(backend, str(root)) if root else []
    tree = [t for t in tree if svc.scopes.may_read(principal, svc.scopes.chat(UUID(t["chat_id"]))) is None]
    versions = {"shown": shown, "latest": latest, "past": upto is not None and shown < latest,
                "base": f"/ui/chats/{chat_id}", "bundle": f"/ui/chats/{chat_id}/bundle" if evidence else None}
    live = None if versions["past"] else {"stream": f"/v1/events/stream?chat={chat_id}&after={head}",
                                          "types": _live_types()}
    text = render_page(data, ui_link, template="ui_chat.html", explain=explain, me=principal, proof_link=proof_link,
                       live=live, versions=versions, family=tree)
    return html(text)


def _long_chat() -> int:
    import os

    return int(os.environ.get("CHAT_LEDGER_UI_LONG_CHAT") or 2000)


def _chat_window(svc: Any, backend: Any, principal: Principal, chat_id: UUID,
                 before: int | None) -> Response[str] | None:
    """A long chat's first screen (or, with ``before``, the window of events up to it): None for a chat short
    enough to show whole. ``backend``: the views, the chat's caught up."""
    from ledger.audit.window import WINDOW, window_page

    row = views.chat_status(backend, chat_id)[0]
    latest, long = int(row["version"]), _long_chat()
    if latest <= long and before is None:
        return None
    upto = min(before or latest, latest)
    size = min(WINDOW, long)  # (a window is never longer than what counts as a long chat)
    events = svc.app.stream(chat_id, gt=max(upto - size, 0), lte=upto)
    return page("ui_chat_window.html", principal, w=window_page(row, events, latest), chat_id=str(chat_id))


@get("/chats/{chat_id:uuid}/diff", include_in_schema=False, sync_to_thread=True, dependencies=dependencies)
def chat_diff_page(chat_id: UUID, principal: Principal, state: State,
                   from_: int = QueryParameter(name="from", ge=0, le=2**62),
                   to: int | None = Parameter(default=None, ge=1, le=2**62)) -> Response[str]:
    """What changed in the chat from version ``from`` to ``to`` (default: the latest): ``ledger.audit.diff``."""
    from commands.audit_page import page_data
    from commands.queries import audit_timeline, chat_events, cut_version
    from ledger.audit.diff import chat_diff

    svc = service(state)
    svc.scopes.check_read(principal, svc.scopes.chat(chat_id))
    events = chat_events(svc.app, chat_id)
    b = cut_version(events, to, None) or events[-1].originator_version
    a = cut_version(events, from_, None) if from_ >= 1 else 0
    if a >= b:
        raise LedgerError("invalid_request", f"from ({a}) must be before to ({b})")

    def at(version: int) -> dict[str, Any]:
        if version == 0:  # (before the chat: nothing)
            return {"version": 0, "messages": [], "edits": [], "queued": [], "now": {}, "title": "", "now_policy": "",
                    "metadata": {}}
        return page_data(svc.app, chat_id, events, version, audit_timeline(svc.app, chat_id, events, version),
                         evidence=None)

    diff = chat_diff(at(a), at(b))
    return page("ui_diff.html", principal, chat_id=str(chat_id), diff=diff, latest=events[-1].originator_version)


@get("/chats/{chat_id:uuid}/bundle", include_in_schema=False, sync_to_thread=True, dependencies=dependencies)
def chat_bundle(chat_id: UUID, principal: Principal, state: State) -> Response[bytes]:
    """The chat's evidence bundle as a zip (``audit CHAT --bundle``: the page, the events as stored, an inclusion
    proof of each, the latest published checkpoint), for ``proof verify --bundle`` offline."""
    import io
    import tempfile
    import zipfile

    from commands.audit_page import bundle_page
    from commands.evidence import EvidenceError, bundle_checkpoint, write_bundle
    from commands.queries import chat_events

    svc = service(state)
    svc.scopes.check_read(principal, svc.scopes.chat(chat_id))
    events = chat_events(svc.app, chat_id)
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            write_bundle(svc.app, chat_id, events[-1].originator_version, Path(tmp),
                         bundle_checkpoint(svc.app, None, None), bundle_page(svc.app, chat_id, events))
        except EvidenceError as e:
            raise LedgerError("checkpoint_not_found", f"{e}: the service publishes checkpoints with serve "
                                                      "--checkpoint-key") from None
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(Path(tmp).rglob("*")):
                if f.is_file():
                    z.write(f, f"chat-{chat_id}/{f.relative_to(tmp)}")
    return Response(buffer.getvalue(), media_type="application/zip",
                    headers={"Content-Disposition": f'attachment; filename="chat-{chat_id}-evidence.zip"'})


@get("/chats/{chat_id:uuid}/explain", include_in_schema=False, sync_to_thread=True, dependencies=dependencies)
def explain_page(chat_id: UUID, principal: Principal, state: State, tool_call: str | None = None,
                 queued_message: int | None = Parameter(default=None, ge=0, le=2**62),
                 turn: str | None = None) -> Response[str]:
    """The decision in sentences with links (``ledger.audit.readable``), "as it was then" beside "with today's
    settings" where they differ, and the report's JSON one click away."""
    from commands.explain import default_since, explain
    from ledger.audit.readable import readable
    from ledger.audit.render import folded_json

    svc = service(state)
    svc.scopes.check_read(principal, svc.scopes.chat(chat_id))
    asked = {"tool_call": tool_call, "queued_message": queued_message, "turn": turn}
    report = explain(svc.app, chat_id, with_current_settings=True, **asked)  # (exactly one, or invalid_request)
    what, ident = next((k, v) for k, v in asked.items() if v is not None)
    since = None
    if what == "turn" and (report.get("model_resolution") or {}).get("model_config_id"):
        since = default_since(svc.app, chat_id, report["started"]["version"],
                              report["model_resolution"]["model_config_id"])
    text, folded = folded_json(report)  # a page is bounded; the API answer is whole
    return page("ui_explain.html", principal, chat_id=str(chat_id), what=what.replace("_", " "), ident=str(ident),
                report=text, folded=folded, said=readable(report, what, since),
                api=f"/v1/chats/{chat_id}/explain?{what}={quote(str(ident))}")


@get("/orgs/{org:uuid}/models", include_in_schema=False, sync_to_thread=True, dependencies=dependencies)
def models(org: UUID, principal: Principal, state: State) -> Response[str]:
    check(principal, "read", Resource("catalog", org))
    user = principal.user if principal.role == "member" else None
    view = service(state).ledger.models(org, user)
    return page("ui_models.html", principal, org=str(org), view=view)


router = Router(path="/ui", route_handlers=[login_form, login, logout, home, chats, search_page, chat, chat_diff_page,
                                            chat_bundle, explain_page, models, live_js],
                exception_handlers={LedgerError: ledger_error_page, HTTPException: http_error_page},
                include_in_schema=False)
