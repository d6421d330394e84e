"""``chat-ledger explain``: a tool call, a queued prompt or a turn of a chat, explained from its recorded
facts (``ledger.audit.explain``) as of a chat version, with every other stream as of the same log position.

``--at VERSION`` / ``--as-of TIME`` cut the chat's events at that version; the tool-call execution shown is
folded to the notification id of the chat's event at that version, and a step whose attempt recorded no
settings gets them resolved from the catalog and the deployment as of the step's own position (never
today's). ``--with-current-settings`` adds what today's facts give — each step's settings, the promotion's
model resolution, the execution record — and the differences. ``--turn`` adds the chat stream's hash
chain status up to the version shown (``chain``; a line ``chain: ok (head …)`` / ``chain broken at
version N: …``).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from commands.asof import AsOf, chat_position
from commands.next_action import advisor_bodies, settings_report
from commands.queries import chat_events, cut_version
from commands.redecide import resolution_rule
from commands.toolcalls import load_execution
from ledger import chain, positions
from ledger.audit import redecide as rd
from ledger.audit.explain import explain_queued, explain_tool_call, explain_turn
from ledger.base import fast_project
from ledger.chat import events as ev
from ledger.policy.generation import next_action
from ledger.policy.settings import attempt_settings
from ledger.errors import LedgerError


def _full_ids(events: list[Any], chat_id: UUID, tool_call: str | None, turn: str | None) -> tuple[str | None, str | None]:
    """A tool call's or a turn's id as given, or the one id of the chat it is a unique prefix of."""
    from commands.idlookup import among, tool_call_ids, turn_ids
    from ledger.ids import looks_like_prefix

    if tool_call is not None:
        tool_call = among(tool_call, tool_call_ids(events), "tool call id", "tool_call_not_found",
                          f"no tool call {tool_call!r} in chat {chat_id}")
    if turn is not None and looks_like_prefix(turn) and len(turn) < 36:
        turn = among(turn, turn_ids(events), "turn id", "turn_not_found", f"no turn {turn} in chat {chat_id}")
    return tool_call, turn


def explain(app: Any, chat_id: UUID, *, tool_call: str | None = None, queued_message: int | None = None,
            turn: str | None = None, version: int | None = None, as_of: str | None = None,
            with_current_settings: bool = False) -> dict[str, Any]:
    if sum(x is not None for x in (tool_call, queued_message, turn)) != 1:
        raise LedgerError("invalid_request", "give exactly one of tool_call, queued_message, turn")
    events = chat_events(app, chat_id)
    version = cut_version(events, version, as_of)
    if version is not None:
        events = events[:version]
    reader = AsOf(app, index=True)
    position = chat_position(app, chat_id, version) if version is not None else None
    tool_call, turn = _full_ids(events, chat_id, tool_call, turn)
    if tool_call is not None:
        def execution(eid: UUID, at: int | None = position) -> list[Any]:
            found = load_execution(app, eid)  # its stream (ledger.streams: maybe not at its natural id)
            if found is None:
                return []
            sid = found.id
            return app.stream(sid, lte=reader.version(sid, at)) if at is not None else app.stream(sid)

        data = explain_tool_call(events, tool_call, execution)
        if with_current_settings:
            now = explain_tool_call(events, tool_call, lambda eid: execution(eid, None))["execution"]
            data["current_settings"] = {"execution": now}
            data["differences"] = rd.differences({"execution": data["execution"]}, {"execution": now},
                                                 ("as_of", "current"))
    elif queued_message is not None:
        data = explain_queued(events, queued_message)
        if with_current_settings:
            data["current_settings"], data["differences"] = _promotion_now(reader, events, data)
    else:
        data = explain_turn(events, turn, _settings_at(app, reader, chat_id, events),  # type: ignore[arg-type]
                            _settings_now(reader, events) if with_current_settings else None)
        # the chat stream's hash chain up to the version shown (``ledger.chain``)
        data["chain"] = chain.stream_status(app, chat_id, position)
        data["explanation"].append(chain.text(data["chain"]))
    data["facts_as_of"] = {"chat_version": version if version is not None else events[-1].originator_version,
                           "notification_id": position}
    return data


def _settings(facts: Any, state: Any, bodies: dict[str, Any]) -> dict[str, Any]:
    report = settings_report(facts, state)
    decision = next_action(state, report.settings, advisor_result_bodies=bodies)
    return rd.plain(attempt_settings(state, report.settings, report.recorded_model, decision, "ledger"))


def _settings_at(app: Any, reader: AsOf, chat_id: UUID, events: list[Any]) -> Any:
    """``settings_at(state, version)``: what an attempt at that chat version would have run with, from the
    catalog and the deployment as of that version's log position."""
    nids = dict(positions.positions(app.recorder, chat_id))
    bodies = advisor_bodies(events)
    return lambda state, version: _settings(reader.at(nids[version]), state, bodies) if state is not None else None


def step_settings(app: Any, chat_id: UUID, events: list[Any]) -> Any:
    """What the audit page shows for steps whose attempt recorded no settings (``_settings_at``)."""
    return _settings_at(app, AsOf(app, index=True), chat_id, events)


def _settings_now(reader: AsOf, events: list[Any]) -> Any:
    bodies = advisor_bodies(events)
    return lambda state: _settings(reader.at(None), state, bodies) if state is not None else None


def _promotion_now(reader: AsOf, events: list[Any], data: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """The promotion's model resolution decided again with today's catalog, and how it differs."""
    o = data["outcome"]
    if o is None or o["how"] != "promoted":
        return None, []
    promoted = events[o["version"] - 1]
    assert isinstance(promoted, ev.QueuedPromptPromoted)
    before = fast_project(None, events[:o["version"] - 1]).state
    now = rd.outcome(resolution_rule(reader.at(None), before, promoted))  # type: ignore[misc]
    return {"model_resolution": now}, rd.differences({"model_resolution": o["model_resolution"]},
                                                     {"model_resolution": now}, ("as_of", "current"))


def default_since(app: Any, chat_id: UUID, version: int, model_config_id: Any) -> dict[str, Any] | None:
    """The catalog change that made ``model_config_id`` the organization's default, as of the chat's ``version``
    (its log position): ``{version, time, actor, reason}`` of that ``DefaultModelConfigChanged``; None when the
    catalog holds none (``ledger.audit.readable``: "the organization's default since version N of its catalog")."""
    from ledger.catalog.aggregate import OrganizationCatalog
    from ledger.catalog.events import DefaultModelConfigChanged
    from ledger.streams import locate

    org = chat_events(app, chat_id)[0].organization_id
    stream_id, catalog = locate(app, OrganizationCatalog, org, lambda i: app.load_cached(i, copy=False))
    nid = positions.notification_id(app.recorder, chat_id, version)
    if catalog is None or nid is None:
        return None
    for e in reversed(app.stream(stream_id, lte=positions.version_at(app.recorder, stream_id, nid) or 1)):
        if isinstance(e, DefaultModelConfigChanged) and str(e.model_config_id) == str(model_config_id):
            return {"version": e.originator_version, "time": e.timestamp.isoformat(),
                    "actor": str(e.actor) if e.actor else None, "reason": str(e.reason)}
    return None
