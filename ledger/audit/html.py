"""A self-contained HTML page of an audit (no network assets: inline CSS, no scripts, no fonts), from the
shared templates (``ledger.audit.render``) and the page data of ``ledger.audit.page``. The service layer's
``commands.audit_page`` adds what other streams hold (execution records, model names)."""

from __future__ import annotations

from typing import Any


def render(data: dict[str, Any], events: list[Any], settings_at: Any = None) -> str:
    """The page for ``timeline(...)`` output and the stream's events (chats: every section)."""
    from ledger.audit.page import chat_page, stream_page
    from ledger.audit.render import render_page

    page = chat_page(data, events, settings_at) if data["aggregate"] == "chat" else stream_page(data)
    return render_page(page)
