"""Hypothesis drives random command sequences (every command type) through the real handler and checks,
after every step: the execution state is valid; waiting implies an empty queue; paused implies the head
is under edit, and at most one queued prompt is; the tool policy never widens; every tool call is
resolved at most once; the state rebuilt by replay from the store equals the live (in-process) state;
message ids are unique and increasing; each result says what its command did (the message ids it
inserted, a queued id still queued, a promoted id no longer queued); a worker command with a possibly
stale fence is refused exactly when the fence does not match, and then records nothing."""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timezone
from typing import Any

import hypothesis.strategies as st
import msgspec
from hypothesis import HealthCheck, settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

import commands.uow as uow_module
from commands.handler import command_from_dict, execute
from ledger.base import Emitter
from ledger.chat import events as ev
from ledger.chat.aggregate import Chat
from ledger.toolcalls.aggregate import ToolCallExecution
from ledger.chat.rules import IDLE_STATES
from ledger.chat.state import VALID_STATES, outstanding_tool_calls
from ledger.chat.views import message_rows
from ledger.errors import LedgerError
from ledger.store import ChatLedgerApp

ORG = uuid.UUID("8a6f4d2e-1b3c-4d5e-8f70-000000000001")
USERS = [uuid.UUID(int=i) for i in range(1, 4)]
TOOLS = ["read", "search", "execute", "ask_user", "pick"]
DYNAMIC = ["ask_user", "pick"]
texts = st.text(min_size=1, max_size=12)
policies = st.none() | st.lists(st.sampled_from(TOOLS), max_size=4)
prefixes = st.lists(st.builds(lambda t: {"role": "user", "visibility": "model", "parts": [{"type": "text", "text": t}]},
                              texts), max_size=2)


class LiveUnitOfWork(uow_module.UnitOfWork):
    """Hands the handler copies of the live aggregates, and keeps what a successful command produced."""

    live: dict[uuid.UUID, Any] = {}
    last: LiveUnitOfWork | None = None

    def get(self, aggregate_id):
        if aggregate_id not in self._loaded:
            if aggregate_id in self.live:
                self._loaded[aggregate_id] = copy.deepcopy(self.live[aggregate_id])
            else:
                self._loaded[aggregate_id] = self.app.load(aggregate_id)
        return self._loaded[aggregate_id]

    def commit(self):
        result = super().commit()
        LiveUnitOfWork.last = self
        return result


