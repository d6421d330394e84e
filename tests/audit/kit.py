"""A recorded scenario for audit tests, and a CLI runner.

The scenario (organization ORG of tests/catalog/kit: M1 the default, M2 another model):
v1 chat created with tool policy [read, execute] (M1, org default); v2 a prompt queued with hook policy
[execute], a hook prefix and model M2; (M2 is then disabled in the catalog); v3 a step calls ``read``
(c1); v4 its result; v5-v6 the turn finishes and the queued prompt is promoted: policy narrowed to
[execute] (``read`` removed) and the model falls back to M1 (M2 disabled); v7 a step calls ``read`` (c2,
not offered) and ``execute`` (c3); v8-v10 interrupt (unowned): c2 and c3 canceled, interruption finished.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from click.testing import CliRunner

from commands.cli.main import main
from tests.catalog.kit import ALICE, M1, M2, ORG, org_with, run

__all__ = ["ALICE", "M1", "M2", "ORG", "cli", "scenario", "INTERRUPTED"]

INTERRUPTED = "Tool execution interrupted by user"


def _call(cid: str, tool: str) -> dict[str, Any]:
    return {"type": "tool-call", "tool_call_id": cid, "tool_name": tool, "args": {"path": "a.py"}}


def scenario(app: Any) -> str:
    org_with(app)
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="Fix the build",
                  hook_allowed_tools=["read", "execute"], dynamic_tools=["ask_user"])["chat_id"]
    time.sleep(0.002)
    run(app, type="send_message", chat_id=chat_id, text="also the flaky test", created_by=ALICE,
        hook_allowed_tools=["execute"], model_config_id=M2,
        prefix_messages=[{"role": "user", "visibility": "model", "parts": [{"type": "text", "text": "hook says hi"}]}])
    run(app, type="update_model_config", organization_id=ORG, model_config_id=M2, enabled=False)
    time.sleep(0.002)
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [_call("c1", "read")]}])
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "tool", "parts": [
        {"type": "tool-result", "tool_call_id": "c1", "tool_name": "read", "result": "ok"}]}])
    run(app, type="finish_turn", chat_id=chat_id)
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        _call("c2", "read"), _call("c3", "execute")]}])
    run(app, type="interrupt", chat_id=chat_id)
    return chat_id


def cli(url: str, *args: str, code: int | None = 0) -> Any:
    result = CliRunner().invoke(main, ["--db", url, *args], catch_exceptions=False)
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.output)
    return result


def json_lines(output: str) -> list[Any]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def recorded_scenario(url: str) -> tuple[str, list[Any]]:
    """Record ``scenario`` on a fresh app at ``url``; the chat id and its events."""
    from ledger.store import open_app

    app = open_app(url)
    try:
        chat_id = scenario(app)
        events = app.stream(uuid.UUID(chat_id))
    finally:
        app.close()
    return chat_id, events
