"""The read side of the service layer: the projections the ledger keeps and the queries on their views.

Every query catches up the views it reads first (``catch_up_one``), so a reader always sees what has been
recorded. The entry points (CLI, HTTP) call these and only format what they return.

Errors of the projections become ``LedgerError``s: ``projection_busy`` when another process holds the
build (a rebuild; a query waits ``QUERY_WAIT`` seconds for it first), ``projection_error`` for a projection
that cannot apply an event (the message names the stream, version and reason) or needs a rebuild.
"""

from __future__ import annotations

from typing import Any, Callable

from ledger.catalog.views import models_view
from ledger.chat.views import json_row
from ledger.errors import LedgerError
from projections import BuildBusy, NoRollback, ProjectionError, catch_up, prune, rebuild, rollback

Progress = Callable[[int, int], None] | None

UNRESOLVED_COLUMNS = ("chat_id", "assistant_message_id", "tool_call_id", "tool_name", "kind", "execution_id", "args",
                      "since")


class Window:
    """What a listing keeps: rows whose time column is in [``since``, ``until``] (ISO 8601, inclusive), then
    the first ``limit`` of them in the listing's order (None: no bound)."""

    def __init__(self, limit: int | None = None, since: str | None = None, until: str | None = None) -> None:
        from ledger.audit.timeline import parse_time

        if limit is not None and limit < 0:
            raise LedgerError("invalid_command", f"limit must be 0 or more, not {limit}")
        self.limit = limit
        self.since = parse_time(since) if since else None
        self.until = parse_time(until) if until else None

    def apply(self, rows: list[dict[str, Any]], time_column: str) -> list[dict[str, Any]]:
        from ledger.audit.timeline import parse_time

        if self.since is not None or self.until is not None:
            def inside(r: dict[str, Any]) -> bool:
                t = parse_time(r[time_column]) if r.get(time_column) else None
                return t is not None and (self.since is None or t >= self.since) and (self.until is None or t <= self.until)

            rows = [r for r in rows if inside(r)]
        return rows if self.limit is None else rows[:self.limit]


ALL = Window()


def all_projections(app: Any) -> list[Any]:
    from projections.chats import chat_projections
    from projections.conversations import conversation_projections
    from projections.org_models import org_model_projections
    from projections.search import search_projections
    from projections.usage import usage_projections

    return (chat_projections(app) + conversation_projections(app) + org_model_projections(app)
            + search_projections(app) + usage_projections(app))


def selected(app: Any, names: tuple[str, ...] | None = None) -> list[Any]:
    """The projections named (default: all), in their registration order."""
    return [p for p in all_projections(app) if names is None or p.name in names]


def lag(app: Any, projection: Any, backend: Any) -> int:
    """Events the projection's live build is behind the head of the log."""
    version = backend.live_version(projection.name) or projection.version
    return app.head() - (backend.position(projection.name, version) or 0)


#: Seconds a query waits for the writer holding a view's build (a rebuild in place) before it is
#: ``projection_busy``.
QUERY_WAIT = 5.0


def _ledger_error(e: ProjectionError) -> LedgerError:
    code = "projection_busy" if isinstance(e, BuildBusy) else "no_previous_build" if isinstance(e, NoRollback) \
        else "projection_error"
    return LedgerError(code, str(e))


def catch_up_one(app: Any, projection: Any, backend: Any, batch_size: int | None = None, progress: Progress = None,
                 wait: float = QUERY_WAIT) -> int:
    """Catch one projection up to the head, waiting up to ``wait`` seconds for another writer of its build."""
    try:
        return catch_up(app, projection, backend, batch_size=batch_size, progress=progress, wait=wait)
    except ProjectionError as e:
        raise _ledger_error(e) from e


def rebuild_one(app: Any, projection: Any, backend: Any, **options: Any) -> Any:
    """``projections.rebuild`` (see there for ``options``); a rebuild of it already running is
    ``projection_busy``."""
    try:
        return rebuild(app, projection, backend, **options)
    except ProjectionError as e:
        raise _ledger_error(e) from e


def prune_one(projection: Any, backend: Any) -> list[int]:
    """Drop the builds of a projection nobody reads or builds; returns their versions."""
    try:
        return prune(projection, backend)
    except ProjectionError as e:
        raise _ledger_error(e) from e


def rollback_one(projection: Any, backend: Any) -> Any:
    """Switch a projection back to its previous build (``no_previous_build`` when there is none to use)."""
    try:
        return rollback(projection, backend)
    except ProjectionError as e:
        raise _ledger_error(e) from e


def switch_log(backend: Any, name: str) -> list[dict[str, Any]]:
    """A projection's switches, oldest first, as JSON values."""
    import msgspec

    return [msgspec.to_builtins(s) for s in backend.switches(name)]


def catch_up_views(app: Any, backend: Any, names: tuple[str, ...] | None = None) -> Any:
    for projection in selected(app, names):
        catch_up_one(app, projection, backend)
    return backend


def query(backend: Any, name: str, table: str, where: dict[str, Any] | None = None,
          order_by: Any = None) -> list[dict[str, Any]]:
    """Rows of a (caught-up) view's table, as JSON values."""
    return [json_row(r) for r in backend.query(name, table, where=where or None, order_by=order_by)]


