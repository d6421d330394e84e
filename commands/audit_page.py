"""The audit page of a stream (``chat-ledger audit --html``): the page's data built from the recorded
events (``ledger.audit.page``), rendered with the shared templates (``ledger.audit.render``)."""

from __future__ import annotations

from typing import Any
from uuid import UUID


def audit_page(app: Any, stream_id: UUID, events: list[Any], upto: int | None, data: dict[str, Any]) -> str:
    from commands.explain import step_settings
    from ledger.audit.html import render

    shown = [e for e in events if upto is None or e.originator_version <= upto]
    return render(data, shown, step_settings(app, stream_id, shown) if data["aggregate"] == "chat" else None)
