"""Drives the pure conversation core without a store: decide, then evolve, keeping every event."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable, Sequence
from uuid import uuid4

from ledger.base import Emitter, LedgerEvent
from ledger.conversation import decide as core
from ledger.conversation.evolve import evolve
from ledger.conversation.state import ConversationState
from ledger.conversation.values import (
    Arrival, Box, BoxValue, Call, OutputItem, SteerToken, TextItem, ToolCallId, ToolReturnArrival,
    UserText,
)

SESSION = "0123456789abcdef01234567"
OTHER_SESSION = "fedcba9876543210fedcba98"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def calls(n: int, prefix: str = "tool") -> list[BoxValue]:
    return [Call(name=f"{prefix}{i}", arguments=f'{{"i": {i}}}') for i in range(n)]


class Harness:
    def __init__(self, session: str = SESSION, transcript: Sequence[Box] = (), force: bool = False) -> None:
        self.id = uuid4()
        self.session = session
        self.version = 0
        self.state: ConversationState = None  # type: ignore[assignment]
        self.events: list[LedgerEvent] = []
        self.apply(lambda e: core.decide_start(session, list(transcript), force, e))

    def apply(self, decide: Callable[[Emitter], list[LedgerEvent]], key: str | None = None) -> list[LedgerEvent]:
        events = decide(Emitter(self.id, self.version, NOW, key))
        for event in events:
            self.state = evolve(self.state, event)
            self.version = event.originator_version
        self.events.extend(events)
        return events

    def replay(self, events: Sequence[Any] | None = None) -> ConversationState:
        state = None
        for event in self.events if events is None else events:
            state = evolve(state, event)
        assert state is not None
        return state

    # operations ---------------------------------------------------------------------------------------
    def arrive(self, arrival: Arrival, key: str | None = None) -> list[LedgerEvent]:
        return self.apply(lambda e: core.decide_arrive(self.state, arrival, e), key)

    def user(self, text: str = "hello") -> list[LedgerEvent]:
        return self.arrive(UserText(text=text))

    def ret(self, sequence: int, result: str = "ok", session: str | None = None,
            is_error: bool = False) -> list[LedgerEvent]:
        tool_call_id = ToolCallId(session=session or self.session, sequence=sequence)
        return self.arrive(ToolReturnArrival(tool_call_id=tool_call_id, result=result, is_error=is_error))

    def begin(self) -> list[LedgerEvent]:
        return self.apply(lambda e: core.decide_begin(self.state, e))

    def begin_job(self) -> int:
        events = self.begin()
        assert events, "nothing was ready to begin"
        return events[0].job

    def stage(self, job: int, text: str = "", values: Sequence[BoxValue] = ()) -> list[LedgerEvent]:
        return self.apply(lambda e: core.decide_prepare_stage(self.state, job, text, list(values), e))

    def stage_ids(self, job: int, n: int, text: str = "") -> list[ToolCallId]:
        events = self.stage(job, text, calls(n))
        return [b.content.tool_call_id for b in events[0].boxes if hasattr(b.content, "tool_call_id")]

    def steer(self, job: int) -> list[LedgerEvent]:
        return self.apply(lambda e: core.decide_prepare_steer(self.state, job, e))

    def commit(self, token: SteerToken) -> list[LedgerEvent]:
        return self.apply(lambda e: core.decide_commit_steer(self.state, token, e))

    def complete(self, job: int, text: str = "", items: Sequence[OutputItem] | None = None) -> list[LedgerEvent]:
        output = list(items) if items is not None else ([TextItem(text=text)] if text else [])
        return self.apply(lambda e: core.decide_complete(self.state, job, output, e))

    def fail(self, job: int, message: str = "provider failed", restartable: bool = False) -> list[LedgerEvent]:
        return self.apply(lambda e: core.decide_fail(self.state, job, message, restartable, e))

    def restart(self) -> list[LedgerEvent]:
        return self.apply(lambda e: core.decide_restart(self.state, e))

    def recover(self, force: bool = False) -> list[LedgerEvent]:
        return self.apply(lambda e: core.decide_recover(self.state, force, e))
