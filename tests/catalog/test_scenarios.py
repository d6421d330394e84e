"""Every example scenario gives the refusals (line -> code) and final chat states its expected.json names."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from commands.handler import apply_lines
from ledger.chat.aggregate import Chat
from ledger.store import ChatLedgerApp

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.jsonl")), ids=lambda p: p.stem)
def test_scenario(path: Path) -> None:
    expected = json.loads(path.with_name(path.stem + ".expected.json").read_text())
    app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    try:
        results: list[dict] = []
        apply_lines(app, path.read_text().splitlines(), out=results.append)
        refused = {str(r["line"]): r["error"]["code"] for r in results if not r["ok"]}
        assert refused == expected["refused"], [r for r in results if not r["ok"]]
        for chat_id, state in expected["states"].items():
            chat = app.load(uuid.UUID(chat_id))
            assert isinstance(chat, Chat)
            assert chat.state.execution_state == state, chat_id
    finally:
        app.close()
