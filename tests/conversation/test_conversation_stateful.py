"""Random command sequences through the pure conversation core, checking the invariants of the reference's
§8.3 after every step, and that replaying the (codec round-tripped) stream gives the live state."""

from __future__ import annotations

import copy
import random
from typing import Any, Callable

import msgspec
import pytest
from tests.conversation.harness import OTHER_SESSION, SESSION, Harness, calls
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ledger.codec import MsgspecMapper
from ledger.conversation.events import (
    ConversationHalted, ConversationRecovered, RoundBegan, RoundCompleted, RoundStalled, StagePrepared,
    SteerCommitted, SteerPrepared,
)
from ledger.conversation.evolve import evolve
from ledger.conversation.queries import validate_steer
from ledger.conversation.values import (
    AgentText, Attachment, BoxItem, Call, MalformedCall, SteerToken, SystemText, TextItem, ToolCall,
    ToolCallId, ToolReturn, UserText,
)
from ledger.errors import LedgerError

STALE_OFFSETS = st.sampled_from([1, -1, -2])
TEXTS = st.sampled_from(["", "", "a", "bc"])


class ConversationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()
        self.mapper = MsgspecMapper(fmt="json")
        self.stored: list[Any] = []  # the events as a reader of the store sees them
        self.allocated: list[ToolCallId] = []  # every tool-call id ever handed out, in order
        self.jobs: list[int] = []
        self.generations: list[int] = []
        self.committed: list[int] = []
        self._store(self.h.events)

    # -- plumbing ---------------------------------------------------------------------------------------
    def _store(self, events: list[Any]) -> None:
        for event in events:
            self.stored.append(self.mapper.to_domain_event(self.mapper.to_stored_event(event)))
            if isinstance(event, StagePrepared):
                self.allocated += [b.content.tool_call_id for b in event.boxes if isinstance(b.content, ToolCall)]
            elif isinstance(event, RoundBegan):
                self.jobs.append(event.job)
            elif isinstance(event, SteerPrepared):
                self.generations.append(event.generation)
            elif isinstance(event, SteerCommitted):
                self.committed.append(event.generation)

    def attempt(self, op: Callable[[], list[Any]], refusal: tuple[str, str] | None) -> list[Any]:
        """Run ``op``; it must be refused with ``refusal`` (code, message) iff one is expected, and a
        refusal must change nothing."""
        before, count = copy.deepcopy(self.h.state), len(self.h.events)
        try:
            events = op()
        except LedgerError as e:
            assert refusal is not None, f"unexpected refusal {e!r}"
            assert (e.code, e.message) == refusal
            assert self.h.state == before and len(self.h.events) == count
            return []
        assert refusal is None, f"expected refusal {refusal}"
        self._store(events)
        return events

    @property
    def s(self) -> Any:
        return self.h.state

    def job_for(self, offset: int) -> int:
        base = self.s.job if self.s.job is not None else self.s.last_job
        return max(base + offset, 0)

    def is_running(self) -> bool:
        return self.s.mode == "running"

    def running(self, job: int) -> bool:
        return self.s.mode == "running" and self.s.job == job

    # -- rules ------------------------------------------------------------------------------------------
    @initialize(force=st.booleans(), arrivals=st.integers(0, 2))
    def some_work_to_begin(self, force: bool, arrivals: int) -> None:
        if force:
            self.attempt(lambda: self.h.recover(force=True), None)
        for i in range(arrivals):
            self.attempt(lambda: self.h.user(f"u{i}"), None)

    @rule(kind=st.sampled_from(["system", "user", "attachment"]), text=TEXTS)
    def arrive(self, kind: str, text: str) -> None:
        arrival = {"system": SystemText(text=text), "user": UserText(text=text), "attachment": Attachment()}[kind]
        was_open, boxes, queued = self.s.round_open, len(self.s.boxes), len(self.s.queued)
        self.attempt(lambda: self.h.arrive(arrival), None)
        if was_open:
            assert len(self.s.boxes) == boxes and len(self.s.queued) == queued + 1
        else:
            assert len(self.s.boxes) == boxes + 1 and self.s.scheduled

    @precondition(lambda self: self.allocated)
    @rule(pick=st.integers(0, 8), unknown=st.sampled_from([False] * 4 + [True]),
          foreign=st.sampled_from([False] * 5 + [True]), is_error=st.booleans())
    def arrive_return(self, pick: int, unknown: bool, foreign: bool, is_error: bool) -> None:
        if unknown:
            sequence = self.s.sequence + 1 + pick
        else:
            sequence = self.allocated[-1 - pick % len(self.allocated)].sequence
        session = OTHER_SESSION if foreign else SESSION
        known = not foreign and any(i.sequence == sequence for i in self.allocated)
        returned = sum(1 for b in self.s.boxes if isinstance(b.content, ToolReturn)
                       and b.content.tool_call_id.sequence == sequence)
        returned += sum(1 for c in self.s.queued if isinstance(c, ToolReturn) and c.tool_call_id.sequence == sequence)
        refusal = (None if known and not returned else
                   ("unknown_tool_call", "tool return names an unknown tool call") if not known else
                   ("duplicate_tool_return", "tool call already has a return"))
        self.attempt(lambda: self.h.ret(sequence, "r", session=session, is_error=is_error), refusal)

    @rule()
    def begin(self) -> None:
        ready = self.s.mode == "idle" and (self.s.retry_ready or (not self.s.round_open and self.s.scheduled))
        submitted, generation, sequence = self.s.submitted, self.s.generation, self.s.sequence
        events = self.attempt(self.h.begin, None)
        assert bool(events) == ready
        if events:
            began = events[0]
            assert began.submitted_from == submitted and began.submitted_to == len(self.s.boxes)
            assert (self.s.generation, self.s.sequence) == (generation, sequence)
            assert self.h.begin() == []  # at most one active job

    @precondition(lambda self: self.is_running())
    @rule(text=TEXTS, n=st.sampled_from([0, 1, 1, 2, 3]), malformed=st.sampled_from([False] * 7 + [True]))
    def prepare_stage(self, text: str, n: int, malformed: bool) -> None:
        job = self.s.job
        values = calls(n) + ([MalformedCall(error="bad")] if malformed else [])
        refusal = (("malformed_tool_call", "stage contains a malformed tool call") if malformed else
                   ("stale_stage", "stale Codex inference stage") if not self.running(job) else
                   ("steer_uncommitted", "a Codex steer remains uncommitted") if self.s.pending_steer else None)
        boxes, sequence, wave = len(self.s.boxes), self.s.sequence, self.s.call_wave
        events = self.attempt(lambda: self.h.stage(job, text, values), refusal)
        if refusal is None:  # stage atomicity: text and every call, ids in order, or nothing
            assert len(self.s.boxes) == boxes + (1 if text else 0) + n
            assert self.s.sequence == sequence + n
            assert self.s.submitted == len(self.s.boxes)
            assert self.s.call_wave == (wave or n > 0)
            assert bool(events) == bool(text or n)

    @precondition(lambda self: self.is_running())
    @rule()
    def prepare_steer(self) -> None:
        job = self.s.job
        refusal = None if self.running(job) else ("stale_steer", "stale Codex inference steer")
        pending, queued, generation = self.s.pending_steer, list(self.s.queued), self.s.generation
        events = self.attempt(lambda: self.h.steer(job), refusal)
        if refusal is not None:
            return
        if pending is not None:
            assert events == [] and self.s.pending_steer == pending  # stable re-preparation
        elif not queued:
            assert events == [] and self.s.pending_steer is None and self.s.generation == generation
        else:
            token = self.s.pending_steer
            assert token.generation == generation + 1 and token.end - token.start == len(queued)
            assert [b.content for b in self.s.boxes[token.start:token.end]] == queued
            assert self.s.queued == []

    @precondition(lambda self: self.is_running() and self.s.pending_steer is None)
    @rule(n=st.integers(1, 3), returned=st.integers(0, 3))
    def tool_wave(self, n: int, returned: int) -> None:
        """A stage hands out calls; some of their results come back while the turn is still running."""
        job = self.s.job
        events = self.attempt(lambda: self.h.stage(job, "", calls(n)), None)
        ids = [b.content.tool_call_id for b in events[0].boxes]
        for tool_call_id in ids[:returned]:
            self.attempt(lambda: self.h.ret(tool_call_id.sequence, "done"), None)

    @precondition(lambda self: self.is_running() and self.s.pending_steer is None)
    @rule(arrivals=st.integers(1, 2), commit=st.sampled_from([True, True, False]))
    def steer_protocol(self, arrivals: int, commit: bool) -> None:
        """The host protocol of §5: arrivals land during the turn, prepare, validate, commit if confirmed."""
        job, start = self.s.job, len(self.s.boxes)
        for i in range(arrivals):
            self.attempt(lambda: self.h.user(f"steer{i}"), None)
        queued = len(self.s.queued)
        self.attempt(lambda: self.h.steer(job), None)
        token = self.s.pending_steer
        assert token == SteerToken(job=job, generation=self.generations[-1], start=start, end=start + queued)
        validate_steer(self.s, token)
        if commit:
            self.attempt(lambda: self.h.commit(token), None)
            assert self.s.submitted == len(self.s.boxes) and self.s.pending_steer is None

    @precondition(lambda self: self.is_running())
    @rule(tamper=st.sampled_from([None, None, None, "job", "generation", "start", "end"]))
    def commit_steer(self, tamper: str | None) -> None:
        invalid = ("invalid_steer", "stale or invalid Codex steer")
        pending = self.s.pending_steer
        if pending is None:  # nothing pending: even a token that matches the frontier is invalid
            token = SteerToken(job=self.s.last_job, generation=self.s.generation, start=self.s.submitted,
                               end=len(self.s.boxes))
            refusal: tuple[str, str] | None = invalid
        elif tamper is None:
            token, refusal = pending, None
        else:
            token = msgspec.structs.replace(pending, **{tamper: getattr(pending, tamper) + 1})
            refusal = invalid
        self.attempt(lambda: self.h.commit(token), refusal)
        if refusal is None:
            assert self.s.submitted == token.end and self.s.pending_steer is None
            self.attempt(lambda: self.h.commit(token), invalid)  # exactly once

    @precondition(lambda self: self.is_running())
    @rule(text=TEXTS, with_box=st.sampled_from([False] * 5 + [True]))
    def complete(self, text: str, with_box: bool) -> None:
        job = self.s.job
        late_call = BoxItem(value=Call(name="late", arguments=""))
        items: list[Any] = [TextItem(text=text)] + ([late_call] if with_box else [])
        refusal = None if self.running(job) else ("stale_completion", "stale Codex inference completion")
        pending, wave, queued = self.s.pending_steer, self.s.call_wave, len(self.s.queued)
        boxes, submitted, scheduled = len(self.s.boxes), self.s.submitted, self.s.scheduled
        events = self.attempt(lambda: self.h.complete(job, items=items), refusal)
        if refusal is not None:
            return
        last = events[-1]
        if pending is None and not with_box:  # terminal output is text only
            assert isinstance(last, RoundCompleted)
            assert len(self.s.boxes) == boxes + (1 if text else 0) + queued
            assert last.follow_up == (queued > 0)  # N unflushed arrivals -> exactly one follow-up
            assert self.s.scheduled == (scheduled or queued > 0)
            assert self.s.submitted == boxes + (1 if text else 0) and submitted == boxes
            assert self.s.status == ("Running" if self.s.scheduled else "Quiet")
        else:  # completion-path failures are never restartable
            assert self.s.status == "Stalled" and not self.s.restartable
            assert isinstance(last, ConversationHalted if wave else RoundStalled)
            assert not any(isinstance(b.content, AgentText) for b in self.s.boxes[boxes:])
            assert self.s.submitted == submitted and self.s.pending_steer is None

    @precondition(lambda self: self.is_running())
    @rule(restartable=st.booleans())
    def fail(self, restartable: bool) -> None:
        job = self.s.job
        live, wave, halted, submitted = self.running(job), self.s.call_wave, self.s.halted, self.s.submitted
        before = copy.deepcopy(self.s)
        events = self.attempt(lambda: self.h.fail(job, "boom", restartable), None)
        if not live:  # a stale fail is ignored
            assert events == [] and self.s == before
            return
        assert self.s.status == "Stalled" and self.s.submitted == submitted and self.s.pending_steer is None
        assert self.s.restartable == (restartable and not wave)  # the call-wave latch
        assert self.s.halted == wave and not halted  # halt: first write, only after a wave

    @precondition(lambda self: self.s.mode == "stalled")
    @rule()
    def restart(self) -> None:
        refusal = (("not_stalled", "conversation is not stalled") if self.s.mode != "stalled" else
                   ("not_restartable", "stalled conversation is not restartable") if not self.s.restartable else None)
        sequence, generation, frontier = self.s.sequence, self.s.generation, self.s.round_frontier
        self.attempt(self.h.restart, refusal)
        if refusal is None:
            assert (self.s.submitted, self.s.pending_steer, self.s.mode) == (0, None, "idle")
            assert (self.s.sequence, self.s.generation, self.s.round_frontier) == (sequence, generation, frontier)
            assert self.s.status == "Running"

    @rule(op=st.sampled_from(["stage", "steer", "complete", "fail", "restart"]), offset=STALE_OFFSETS,
          malformed=st.booleans())
    def stale_command(self, op: str, offset: int, malformed: bool) -> None:
        """Commands for a job that is not running (or a restart when not stalled) change nothing."""
        job = self.job_for(offset)
        if self.running(job):
            return
        if op == "stage":
            refusal = (("malformed_tool_call", "stage contains a malformed tool call") if malformed else
                       ("stale_stage", "stale Codex inference stage"))
            values = calls(1) + ([MalformedCall(error="bad")] if malformed else [])
            self.attempt(lambda: self.h.stage(job, "t", values), refusal)
        elif op == "steer":
            self.attempt(lambda: self.h.steer(job), ("stale_steer", "stale Codex inference steer"))
        elif op == "complete":
            self.attempt(lambda: self.h.complete(job, "t"), ("stale_completion", "stale Codex inference completion"))
        elif op == "fail":
            before = copy.deepcopy(self.s)
            assert self.attempt(lambda: self.h.fail(job, "late", True), None) == [] and self.s == before
        elif self.s.mode != "stalled":
            self.attempt(self.h.restart, ("not_stalled", "conversation is not stalled"))

    @precondition(lambda self: self.s.mode == "stalled" or self.s.call_wave or self.s.queued
                  or len(self.h.events) % 5 == 0)
    @rule(force=st.booleans())
    def recover(self, force: bool) -> None:
        generation, last_job, queued = self.s.generation, self.s.last_job, list(self.s.queued)
        self.attempt(lambda: self.h.recover(force), None)
        s = self.s
        assert (s.mode, s.submitted, s.pending_steer, s.halted, s.round_open) == ("idle", 0, None, False, False)
        assert s.sequence == max([i.sequence for i in self.allocated], default=0)
        assert (s.generation, s.last_job) == (generation, last_job)
        assert [b.content for b in s.boxes[len(s.boxes) - len(queued):]] == queued or not queued
        if force or queued:
            assert s.status == "Running"

    # -- invariants (§8.3) ------------------------------------------------------------------------------
    @invariant()
    def boxes_are_contiguous_and_agent_text_is_never_empty(self) -> None:
        assert [b.id for b in self.s.boxes] == list(range(1, len(self.s.boxes) + 1))
        assert all(b.content.text for b in self.s.boxes if isinstance(b.content, AgentText))

    @invariant()
    def tool_call_ids_are_never_reused(self) -> None:
        stored = [b.content.tool_call_id for b in self.s.boxes if isinstance(b.content, ToolCall)]
        assert stored == self.allocated  # every id handed out is stored, in allocation order
        assert all(i.session == SESSION for i in stored)
        sequences = [i.sequence for i in stored]
        assert sequences == sorted(set(sequences))  # strictly increasing across stalls, restarts, recovery
        assert self.s.sequence == (sequences[-1] if sequences else 0)

    @invariant()
    def returns_match_earlier_calls_at_most_once(self) -> None:
        seen: set[int] = set()
        for b in self.s.boxes:
            if isinstance(b.content, ToolReturn):
                call = self.s.boxes[b.content.originating_call - 1]
                assert b.content.originating_call < b.id
                assert isinstance(call.content, ToolCall) and call.content.tool_call_id == b.content.tool_call_id
                assert b.content.tool_call_id.sequence not in seen
                seen.add(b.content.tool_call_id.sequence)
        for c in self.s.queued:
            if isinstance(c, ToolReturn):
                assert c.tool_call_id.sequence not in seen
                seen.add(c.tool_call_id.sequence)

    @invariant()
    def at_most_one_active_job(self) -> None:
        assert (self.s.mode == "running") == (self.s.job is not None)
        assert self.jobs == sorted(set(self.jobs))
        if self.s.job is not None:
            assert self.s.job == self.jobs[-1] == self.s.last_job and self.s.round_open

    @invariant()
    def frontier_bounds(self) -> None:
        assert 0 <= self.s.submitted <= len(self.s.boxes)
        token = self.s.pending_steer
        if self.s.mode == "running" and token is None:
            assert self.s.submitted == len(self.s.boxes)
        if token is not None:
            assert self.s.mode == "running" and token.job == self.s.job
            assert (token.start, token.end) == (self.s.submitted, len(self.s.boxes))

    @invariant()
    def steers_are_external_and_commit_exactly_once(self) -> None:
        assert self.generations == sorted(set(self.generations))
        assert len(self.committed) == len(set(self.committed))
        for event in self.h.events:
            if isinstance(event, SteerPrepared):
                assert not any(isinstance(b.content, (AgentText, ToolCall))
                               for b in self.s.boxes[event.start:event.end])

    @invariant()
    def stall_and_restart_rules(self) -> None:
        s = self.s
        if s.restartable:  # restartable => stalled, no wave, round still open, not halted
            assert s.mode == "stalled" and not s.call_wave and s.round_open and not s.halted
        if s.halted:
            assert s.mode == "stalled" and not s.restartable and not s.round_open
        if s.mode == "stalled":
            assert s.status == "Stalled" and s.stall_message
        halts = 0
        for event in self.h.events:  # halt is first-write-wins: at most one per recovery epoch
            halts = 0 if isinstance(event, ConversationRecovered) else halts + isinstance(event, ConversationHalted)
            assert halts <= 1

    @invariant()
    def queue_exists_only_in_an_open_round(self) -> None:
        assert self.s.round_open or not self.s.queued

    @invariant()
    def replaying_the_stream_gives_the_live_state(self) -> None:
        state = None
        for event in self.stored:
            state = evolve(state, event)
        assert state == self.s


ConversationMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)
TestConversationMachine = ConversationMachine.TestCase


def _walk(seed: int, steps: int) -> ConversationMachine:
    """A seeded random walk through the machine's own rules and invariants: long histories (many rounds,
    stalls, restarts and recoveries in one stream) that short hypothesis runs rarely reach."""
    rng = random.Random(seed)
    m = ConversationMachine()
    m.some_work_to_begin(force=rng.random() < 0.5, arrivals=rng.randint(0, 2))
    moves: list[tuple[Callable[[], bool], Callable[[], None]]] = [
        (lambda: True, lambda: m.arrive(rng.choice(["system", "user", "attachment"]), rng.choice(["", "a"]))),
        (lambda: bool(m.allocated), lambda: m.arrive_return(rng.randint(0, 8), rng.random() < 0.2,
                                                            rng.random() < 0.1, rng.random() < 0.5)),
        (lambda: True, m.begin),
        (m.is_running, lambda: m.prepare_stage(rng.choice(["", "t"]), rng.choice([0, 1, 2]), rng.random() < 0.1)),
        (lambda: m.is_running() and m.s.pending_steer is None,
         lambda: m.tool_wave(rng.randint(1, 3), rng.randint(0, 3))),
        (lambda: m.is_running() and m.s.pending_steer is None,
         lambda: m.steer_protocol(rng.randint(1, 2), rng.random() < 0.7)),
        (m.is_running, m.prepare_steer),
        (m.is_running, lambda: m.commit_steer(rng.choice([None, None, "job", "generation", "start", "end"]))),
        (m.is_running, lambda: m.complete(rng.choice(["", "done"]), rng.random() < 0.15)),
        (m.is_running, lambda: m.fail(rng.random() < 0.6)),
        (lambda: m.s.mode == "stalled", m.restart),
        (lambda: True, lambda: m.stale_command(rng.choice(["stage", "steer", "complete", "fail", "restart"]),
                                               rng.choice([1, -1, -2]), rng.random() < 0.5)),
        (lambda: rng.random() < 0.15, lambda: m.recover(rng.random() < 0.5)),
    ]
    invariants = [getattr(m, name) for name in _INVARIANTS]
    for _ in range(steps):
        enabled = [move for allowed, move in moves if allowed()]
        rng.choice(enabled)()
        for check in invariants:
            check()
    return m


#: the machine's ``@invariant`` methods (hypothesis marks them with this attribute)
_INVARIANTS = sorted(name for name, value in vars(ConversationMachine).items()
                     if hasattr(value, "hypothesis_stateful_invariant"))
assert len(_INVARIANTS) == 9, _INVARIANTS


@pytest.mark.parametrize("seed", range(4))
def test_long_random_walk_keeps_every_invariant(seed):
    m = _walk(seed, 600)
    kinds = {type(e).__name__ for e in m.h.events}
    # the walk reaches every kind of event, and many tool calls across recoveries
    assert kinds >= {"StagePrepared", "SteerCommitted", "RoundCompleted", "RoundStalled", "ConversationHalted",
                     "ConversationRestarted", "ConversationRecovered", "ArrivalQueued", "SteerDiscarded"}
    assert len(m.allocated) >= 10