class ChatMachine(RuleBasedStateMachine):
    chats = Bundle("chats")

    def __init__(self) -> None:
        super().__init__()
        self.app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
        self.live: dict[uuid.UUID, Any] = {}
        self.executions: dict[uuid.UUID, Any] = {}
        LiveUnitOfWork.live = self.live
        self._saved = uow_module.UnitOfWork
        uow_module.UnitOfWork = LiveUnitOfWork  # type: ignore[misc]
        self.policies: dict[uuid.UUID, Any] = {}
        self.refusals = 0
        self.minted = 0
        for user in USERS:
            self.do(type="add_organization_member", organization_id=str(ORG), user_id=str(user))
        self.do(type="create_model_config", organization_id=str(ORG), provider="openai", model="gpt-5",
                context_limit=200_000)
        self.live.clear()  # only chats are checked here

    def teardown(self) -> None:
        uow_module.UnitOfWork = self._saved  # type: ignore[misc]
        self.app.close()

    def do(self, **command: Any) -> dict[str, Any] | None:
        LiveUnitOfWork.last = None
        chat = uuid.UUID(command["chat_id"]) if command.get("chat_id") and command["type"] != "create_chat" else None
        before = len(self.state(chat).messages) if chat in self.live else 0
        idle_before = chat in self.live and self.state(chat).execution_state in IDLE_STATES
        try:
            result = execute(self.app, command_from_dict(command))
        except LedgerError as e:
            assert e.code != "invalid_command" or any(
                why in e.message for why in ("Title", "max queue size must be positive", "require content")), e
            self.refusals += 1
            return None
        if LiveUnitOfWork.last is not None:
            self._keep(LiveUnitOfWork.last)
        if "execution_state" in result:
            s = self.state(uuid.UUID(result["chat_id"]))
            assert result["message_ids"] == list(range(before + 1, len(s.messages) + 1)), (command, result)
            queued = [q.queued_message_id for q in s.queue]
            assert result.get("queued_message_id") in queued + [None], (command, result)
            assert result.get("promoted_queued_message_id") not in queued, (command, result)
            assert (result["execution_state"], result["queue_length"]) == (s.execution_state, len(s.queue))
            if idle_before and s.status == "running":
                # an idle chat that resumes never keeps an owner (chatd TestResumeFromIdleClearsOwnership)
                assert s.worker_id is None and s.runner_id is None, (command, result)
        return result

    def _keep(self, uow: Any) -> None:
        """What a command wrote: chats into ``live``, tool-call executions into ``executions``."""
        for agg_id, agg in uow._dirty.items():
            if isinstance(agg, Chat):
                self.live[agg_id] = agg
            elif isinstance(agg, ToolCallExecution):
                self.executions[agg_id] = agg

    def state(self, chat_id: uuid.UUID) -> Any:
        return self.live[chat_id].state

    # -- rules -------------------------------------------------------------------------------------------
    @rule(target=chats, text=texts, owner=st.sampled_from(USERS), policy=policies,
          dynamic=st.just(DYNAMIC) | st.lists(st.sampled_from(DYNAMIC), unique=True),
          waiting=st.booleans(), data=st.data())
    @precondition(lambda self: len(self.live) < 4)
    def create(self, text, owner, policy, dynamic, waiting, data):
        parent = None
        if self.live and data.draw(st.booleans(), label="child"):
            parent = data.draw(st.sampled_from(sorted(self.live)), label="parent")
        self.minted += 1
        minted = uuid.UUID(int=(1 << 100) + self.minted)
        result = self.do(type="create_chat", chat_id=str(minted), organization_id=str(ORG), owner_id=str(owner), text=text,
                         hook_allowed_tools=policy, dynamic_tools=dynamic,
                         initial_status="waiting" if waiting else "running",
                         parent_chat_id=str(parent) if parent else None)
        if result is None:
            return minted  # a refused child: an id that does not exist
        chat_id = uuid.UUID(result["chat_id"])
        self.policies[chat_id] = self.state(chat_id).hook_allowed_tools
        return chat_id

    @rule(chat=chats, text=texts, interrupt=st.booleans(), policy=policies, prefix=prefixes,
          cap=st.none() | st.sampled_from([0, 1, 2, 30]))
    def send(self, chat, text, interrupt, policy, prefix, cap):
        self.do(type="send_message", chat_id=str(chat), text=text, busy_behavior="interrupt" if interrupt else "queue",
                hook_allowed_tools=policy, prefix_messages=prefix, max_queue_size=cap)

    @rule(chat=chats, message_id=st.integers(1, 30), text=texts, prefix=prefixes, policy=policies)
    def edit(self, chat, message_id, text, prefix, policy):
        self.do(type="edit_message", chat_id=str(chat), message_id=message_id, text=text, prefix_messages=prefix,
                hook_allowed_tools=policy)

    @rule(chat=chats, data=st.data(), editing=st.sampled_from([None, True, True, False]),
          text=st.none() | texts, effort=st.sampled_from([None, "low", "high"]))
    def edit_queued(self, chat, data, editing, text, effort):
        """Begin/end editing a queued prompt (mostly one that is queued, mostly the head: that is what
        pauses), replace its content (with a reasoning-effort override, which needs content)."""
        if chat in self.live and not self.state(chat).queue and self.state(chat).status in (
                "running", "interrupting", "requires_action"):
            self.do(type="send_message", chat_id=str(chat), text="to edit")  # something to edit
        ids = [q.queued_message_id for q in self.state(chat).queue] if chat in self.live else []
        qid = data.draw(st.sampled_from(ids[:1] * 3 + ids + [99]), label="qid")
        self.do(type="edit_queued_message", chat_id=str(chat), queued_message_id=qid, editing=editing, text=text,
                reasoning_effort=effort if text is not None else None)

    @rule(chat=chats, reason=st.none() | texts)
    def reconcile(self, chat, reason):
        """Refused from every valid state; a chat an imported event left Invalid is reconciled at once (so
        the invariants, checked after the rule, see a valid state): error, unarchived, queue kept."""
        self.do(type="reconcile_invalid_state", chat_id=str(chat), cancellation_reason=reason)
        if chat not in self.live:
            return
        agg = copy.deepcopy(self.live[chat])
        s = agg.state
        em = Emitter(agg.id, agg.version, datetime.now(timezone.utc))
        queue = [q.queued_message_id for q in s.queue]
        if queue:
            event = em.emit(ev.ChatResumed, cause="edit_ended", status="waiting")  # waiting with rows
        else:
            event = em.emit(ev.ChatPaused, queued_message_id=1)  # paused without rows
        agg.record([event])
        self.app.save(agg)
        self.live[chat] = agg
        assert agg.state.execution_state == "Invalid"
        result = self.do(type="reconcile_invalid_state", chat_id=str(chat), cancellation_reason=reason)
        assert result is not None and result["execution_state"] in ("E0", "E1", "E1P")
        s = self.state(chat)
        assert [q.queued_message_id for q in s.queue] == queue and not s.archived and s.status == "error"

    @rule(chat=chats, qid=st.integers(1, 8), promote=st.booleans())
    def queued(self, chat, qid, promote):
        self.do(type="promote_queued_message" if promote else "delete_queued_message", chat_id=str(chat),
                queued_message_id=qid)

    @rule(chat=chats, reason=st.none() | texts)
    def interrupt(self, chat, reason):
        self.do(type="interrupt", chat_id=str(chat), reason=reason)

    @rule(chat=chats, calls=st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(DYNAMIC + TOOLS)),
                                     max_size=3, unique_by=lambda c: c[0]), text=texts)
    def assistant_step(self, chat, calls, text):
        parts = [{"type": "text", "text": text}] + [
            {"type": "tool-call", "tool_call_id": cid, "tool_name": name, "args": {"n": i}}
            for i, (cid, name) in enumerate(calls)]
        self.do(type="commit_step", chat_id=str(chat), messages=[{"role": "assistant", "parts": parts}])

    @rule(chat=chats, data=st.data(), consume=st.booleans())
    def tool_results_step(self, chat, data, consume):
        if chat not in self.live:
            return
        ids = [c.tool_call_id for c in outstanding_tool_calls(self.state(chat))] + ["c1", "zz"]
        chosen = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3), label="results")
        self.do(type="commit_step", chat_id=str(chat), consume_compaction_request=consume, messages=[
            {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": cid, "tool_name": "read", "result": 1}]}
            for cid in chosen])

    @rule(chat=chats, data=st.data())
    def complete_requires_action(self, chat, data):
        if chat not in self.live:
            return
        pending = [c.tool_call_id for c in outstanding_tool_calls(self.state(chat), dynamic_only=True)]
        results = data.draw(st.sampled_from([pending, pending[:1], pending + ["zz"], pending + pending[:1]]),
                            label="results")
        output = data.draw(st.sampled_from(['"ok"', "{bad"]), label="output")
        suffix = data.draw(prefixes, label="suffix")
        self.do(type="complete_requires_action", chat_id=str(chat),
                results=[{"tool_call_id": r, "output": output} for r in results], suffix_messages=suffix)

    @rule(chat=chats, kind=st.sampled_from(["finish_turn", "finish_error", "finish_interruption"]),
          status=st.sampled_from(["succeeded", "failed", "canceled"]), valid=st.booleans())
    def finish_with_receipt(self, chat, kind, status, valid):
        """A turn's end with a structured-output receipt (valid or not: an invalid one records nothing)."""
        outcome = {"value": None} if status == "succeeded" else {
            "error": {"code": "not_produced" if status == "failed" else "superseded", "message": "x"}}
        part = {"type": "structured-output-outcome", "request_id": str(uuid.uuid4()), "status": status, **outcome}
        message = {"role": "assistant", "visibility": "user" if valid else "both",
                   "parts": [{"type": "text", "text": "r"}, part]}
        extra = {"error": {"message": "boom"}} if kind == "finish_error" else {}
        version = self.state(chat).version if chat in self.live else None
        try:
            execute(self.app, command_from_dict({"type": kind, "chat_id": str(chat), "terminal_messages": [message],
                                                 **extra}))
        except LedgerError as e:
            if chat in self.live:
                assert self.app.load(chat).version == version
            return
        assert valid
        if LiveUnitOfWork.last is not None:
            self._keep(LiveUnitOfWork.last)

    @rule(chat=chats, partial=st.booleans())
    def finish_interruption(self, chat, partial):
        messages = []
        if partial and chat in self.live:
            messages = [{"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": c.tool_call_id,
                                                    "tool_name": c.tool_name, "result": "interrupted", "is_error": True}]}
                        for c in outstanding_tool_calls(self.state(chat))]
        self.do(type="finish_interruption", chat_id=str(chat), partial_messages=messages)

    @rule(chat=chats, text=texts)
    def progress(self, chat, text):
        """What a well-behaved runner or user would do next, so runs reach deep states."""
        if chat not in self.live:
            return
        s = self.state(chat)
        st_ = s.execution_state
        pending = outstanding_tool_calls(s)
        dynamic = [c for c in pending if c.tool_name in s.dynamic_tools]
        if st_ in ("R1P", "I1P") and len(text) % 2:
            # the turn ends at the head under edit: paused
            self.do(type="finish_turn" if st_ == "R1P" else "interrupt", chat_id=str(chat))
        elif st_[0] == "R" and dynamic and len(dynamic) == len(pending):
            self.do(type="enter_requires_action", chat_id=str(chat))
        elif st_[0] == "R" and pending:
            self.do(type="commit_step", chat_id=str(chat), messages=[
                {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": c.tool_call_id,
                                            "tool_name": c.tool_name, "result": text}]}
                for c in pending if c.tool_name not in s.dynamic_tools])
        elif st_[0] == "R" and s.dynamic_tools and len(text) % 2:
            self.do(type="commit_step", chat_id=str(chat), messages=[{"role": "assistant", "parts": [
                {"type": "tool-call", "tool_call_id": f"d{s.version}", "tool_name": s.dynamic_tools[0], "args": {}}]}])
        elif st_[0] == "R":
            self.do(type="finish_turn", chat_id=str(chat))
        elif st_[0] == "A":
            self.do(type="complete_requires_action", chat_id=str(chat),
                    results=[{"tool_call_id": c.tool_call_id, "output": '"done"'} for c in dynamic])
        elif st_[0] == "I":
            self.finish_interruption(chat, True)
        elif st_ == "P":
            self.do(type="edit_queued_message", chat_id=str(chat), queued_message_id=s.queue[0].queued_message_id,
                    editing=False, text=text if len(text) % 2 else None)
        else:
            self.do(type="send_message", chat_id=str(chat), text=text)

    @rule(chat=chats, message=texts)
    def errors(self, chat, message):
        self.do(type="finish_error", chat_id=str(chat), error={"message": message})
        self.do(type="fail_idle", chat_id=str(chat), error=message)

    @rule(chat=chats)
    def retry_state(self, chat):
        self.do(type="record_retry_state", chat_id=str(chat), retry_state={"attempt": 1})

    @rule(chat=chats, archived=st.booleans())
    def archive(self, chat, archived):
        self.do(type="set_archived", chat_id=str(chat), archived=archived)

    @rule(chat=chats, prefix=prefixes)
    def end(self, chat, prefix):
        self.do(type="end_chat", chat_id=str(chat), prefix_messages=prefix)

    @rule(chat=chats, command=st.sampled_from([
        ("set_plan_mode", {"plan_mode": "plan"}), ("set_plan_mode", {"plan_mode": None}), ("pin_chat", {}),
        ("unpin_chat", {}), ("share_chat", {}), ("unshare_chat", {}), ("set_labels", {"labels": {"k": "v"}}),
        ("set_workspace_binding", {"workspace_id": str(uuid.UUID(int=7))}), ("set_title", {"title": "t",
                                                                                          "source": "generated"})]))
    def metadata(self, chat, command):
        kind, fields = command
        before = self.state(chat) if chat in self.live else None
        frozen = (before.execution_state, len(before.queue), before.history_version) if before else None
        self.do(type=kind, chat_id=str(chat), **fields)
        if before is not None:
            after = self.state(chat)
            assert (after.execution_state, len(after.queue), after.history_version) == frozen, kind

    @rule(chat=chats, background=st.booleans(), process=st.booleans())
    def run_tool(self, chat, background, process):
        """A runner claims the first open local call of the latest assistant message (and reports its
        process): later cancellations and edits map it."""
        if chat not in self.live:
            return
        s = self.state(chat)
        calls = [c for c in outstanding_tool_calls(s) if c.tool_name not in s.dynamic_tools]
        if not calls:
            return
        amid = next(m.message_id for m in reversed(s.messages) if any(c.tool_call_id == calls[0].tool_call_id
                                                                      for c in m.calls))
        base = {"chat_id": str(chat), "assistant_message_id": amid, "tool_call_id": calls[0].tool_call_id}
        for kind, fields in (("claim_tool_call", {"tool_name": calls[0].tool_name, "background": background}),
                             ("record_tool_call_process", {"claim_epoch": 1, "process_id": "p"} if process else None)):
            if fields is None:
                continue
            LiveUnitOfWork.last = None
            try:
                execute(self.app, command_from_dict({"type": kind, **base, **fields}))
            except LedgerError:
                return
            if LiveUnitOfWork.last is not None:
                self._keep(LiveUnitOfWork.last)

    @rule(queue=st.sampled_from([0, 1, 3]), prompt=st.sampled_from([0, 1, 4]))
    def limits(self, queue, prompt):
        """The deployment's limits change under the chats (decisions record the values they applied)."""
        LiveUnitOfWork.last = None
        execute(self.app, command_from_dict({"type": "set_deployment_settings", "limits": {
            "max_queued_messages_per_chat": queue, "max_prompt_bytes": prompt}}))

    @invariant()
    def execution_ledger(self):
        """Replay equals live for every tool-call execution; a detached run is a background run with a
        process; a run the chat gave up on carries when (``result_committed_at``)."""
        for eid, agg in self.executions.items():
            replayed = self.app.load(eid)
            assert replayed.state == agg.state
            s = agg.state
            if s.execution_status == "detached":
                assert s.background and s.process_id
            if s.execution_status in ("detached", "cancel_requested") and not s.canceled:
                assert s.result_committed_at is not None

    @rule(chat=chats, worker=st.sampled_from(USERS))
    def acquire(self, chat, worker):
        self.do(type="acquire", chat_id=str(chat), worker_id=str(worker), runner_id=str(uuid.uuid4()))

    @rule(chat=chats, title=st.text(max_size=5))
    def title(self, chat, title):
        self.do(type="set_title", chat_id=str(chat), title=title)

    # -- invariants -----------------------------------------------------------------------------------------
    @invariant()
    def execution_states_are_valid(self):
        for chat_id, agg in self.live.items():
            s = agg.state
            assert s.execution_state in VALID_STATES, (chat_id, s.status, s.queue, s.archived)
            if s.status == "waiting":
                assert not s.queue
            if s.status == "paused":
                assert s.queue and s.queue[0].editing_since is not None and not s.archived
            assert sum(q.editing_since is not None for q in s.queue) <= 1

    @invariant()
    def policy_never_widens(self):
        for chat_id, agg in self.live.items():
            before, now = self.policies.get(chat_id), agg.state.hook_allowed_tools
            if before is not None:
                assert now is not None and set(now) <= set(before), (before, now)
            self.policies[chat_id] = now

    @rule(chat=chats, kind=st.sampled_from(["commit_step", "finish_turn", "finish_error", "finish_interruption",
                                            "enter_requires_action", "record_retry_state", "record_generation_attempt"]),
          runner=st.sampled_from(["own", "other", None]), history=st.sampled_from([None, 0, -1, 1]),
          attempt=st.sampled_from([None, 0, -1, 1]))
    def fenced_worker_command(self, chat, kind, runner, history, attempt):
        """A worker command with a fence that may be stale: refused with fence_mismatch exactly when a given
        field (or the status the command needs) does not match, and then nothing is recorded; accepted
        otherwise (when the transition allows it), recording the fence it committed under."""
        if chat not in self.live:
            return
        s = self.state(chat)
        fence: dict[str, Any] = {}
        if runner is not None:
            fence["runner_id"] = str(s.runner_id) if runner == "own" and s.runner_id else str(uuid.UUID(int=99))
        if history is not None:
            fence["history_version"] = max(s.history_version + history, 0)
        if attempt is not None:
            fence["generation_attempt"] = max(s.generation_attempt + attempt, 0)
        fields = {"commit_step": {"messages": [{"role": "assistant", "parts": [{"type": "text", "text": "s"}]}]},
                  "finish_error": {"error": {"message": "boom"}},
                  "record_retry_state": {"retry_state": {"attempt": s.generation_attempt}}}.get(kind, {})
        needs = "interrupting" if kind == "finish_interruption" else "running"
        mismatch = (("runner_id" in fence and (s.worker_id is None or fence["runner_id"] != str(s.runner_id)))
                    or s.status != needs or s.archived
                    or fence.get("history_version", s.history_version) != s.history_version
                    or fence.get("generation_attempt", s.generation_attempt) != s.generation_attempt)
        version = self.live[chat].version
        try:
            execute(self.app, command_from_dict({"type": kind, "chat_id": str(chat), "fence": fence, **fields}))
        except LedgerError as e:
            assert (e.code == "fence_mismatch") == mismatch, (kind, fence, e)
            assert self.app.load(chat).version == version  # nothing recorded
            return
        assert not mismatch, (kind, fence)
        if LiveUnitOfWork.last is not None:
            self._keep(LiveUnitOfWork.last)
        recorded = next(e for e in self.app.stream(chat, gt=version) if hasattr(e, "fence"))
        assert msgspec.to_builtins(recorded.fence) == fence, (kind, recorded)
        if kind != "record_generation_attempt":  # (its own field is the new attempt's number)
            assert (recorded.generation_attempt, recorded.runner_id) == (s.generation_attempt, s.runner_id)

    @invariant()
    def replay_equals_live(self):
        for chat_id, agg in self.live.items():
            replayed = self.app.load(chat_id)
            assert replayed.version == agg.version
            assert replayed.state == agg.state

    @invariant()
    def message_ids_and_tool_results(self):
        for chat_id in self.live:
            rows = message_rows(self.app.stream(chat_id))
            ids = [r["message_id"] for r in rows]
            assert ids == list(range(1, len(ids) + 1))
            answered: dict[str, int] = {}
            calls: set[str] = set()
            for r in rows:
                if r["deleted"] or r["compressed"] or _receipt(r):
                    continue
                if r["role"] == "assistant":
                    calls = {p["tool_call_id"] for p in r["parts"] if p["type"] == "tool-call"}
                    answered = {}
                for p in r["parts"]:
                    if p["type"] == "tool-result" and p["tool_call_id"] in calls:
                        answered[p["tool_call_id"]] = answered.get(p["tool_call_id"], 0) + 1
                        assert answered[p["tool_call_id"]] == 1, (chat_id, p["tool_call_id"])


    @invariant()
    def a_receipt_never_hides_an_outstanding_call(self):
        """The open calls are those of the latest assistant message that is not a receipt, read from the
        recorded rows, whatever receipts came after it."""
        for chat_id, agg in self.live.items():
            rows = [r for r in message_rows(self.app.stream(chat_id)) if not r["deleted"] and not r["compressed"]]
            latest = max((i for i, r in enumerate(rows) if r["role"] == "assistant" and not _receipt(r)), default=None)
            expected: set[str] = set()
            if latest is not None:
                expected = {p["tool_call_id"] for p in rows[latest]["parts"]
                            if p["type"] == "tool-call" and not p.get("provider_executed")}
                for r in rows[latest:]:
                    if r["role"] in ("tool", "assistant"):
                        expected -= {p["tool_call_id"] for p in r["parts"] if p["type"] == "tool-result"}
            assert {c.tool_call_id for c in outstanding_tool_calls(agg.state)} == expected, chat_id


def _receipt(row: dict[str, Any]) -> bool:
    return row["role"] == "assistant" and row["visibility"] == "user" and any(
        p["type"] == "structured-output-outcome" for p in row["parts"])


def _simple_rule(kind: str) -> Any:
    def step(self: ChatMachine, chat: uuid.UUID) -> None:
        self.do(type=kind, chat_id=str(chat))

    step.__name__ = kind
    return rule(chat=ChatMachine.chats)(step)


# One rule each, so every command type is drawn as often as the others.
for _kind in ("request_compaction", "clear_context", "enter_requires_action", "finish_turn", "abandon",
              "record_generation_attempt", "cancel_requires_action"):
    setattr(ChatMachine, _kind, _simple_rule(_kind))

ChatMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=80, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestChatMachine = ChatMachine.TestCase
