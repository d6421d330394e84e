"""The audit page of a stream (``chat-ledger audit --html``; the HTTP service's pages use the same data and
templates): the page's data built from the recorded events (``ledger.audit.page``) with what other streams
hold — each tool call's execution record, the organization's model names — then rendered with the shared
templates (``ledger.audit.render``) and a ``link`` function (default: the static page's anchors and files)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ledger.audit.render import Link, render_page, static_link


def page_data(app: Any, stream_id: UUID, events: list[Any], upto: int | None, data: dict[str, Any],
              evidence: dict[str, Any] | None | bool = True) -> dict[str, Any]:
    """The plain data of the page for ``timeline(events, upto)`` output ``data``, with ``evidence``: the
    checkpoint the page shows (``commands.evidence.chat_evidence``; True: the latest published, None: none)."""
    from ledger.audit.page import chat_page, stream_page

    if data["aggregate"] != "chat":
        return stream_page(data)
    from commands.explain import step_settings

    shown = [e for e in events if upto is None or e.originator_version <= upto]
    page = chat_page(data, shown, step_settings(app, stream_id, shown), executions=_executions(app, shown),
                     model_names=_model_names(app, shown[0].organization_id))
    if evidence is True:
        from commands.evidence import chat_evidence

        evidence = chat_evidence(app, stream_id, shown[-1].originator_version)
    return {**page, "evidence": evidence or None}


def audit_page(app: Any, stream_id: UUID, events: list[Any], upto: int | None, data: dict[str, Any],
               link: Link = static_link, evidence: dict[str, Any] | None | bool = True,
               proof_link: Any = None) -> str:
    """The page; ``proof_link(version)``: where the page links each covered event's inclusion proof."""
    return render_page(page_data(app, stream_id, events, upto, data, evidence), link, proof_link=proof_link)


def _executions(app: Any, events: list[Any]) -> dict[str, dict[str, Any]]:
    """Execution id -> its record (status and events) for every tool call of the chat that has one."""
    from commands.idlookup import tool_call_ids
    from commands.toolcalls import load_execution
    from ledger.audit.timeline import summarize

    out: dict[str, dict[str, Any]] = {}
    for cid in tool_call_ids(events):
        try:
            eid = UUID(cid)
        except ValueError:
            continue  # a provider id (its execution id is in the set too)
        agg = load_execution(app, eid)
        if agg is None:
            continue
        out[cid] = {"status": agg.state.status, "events": [
            {"version": e.originator_version, "time": e.timestamp.isoformat(), "type": type(e).__name__,
             "summary": summarize(e)} for e in app.stream(agg.id)]}
    return out


def _model_names(app: Any, organization_id: UUID) -> dict[str, str]:
    """Model config id -> "provider/model (display name)" in the organization's catalog now."""
    from commands.catalog import find_catalog

    catalog = find_catalog(app, organization_id)
    if catalog is None:
        return {}
    return {str(k): f"{c.provider}/{c.model}" + (f" ({c.display_name})" if c.display_name else "")
            for k, c in catalog.configs.items()}


def bundle_page(app: Any, stream_id: UUID, events: list[Any]) -> Any:
    """``page(version, evidence)``: the audit page an evidence bundle holds (``commands.evidence.write_bundle``) — the
    stream at that version, each covered event linking its proof file in the bundle."""
    from commands.queries import audit_timeline

    def page(version: int, evidence: dict[str, Any]) -> str:
        return audit_page(app, stream_id, events, version, audit_timeline(app, stream_id, events, version),
                          evidence=evidence, proof_link=lambda v: f"proofs/v{v}.json")
    return page

