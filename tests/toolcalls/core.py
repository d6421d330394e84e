"""An execution stream folded in memory with the pure core, for unit and property tests."""

from __future__ import annotations

from datetime import datetime, timezone

from ledger.base import Emitter
from ledger.chat.views import tool_call_execution_ids
from ledger.toolcalls import decide as core
from ledger.toolcalls import events as ev
from ledger.toolcalls.aggregate import ToolCallExecution
from ledger.toolcalls.identity import CallFacts
from ledger.toolcalls.state import evolve
from tests.policy.history import CHAT

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
TOPIC = ToolCallExecution.TOPIC
NOT_RUN = "tool call was canceled before it ran; no changes were made"
CANCELED_EXECUTE = {"success": False, "exit_code": -1, "error": "tool call was canceled while running",
                    "canceled": True}
OK = ev.ToolCallResponse(status=200, content_type="application/json", body='{"exit_code": 0, "output": "hi"}')


def facts(tool_name: str = "execute", tool_call_id: str = "c1") -> CallFacts:
    return CallFacts(execution_id=tool_call_execution_ids(CHAT, 2, [tool_call_id])[tool_call_id], chat_id=CHAT,
                     assistant_message_id=2, tool_call_id=tool_call_id, tool_name=tool_name)


class Stream:
    """One execution stream folded in memory: apply each decision's events, like the store would."""

    def __init__(self, f: CallFacts) -> None:
        self.facts = f
        self.state = None
        self.events: list = []

    def _em(self, key: str | None = None) -> Emitter:
        return Emitter(self.facts.execution_id, self.state.version if self.state else 0, T, key)

    def _apply(self, events: list) -> list:
        for e in events:
            self.state = evolve(self.state, e)
        self.events += events
        return events

    def claim(self, tool_name: str | None = None, sha: str | None = None) -> list:
        return self._apply(core.claim(self.state, self._em(), self.facts, topic=TOPIC,
                                      tool_name=tool_name or self.facts.tool_name, input_sha256=sha))

    def claim_policy(self, policy: list[str] | None) -> list:
        return self._apply(core.claim(self.state, self._em(), self.facts, topic=TOPIC, tool_name=self.facts.tool_name,
                                      policy=policy, always_allowed=frozenset({"advisor"})))

    def respond(self, response: ev.ToolCallResponse = OK) -> list:
        return self._apply(core.record_response(self.state, self._em(), response))

    def cancel(self) -> list:
        return self._apply(core.cancel(self.state, self._em(), self.facts, topic=TOPIC))