def chat_status(backend: Any, chat_id: Any = None, org: Any = None, status: str | None = None,
                window: Window = ALL, newest_first: bool = False) -> list[dict[str, Any]]:
    """The chat_status view: one chat (``chat_not_found`` if unknown) or every chat, filtered, oldest update
    first (or newest, ``newest_first``; ``window``: ``updated_at`` between since and until, then at most limit
    rows in that order)."""
    where: dict[str, Any] = {}
    if chat_id is not None:
        where["chat_id"] = str(chat_id)
    if org is not None:
        where["organization_id"] = str(org)
    if status:
        where["status"] = status
    rows = query(backend, "chat_views", "chat_status", where, order_by=["updated_at", "chat_id"])
    if chat_id is not None and not rows:
        raise LedgerError("chat_not_found", f"chat {chat_id} not found")
    return window.apply(rows[::-1] if newest_first else rows, "updated_at")


def _known_chat(backend: Any, chat_id: Any) -> None:
    if not query(backend, "chat_views", "chat_status", {"chat_id": str(chat_id)}):
        raise LedgerError("chat_not_found", f"chat {chat_id} not found")


def unresolved(backend: Any, chat_id: Any = None, org: Any = None, window: Window = ALL) -> list[dict[str, Any]]:
    """Unresolved tool calls of each chat's latest assistant message (the unresolved_tool_calls view), by chat,
    then in the order the message lists them (``chat_not_found`` for an unknown chat; ``window`` on
    ``since``, the time of the message)."""
    where: dict[str, Any] = {}
    if chat_id is not None:
        _known_chat(backend, chat_id)
        where["chat_id"] = str(chat_id)
    if org is not None:
        chats = query(backend, "chat_views", "chat_status", {"organization_id": str(org)})
        where["chat_id"] = [r["chat_id"] for r in chats]
        if not where["chat_id"]:
            return []
    rows = query(backend, "chat_views", "unresolved_tool_calls", where,
                 order_by=["chat_id", "assistant_message_id", "call_index"])
    return window.apply([{k: r[k] for k in UNRESOLVED_COLUMNS} for r in rows], "since")


def chat_queue(backend: Any, chat_id: Any, limit: int | None = None) -> list[dict[str, Any]]:
    """Queued prompts of a chat, head first (the chat_queue view; ``chat_not_found`` for an unknown chat)."""
    _known_chat(backend, chat_id)
    return Window(limit).apply(query(backend, "chat_views", "chat_queue", {"chat_id": str(chat_id)},
                                     order_by=["position", "queued_message_id"]), "editing_since")


def usage(backend: Any, org: Any = None, owner: Any = None) -> dict[str, Any]:
    """The usage view: each chat's sums (``chat_usage`` rows, most expensive first) and their total, of one
    organization and/or owner (or every chat)."""
    from ledger.chat.values import USAGE_FIELDS

    where: dict[str, Any] = {}
    if org is not None:
        where["organization_id"] = str(org)
    if owner is not None:
        where["owner_id"] = str(owner)
    rows = [r for r in query(backend, "usage", "chat_usage", where, order_by=["chat_id"]) if r["messages"]]
    rows.sort(key=lambda r: (-r["total_cost_micros"], -r["total_tokens"], r["chat_id"]))
    total = {name: sum(r[name] for r in rows) for name in ("messages", *USAGE_FIELDS)}
    return {"organization_id": str(org) if org else None, "owner_id": str(owner) if owner else None,
            "chats": len(rows), "total": total, "by_chat": rows}


def conversations(backend: Any, conversation_id: Any = None, status: str | None = None,
                  window: Window = ALL) -> list[dict[str, Any]]:
    """The conversations view (``conversation_not_found`` for an unknown id)."""
    where: dict[str, Any] = {}
    if conversation_id is not None:
        where["conversation_id"] = str(conversation_id)
    if status:
        where["status"] = status
    rows = query(backend, "conversations", "conversations", where, order_by=["updated_at", "conversation_id"])
    if conversation_id is not None and not rows:
        raise LedgerError("conversation_not_found", "conversation not found")
    return window.apply(rows, "updated_at")


def organization_models(app: Any, backend: Any, org_id: Any, user_id: Any = None) -> dict[str, Any]:
    """The ``models`` shape read from the org_models view (caught up by the caller). A user the view has no
    row for (neither a member nor with overrides) is computed on demand from the current catalog."""
    from commands.catalog import find_catalog, find_deployment
    from projections.org_models import view_row

    with backend.reading("org_models") as r:
        orgs = r.query("organizations", where={"organization_id": str(org_id)})
        mine = r.query("users", where={"organization_id": str(org_id), "user_id": str(user_id)}) if user_id else []
    deployment = find_deployment(app)
    if not orgs:
        if find_catalog(app, org_id) is None:
            raise LedgerError("organization_not_found", "organization not found")
        return models_view(org_id, None, deployment, user_id)
    view = view_row(orgs[0])
    if user_id is not None:
        if mine:
            view["personal_overrides"], view["effective"] = mine[0]["personal_overrides"], mine[0]["effective"]
        else:
            live = models_view(org_id, find_catalog(app, org_id), deployment, user_id)
            view["personal_overrides"], view["effective"] = live["personal_overrides"], live["effective"]
    return view
