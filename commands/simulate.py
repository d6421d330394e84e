"""``chat-ledger simulate``: a scripted runner that drives chats only through the real commands.

A deterministic fake model (one seeded ``random.Random``; no decision reads the clock) plays the model,
the worker and the users of ``--chats N`` chats in ``--orgs K`` organizations:

* **setup** (catalog and deployment commands): each organization gets members, a default model, a
  ``legacy`` model some chats pick explicitly and that is disabled half-way through the run (generation
  and queue promotions then fall back to the default — recorded — and new explicit picks are refused), a
  model of a disabled provider (explicit picks refused), a compaction override with a smaller context
  limit in every third organization, an advisor override in the first; the deployment enables the advisor
  (2 uses per turn).
* **the worker**: at each step of a running chat it asks the decision procedure what to do next —
  ``commands.cli_generation.decide_chat``, which is what ``chat-ledger next-action`` prints — and does
  exactly that: ``generate_assistant`` (``record_generation_attempt``; a provider error is retried on
  the reference schedule with ``record_retry_state`` and ends in ``finish_error`` after the last
  attempt; else ``commit_step`` of an assistant message with text, tool calls and usage),
  ``execute_local_tools`` (``claim_tool_call`` / ``record_tool_call_response`` / ``commit_step``; a
  repeated claim returns the saved response; a batch breaking the advisor's exclusive-tool rule commits
  the error results and runs nothing), ``enter_requires_action``, ``compact`` (a summary ``commit_step``,
  consuming a manual request), ``finish_turn``, ``error`` (``finish_error``). An owned chat interrupted
  while its tools run cancels them (``cancel_tool_call``: the truthful result) and ``finish_interruption``.
* **the users**, interleaved at random between worker steps: new turns with hook prefixes and tool
  policies, queued prompts (deleted, promoted), interrupts (owned and unowned), edits, manual compaction,
  ``complete_requires_action`` / ``cancel_requires_action``, subagent (child) chats, archiving and
  ``end_chat``, and a few commands the ledger must refuse.

Chats are interleaved (a random active chat steps each time), so their notifications interleave. Every
decision is recorded (``Simulation.decisions``: chat, stream version, action, calls, and the commands the
worker then ran) so ``next-action`` on the chat at that version can be checked against it
(``check_decisions``); ``check_chats`` checks the foundation invariants on every simulated chat.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from typing import Any, Iterable
from uuid import UUID

import click

from commands.cli import Ctx, emit_json, main, pass_ctx
from commands.cli_generation import decide_chat
from commands.handler import command_from_dict, execute
from ledger.chat.aggregate import Chat
from ledger.chat.state import VALID_STATES, ChatState, active, has_compactable_history, outstanding_tool_calls
from ledger.chat.views import status_values, json_row, tool_call_execution_ids
from ledger.errors import LedgerError
from ledger.policy.generation import NextAction, unresolved_calls
from ledger.policy.retry import retry_decision
from ledger.policy.tools import ADVISOR, advisor_result
from ledger.store import redact
from ledger.toolcalls import events as tev

NAMESPACE = UUID("5f3c2a8e-9b1d-4e6f-a7c0-51a1a7e5c0de")
LOCAL_TOOLS = ("read_file", "execute", "search", "write_file")
DYNAMIC_TOOLS = ("ask_user",)
USERS_PER_ORG = 4
#: the first command the worker runs for each action (what "did what next-action said" means)
FIRST_COMMAND = {
    "generate_assistant": ("record_generation_attempt",),
    "execute_local_tools": ("claim_tool_call", "commit_step"),
    "enter_requires_action": ("enter_requires_action",),
    "compact": ("commit_step",),
    "finish_turn": ("finish_turn",),
    "error": ("finish_error",),
}
class SimChat:
    __slots__ = ("chat_id", "org", "owner", "parent", "owned", "turns_left", "tokens", "seq", "failing",
                 "children", "ticks", "done", "over_limit")

    def __init__(self, chat_id: str, org: dict[str, Any], owner: str, parent: SimChat | None, owned: bool,
                 turns: int) -> None:
        self.chat_id, self.org, self.owner, self.parent, self.owned = chat_id, org, owner, parent, owned
        self.turns_left = turns
        self.tokens = 0
        self.seq = 0
        self.failing: str | None = None
        self.children: list[SimChat] = []
        self.ticks = 0
        self.done = False
        self.over_limit = False


class Simulation:
    """One run: ``run()`` drives the chats; ``summary()`` reports it."""

    def __init__(self, app: Any, *, chats: int, seed: int, orgs: int = 3, salt: str | None = None,
                 concurrency: int = 32, max_ticks: int = 400, turns: int = 4, steps: int = 6) -> None:
        self.app = app
        self.n_chats = chats
        self.seed = seed
        self.n_orgs = max(orgs, 1)
        self.rng = random.Random(seed)
        self.salt = salt if salt is not None else uuid.uuid4().hex  # ids only; decisions never read it
        self.concurrency = concurrency
        self.max_ticks = max_ticks
        self.turns = max(turns, 1)  # at most this many user turns per chat (subagents: half)
        self.steps = max(steps, 1)  # the fake model answers without tools after this many steps of a turn
        self.orgs: list[dict[str, Any]] = []
        self.chats: list[SimChat] = []
        self.created = 0
        self.commands = 0
        self.log: list[tuple[str, str]] = []  # (command type, "ok" | refusal code), in order
        self.refusals: Counter[str] = Counter()
        self.unexpected: list[dict[str, Any]] = []
        self.anomalies: list[str] = []
        self.decisions: list[dict[str, Any]] = []
        self.stats: Counter[str] = Counter()
        self.seconds = 0.0
        self.events = 0
        self._did: list[str] | None = None
        self.legacy_phase_done = False

    # -- plumbing ------------------------------------------------------------------------------------

    def uid(self, *parts: Any) -> str:
        return str(uuid.uuid5(NAMESPACE, "/".join([self.salt, *map(str, parts)])))

    def cmd(self, ctype: str, expect: Iterable[str] = (), **fields: Any) -> dict[str, Any] | None:
        """Run one command; a refusal returns None (counted by code; unexpected unless its code is in
        ``expect``: the users' deliberate mistakes)."""
        self.commands += 1
        if self._did is not None:
            self._did.append(ctype)
        try:
            result = execute(self.app, command_from_dict({"type": ctype, **fields}))
        except LedgerError as e:
            self.refusals[e.code] += 1
            self.log.append((ctype, e.code))
            if e.code not in expect:
                self.unexpected.append({"type": ctype, "code": e.code, "message": e.message,
                                        "chat_id": fields.get("chat_id")})
            return None
        self.log.append((ctype, "ok"))
        return result

    def state(self, c: SimChat) -> ChatState:
        agg = self.app.load(UUID(c.chat_id))
        assert isinstance(agg, Chat)
        return agg.state

    # -- setup ---------------------------------------------------------------------------------------

    def setup(self) -> None:
        rng = self.rng
        for k in range(self.n_orgs):
            org_id = self.uid("org", k)
            limit = rng.choice([32_000, 64_000, 200_000])
            org = {"id": org_id, "k": k, "users": [self.uid("user", k, i) for i in range(USERS_PER_ORG)],
                   "default": self.uid("model", k, "default"), "legacy": self.uid("model", k, "legacy"),
                   "gated": self.uid("model", k, "gated"), "compaction": None, "limit": limit,
                   "legacy_disabled": False, "disables_legacy": k % 2 == 0}
            for user in org["users"]:
                self.cmd("add_organization_member", organization_id=org_id, user_id=user)
            self.cmd("create_model_config", organization_id=org_id, model_config_id=org["default"],
                     provider="anthropic", model="claude-sonnet-4-5", context_limit=limit, is_default=True)
            # same limit and threshold as the default: a fallback changes the model, not the decisions
            self.cmd("create_model_config", organization_id=org_id, model_config_id=org["legacy"],
                     provider="openai", model="gpt-4.1", context_limit=limit)
            self.cmd("create_model_config", organization_id=org_id, model_config_id=org["gated"],
                     provider="google", model="gemini-2.5-pro", context_limit=limit)
            self.cmd("set_provider", organization_id=org_id, provider="google", enabled=False)
            if k % 3 == 0:
                org["compaction"] = self.uid("model", k, "compaction")
                self.cmd("create_model_config", organization_id=org_id, model_config_id=org["compaction"],
                         provider="anthropic", model="claude-haiku-4-5", context_limit=limit * 3 // 5)
                self.cmd("set_admin_model_override", organization_id=org_id, context="compaction",
                         model_config_id=org["compaction"])
            if k == 0:
                self.cmd("set_admin_model_override", organization_id=org_id, context="advisor",
                         model_config_id=org["default"])
            self.orgs.append(org)
        self.cmd("set_deployment_settings", advisor_enabled=True, advisor_max_uses_per_turn=2)

    # -- chat lifecycle ------------------------------------------------------------------------------

    def create_chat(self, parent: SimChat | None = None) -> SimChat | None:
        rng = self.rng
        org = parent.org if parent is not None else rng.choice(self.orgs)
        owner = parent.owner if parent is not None else rng.choice(org["users"])
        n = self.created
        self.created += 1
        fields: dict[str, Any] = {"organization_id": org["id"], "owner_id": owner,
                                  "chat_id": self.uid("chat", n), "text": f"task {n}: fix the build"}
        if parent is not None:
            fields["parent_chat_id"] = parent.chat_id
            fields["text"] = f"subagent task {n}: investigate the failing test"
        r = rng.random()
        if r < 0.04:  # a model of a disabled provider: refused, then the user picks the default
            self.cmd("create_chat", expect=("model_config_provider_disabled",), **fields, model_config_id=org["gated"])
        elif r < 0.25:
            if org["legacy_disabled"]:
                self.cmd("create_chat", expect=("model_config_invalid",), **fields,
                         model_config_id=org["legacy"])  # refused: disabled
            else:
                fields["model_config_id"] = org["legacy"]
        if rng.random() < 0.5:
            fields["dynamic_tools"] = list(DYNAMIC_TOOLS)
        if rng.random() < 0.2:
            fields["hook_allowed_tools"] = rng.sample(LOCAL_TOOLS + DYNAMIC_TOOLS, rng.randint(1, 3))
        result = self.cmd("create_chat", **fields)
        if result is None:
            return None
        c = SimChat(result["chat_id"], org, owner, parent, owned=rng.random() < 0.6,
                    turns=rng.randint(1, self.turns) if parent is None else rng.randint(1, max(self.turns // 2, 1)))
        if parent is not None:
            parent.children.append(c)
            self.stats["child_chats"] += 1
        self.chats.append(c)
        self.stats["chats"] += 1
        return c

    def run(self) -> Simulation:
        t0 = time.perf_counter()
        head0 = self.app.head()
        self.setup()
        active_chats: list[SimChat] = []
        disable_at = self.n_chats // 2
        roots = self.n_chats - self.n_chats // 6  # the rest is left for subagent chats
        while self.created < self.n_chats or active_chats:
            while (self.created < self.n_chats and len(active_chats) < self.concurrency
                   and (self.created - self.stats["child_chats"] < roots or not active_chats)):
                if self.created >= disable_at and not self.legacy_phase_done:
                    # half-way: the legacy model is disabled in every other organization (fallbacks)
                    self.legacy_phase_done = True
                    for org in self.orgs:
                        if org["disables_legacy"]:
                            self.cmd("update_model_config", organization_id=org["id"],
                                     model_config_id=org["legacy"], enabled=False)
                            org["legacy_disabled"] = True
                c = self.create_chat()
                if c is not None:
                    active_chats.append(c)
            if not active_chats:
                continue
            c = self.rng.choice(active_chats)
            self.tick(c, active_chats)
            if c.done:
                active_chats.remove(c)
        self.seconds = time.perf_counter() - t0
        self.events = self.app.head() - head0
        return self

    def tick(self, c: SimChat, active_chats: list[SimChat]) -> None:
        c.ticks += 1
        # one replay per tick: the chat and what next-action says about it (acted on only when running)
        state, na, info = decide_chat(self.app, UUID(c.chat_id))
        if state.archived:
            c.done = True
            return
        if c.ticks > self.max_ticks:  # a safety net; the mix ends chats well before
            self.stats["chats_cut_off"] += 1
            self.cmd("end_chat", chat_id=c.chat_id)
            c.done = True
            return
        status = state.status
        rng = self.rng
        if status == "running":
            if rng.random() < 0.12:
                self.user_while_running(c, state)
            else:
                self.worker_step(c, state, na, info)
        elif status == "interrupting":
            self.worker_finish_interruption(c, state)
        elif status == "requires_action":
            self.user_requires_action(c, state)
        elif status == "waiting":
            self.user_waiting(c, state, active_chats)
        elif status == "error":
            self.user_error(c, state)

    # -- the worker ----------------------------------------------------------------------------------

    def worker_step(self, c: SimChat, state: ChatState, na: NextAction, info: dict[str, Any]) -> None:
        """Do what the decision procedure says for the chat as it is at ``state.version``."""
        if c.owned and state.worker_id is None:  # acquiring changes nothing the decision reads
            self.cmd("acquire", chat_id=c.chat_id, worker_id=self.uid("worker", c.chat_id),
                     runner_id=self.uid("runner", c.chat_id))
        record = {"chat_id": c.chat_id, "version": state.version, "action": na.action,
                  "finish_reason": na.finish_reason, "forced": na.forced,
                  "calls": [x.tool_call_id for x in na.calls],
                  "pending_dynamic": [x.tool_call_id for x in na.pending_dynamic],
                  "policy_rejected": bool(na.policy_results), "did": []}
        self.decisions.append(record)
        self.stats[f"action:{na.action}"] += 1
        self._did = record["did"]
        try:
            if na.action == "generate_assistant":
                self.generate(c, state, na, info)
            elif na.action == "execute_local_tools":
                self.run_tools(c, state, na)
            elif na.action == "enter_requires_action":
                self.cmd("enter_requires_action", chat_id=c.chat_id)
            elif na.action == "compact":
                self.compact(c, state, na, info)
            elif na.action == "finish_turn":
                self.cmd("finish_turn", chat_id=c.chat_id)
            elif na.action == "error":
                assert na.error is not None
                self.stats["still_over_limit_errors"] += 1
                self.cmd("finish_error", chat_id=c.chat_id, error={"message": na.error.message, "kind": na.error.kind})
        finally:
            self._did = None

    def generate(self, c: SimChat, state: ChatState, na: NextAction, info: dict[str, Any]) -> None:
        rng = self.rng
        r = self.cmd("record_generation_attempt", chat_id=c.chat_id)
        if r is None:
            return
        attempt = r["generation_attempt"]
        if c.failing is None and rng.random() < 0.04:
            c.failing = rng.choice(["transient"] * 14 + ["persistent", "fatal"])
        if c.failing is not None:
            self.stats["provider_errors"] += 1
            if c.failing == "fatal":
                c.failing = None
                self.cmd("finish_error", chat_id=c.chat_id,
                         error={"message": "provider rejected the request: invalid_request_error", "kind": "generic"})
                return
            retry_after = rng.choice([None, None, None, 2.0, 45.0])
            decision = retry_decision(attempt, retry_after)
            if decision.retry:
                self.stats["retries"] += 1
                self.cmd("record_retry_state", chat_id=c.chat_id, retry_state={
                    "attempt": attempt, "delay_seconds": decision.delay, "retry_after": retry_after,
                    "error": "the model is overloaded", "kind": "overloaded"})
                if c.failing == "transient" and rng.random() < 0.6:
                    c.failing = None
                return
            c.failing = None
            self.stats["retries_exhausted"] += 1
            self.cmd("finish_error", chat_id=c.chat_id, error={
                "message": f"the model is overloaded (gave up after {attempt} attempts)", "kind": "overloaded"})
            return
        settings = info["settings"]
        limit = settings["compaction_context_limit"] or settings["context_limit"] or c.org["limit"]
        c.tokens += int(limit * rng.uniform(0.02, 0.12))
        if c.over_limit:
            c.tokens = int(settings["context_limit"] * 0.97)
            c.over_limit = False
        usage = {"input_tokens": c.tokens, "output_tokens": rng.randint(40, 900)}
        allowed = na.allowed_tools
        local = [t for t in LOCAL_TOOLS if allowed is None or t in allowed]
        dynamic = [t for t in state.dynamic_tools if allowed is None or t in allowed]
        parts: list[dict[str, Any]] = [{"type": "text", "text": f"step {na.step_count + 1}"}]
        final = na.step_count >= self.steps or rng.random() < 0.3 or not (local or dynamic or na.advisor.tool_offered)
        if not final:
            names: list[str] = []
            if na.advisor.tool_offered and rng.random() < 0.2:
                names.append(ADVISOR)
                if rng.random() < 0.35 and (local or dynamic):
                    names.extend(rng.sample(local + dynamic, 1))  # the exclusive-tool rule rejects this batch
            else:
                pool = local * 3 + dynamic
                names = [rng.choice(pool) for _ in range(rng.choice([1, 1, 1, 2, 2, 3]))] if pool else [ADVISOR]
            for name in names:
                c.seq += 1
                parts.append({"type": "tool-call", "tool_call_id": f"call_{c.seq}", "tool_name": name,
                              "args": {"n": c.seq}})
            if rng.random() < 0.05:  # a provider-executed call: never the worker's to run
                c.seq += 1
                parts.append({"type": "tool-call", "tool_call_id": f"web_{c.seq}", "tool_name": "web_search",
                              "args": {"q": "docs"}, "provider_executed": True})
        model = settings["model"]["model_config_id"] if settings.get("model") else None
        message: dict[str, Any] = {"role": "assistant", "parts": parts, "usage": usage,
                                   "context_limit": settings["context_limit"]}
        if model:
            message["model_config_id"] = model
        self.cmd("commit_step", chat_id=c.chat_id, messages=[message])

    def run_tools(self, c: SimChat, state: ChatState, na: NextAction) -> None:
        rng = self.rng
        amid = next(m.message_id for m in reversed(state.messages) if m.role == "assistant" and active(m))
        if na.policy_results:
            self.stats["exclusive_batches_rejected"] += 1
            self.cmd("commit_step", chat_id=c.chat_id, messages=[
                {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": p.tool_call_id,
                                            "tool_name": p.tool_name, "result": p.result, "is_error": True}]}
                for p in na.policy_results])
            return
        results: list[dict[str, Any]] = []
        remaining_advice = na.advisor.remaining_uses
        for i, call in enumerate(na.calls):
            ids = dict(chat_id=c.chat_id, assistant_message_id=amid, tool_call_id=call.tool_call_id)
            claim = self.cmd("claim_tool_call", **ids, tool_name=call.tool_name)
            if claim is None:
                return
            self.stats[f"claim:{claim['outcome']}"] += 1
            if claim["outcome"] != "run":
                self.anomalies.append(f"{c.chat_id}: first claim of {call.tool_call_id} was {claim['outcome']}")
            if c.owned and rng.random() < 0.03:
                # the user interrupts while this tool runs: the worker cancels the batch truthfully
                self.stats["interrupts_while_running"] += 1
                if self.cmd("interrupt", chat_id=c.chat_id) is not None:
                    self.worker_finish_interruption(c, self.state(c), amid=amid)
                return
            if call.tool_name == ADVISOR:
                if rng.random() < 0.1:
                    body = advisor_result(remaining_advice, error="advisor model timed out")
                else:
                    body = advisor_result(remaining_advice, advice="Check the lockfile first.",
                                          advisor_model=c.org["default"])
                if body["type"] == "advice":
                    remaining_advice -= 1
                self.stats[f"advisor:{body['type']}"] += 1
                status = 200
            else:
                failed = rng.random() < 0.1
                status = 500 if failed else 200
                body = {"error": "permission denied"} if failed else {"ok": True, "tool": call.tool_name, "n": i}
            text = json.dumps(body, sort_keys=True)
            self.cmd("record_tool_call_response", **ids, status=status, body=text)
            if rng.random() < 0.05:  # the worker restarts and claims again: the saved response, no second run
                again = self.cmd("claim_tool_call", **ids, tool_name=call.tool_name)
                self.stats["reclaims"] += 1
                if again is not None:
                    self.stats[f"claim:{again['outcome']}"] += 1
                    if again["outcome"] != "saved" or (again["response"] or {}).get("body") != text:
                        self.anomalies.append(f"{c.chat_id}: a repeated claim of {call.tool_call_id} ran again")
            results.append({"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": call.tool_call_id,
                                                       "tool_name": call.tool_name, "result": body,
                                                       "is_error": status >= 400}]})
        self.cmd("commit_step", chat_id=c.chat_id, messages=results)
        if rng.random() < 0.02 and results:
            # a late claim of a call whose result is committed and canceled afterwards is refused
            first = na.calls[0]
            ids = dict(chat_id=c.chat_id, assistant_message_id=amid, tool_call_id=first.tool_call_id)
            canceled = self.cmd("cancel_tool_call", **ids)
            self.stats["late_cancels"] += 1
            if canceled is not None and not canceled["received"]:
                self.anomalies.append(f"{c.chat_id}: cancel of a done call said not received")
            self.cmd("claim_tool_call", expect=("tool_call_canceled",), **ids, tool_name=first.tool_name)

    def worker_finish_interruption(self, c: SimChat, state: ChatState, amid: int | None = None) -> None:
        """The owner of an interrupted chat commits a truthful result for every open call and finishes."""
        if state.status != "interrupting":
            return
        if not state.owned:  # pragma: no cover - unowned interruptions finish at once
            self.cmd("interrupt", chat_id=c.chat_id)
            return
        local, dynamic = unresolved_calls(state)
        partial: list[dict[str, Any]] = []
        if local or dynamic:
            if amid is None:
                amid = next(m.message_id for m in reversed(state.messages) if m.role == "assistant" and active(m))
            for call in local:
                r = self.cmd("cancel_tool_call", chat_id=c.chat_id, assistant_message_id=amid,
                             tool_call_id=call.tool_call_id)
                if r is None:
                    result, is_error = "tool call was canceled", True
                else:
                    result, is_error = r["result"], r["is_error"]
                    self.stats[f"cancel:{r['outcome']}"] += 1
                partial.append({"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": call.tool_call_id,
                                                           "tool_name": call.tool_name, "result": result,
                                                           "is_error": is_error}]})
            for call in dynamic:
                partial.append({"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": call.tool_call_id,
                                                           "tool_name": call.tool_name, "is_error": True,
                                                           "result": "Tool execution interrupted by user"}]})
        elif self.rng.random() < 0.5:
            partial.append({"role": "assistant", "parts": [{"type": "text", "text": "partial answer (interrupted)"}]})
        self.cmd("finish_interruption", chat_id=c.chat_id, partial_messages=partial)

    def compact(self, c: SimChat, state: ChatState, na: NextAction, info: dict[str, Any]) -> None:
        c.seq += 1
        call_id = f"chat_summarized_{c.seq}"
        source = "manual" if na.forced else "automatic"
        cp = na.compaction
        self.stats[f"compactions:{source}"] += 1
        self.cmd("commit_step", chat_id=c.chat_id, consume_compaction_request=na.forced, messages=[
            {"role": "user", "visibility": "model", "compressed": True,
             "parts": [{"type": "text", "text": f"Summary of the conversation so far ({c.seq})."}]},
            {"role": "assistant", "visibility": "user", "compressed": True,
             "parts": [{"type": "tool-call", "tool_call_id": call_id, "tool_name": "chat_summarized",
                        "args": {"source": source, "threshold_percent": cp.threshold_percent}}]},
            {"role": "tool", "visibility": "both", "compressed": True,
             "parts": [{"type": "tool-result", "tool_call_id": call_id, "tool_name": "chat_summarized",
                        "result": {"summary": "summary", "source": source, "context_tokens": cp.context_tokens,
                                   "context_limit_tokens": cp.context_limit}}]},
        ])
        limit = info["settings"]["compaction_context_limit"] or info["settings"]["context_limit"] or c.org["limit"]
        c.tokens = int(limit * 0.1)
        c.over_limit = not na.forced and self.rng.random() < 0.12  # the summary did not shrink the context enough

    # -- the users -----------------------------------------------------------------------------------

    def _prompt(self, c: SimChat, what: str) -> dict[str, Any]:
        rng = self.rng
        fields: dict[str, Any] = {"chat_id": c.chat_id, "text": f"{what} {c.seq}"}
        if rng.random() < 0.3:
            fields["prefix_messages"] = [{"role": "user", "visibility": "model",
                                          "parts": [{"type": "text", "text": "hook: repository context"}]}]
        if rng.random() < 0.2:
            fields["hook_allowed_tools"] = rng.sample(LOCAL_TOOLS + DYNAMIC_TOOLS + (ADVISOR,), rng.randint(1, 4))
        if rng.random() < 0.05 and not c.org["legacy_disabled"]:
            fields["model_config_id"] = c.org["legacy"]
        return fields

    def _editable(self, state: ChatState) -> list[int]:
        return [m.message_id for m in state.messages
                if m.role == "user" and not m.deleted and m.visibility != "model" and not m.compressed]

    def user_while_running(self, c: SimChat, state: ChatState) -> None:
        rng = self.rng
        r = rng.random()
        if r < 0.35 and len(state.queue) < 5:
            self.stats["queued_prompts"] += 1
            self.cmd("send_message", **self._prompt(c, "also"))
        elif r < 0.45:
            self.stats["send_interrupts"] += 1
            self.cmd("send_message", **self._prompt(c, "stop, instead"), busy_behavior="interrupt")
        elif r < 0.6:
            self.stats["interrupts:" + ("owned" if state.owned else "unowned")] += 1
            self.cmd("interrupt", chat_id=c.chat_id)
        elif r < 0.7 and state.queue:
            self.stats["queued_deleted"] += 1
            self.cmd("delete_queued_message", chat_id=c.chat_id,
                     queued_message_id=rng.choice(state.queue).queued_message_id)
        elif r < 0.8 and state.queue:
            self.stats["queued_promoted"] += 1
            self.cmd("promote_queued_message", chat_id=c.chat_id,
                     queued_message_id=rng.choice(state.queue).queued_message_id)
        elif r < 0.9 and self._editable(state):
            self.stats["edits"] += 1
            self.cmd("edit_message", chat_id=c.chat_id, message_id=rng.choice(self._editable(state)),
                     text=f"edited request {c.seq}")
        else:
            self.cmd("request_compaction", expect=("transition_not_allowed",), chat_id=c.chat_id)  # refused: running

    def user_requires_action(self, c: SimChat, state: ChatState) -> None:
        rng = self.rng
        pending = outstanding_tool_calls(state, dynamic_only=True)
        r = rng.random()
        if r < 0.72:
            results = [{"tool_call_id": p.tool_call_id, "output": json.dumps({"answer": "yes"})} for p in pending]
            if len(results) > 1 and rng.random() < 0.15:
                self.cmd("complete_requires_action", expect=("tool_result_missing",), chat_id=c.chat_id,
                         results=results[:-1])
            self.stats["requires_action_completed"] += 1
            self.cmd("complete_requires_action", chat_id=c.chat_id, results=results, created_by=c.owner)
        elif r < 0.85:
            self.stats["requires_action_canceled"] += 1
            self.cmd("cancel_requires_action", chat_id=c.chat_id)
        elif r < 0.95:
            self.stats["interrupts:requires_action"] += 1
            self.cmd("interrupt", chat_id=c.chat_id)
        else:
            self.stats["send_interrupts"] += 1
            self.cmd("send_message", **self._prompt(c, "never mind,"), busy_behavior="interrupt")

    def user_waiting(self, c: SimChat, state: ChatState, active_chats: list[SimChat]) -> None:
        rng = self.rng
        if c.turns_left <= 0:
            self.finish_life(c, state)
            return
        r = rng.random()
        if r < 0.1 and self._editable(state):
            self.stats["edits"] += 1
            self.cmd("edit_message", chat_id=c.chat_id, message_id=rng.choice(self._editable(state)),
                     text=f"let me rephrase {c.seq}", created_by=c.owner)
        elif r < 0.2 and has_compactable_history(state):
            self.stats["compaction_requests"] += 1
            self.cmd("request_compaction", chat_id=c.chat_id)
            return  # not a turn of its own
        elif r < 0.32 and c.parent is None and self.created < self.n_chats:
            child = self.create_chat(parent=c)
            if child is not None:
                active_chats.append(child)
            return
        else:
            self.cmd("send_message", **self._prompt(c, "next"))
        c.turns_left -= 1

    def user_error(self, c: SimChat, state: ChatState) -> None:
        rng = self.rng
        err = state.last_error
        if err is not None and err.kind == "config" and has_compactable_history(state) and rng.random() < 0.8:
            self.stats["compaction_requests"] += 1
            self.cmd("request_compaction", chat_id=c.chat_id)
            return
        if c.turns_left > 0 and rng.random() < 0.8:
            c.turns_left -= 1
            self.cmd("send_message", **self._prompt(c, "try again"))
            return
        self.finish_life(c, state)

    def finish_life(self, c: SimChat, state: ChatState) -> None:
        rng = self.rng
        r = rng.random()
        if c.parent is None and r < 0.45:
            self.stats["archived"] += 1
            if self.cmd("set_archived", expect=("transition_not_allowed",), chat_id=c.chat_id, archived=True) is None:
                self.cmd("end_chat", chat_id=c.chat_id)  # a child still busy: end the family instead
        elif r < 0.7:
            self.stats["ended"] += 1
            self.cmd("end_chat", chat_id=c.chat_id)
        c.done = True

    # -- report --------------------------------------------------------------------------------------

    def final_states(self) -> Counter[str]:
        return Counter(self.state(c).execution_state for c in self.chats)

    def summary(self) -> dict[str, Any]:
        ok = sum(1 for _, outcome in self.log if outcome == "ok")
        return {
            "seed": self.seed, "orgs": self.n_orgs,
            "chats": len(self.chats), "root_chats": len(self.chats) - self.stats["child_chats"],
            "child_chats": self.stats["child_chats"],
            "commands": self.commands, "applied": ok, "refused": self.commands - ok,
            "refusals": dict(sorted(self.refusals.items())),
            "unexpected_refusals": len(self.unexpected), "anomalies": len(self.anomalies),
            "events": self.events, "decisions": len(self.decisions),
            "final_states": dict(sorted(self.final_states().items())),
            "activity": dict(sorted(self.stats.items())),
            "seconds": round(self.seconds, 2),
        }


def simulate(app: Any, chats: int, seed: int, orgs: int = 3, salt: str | None = None, **kw: Any) -> Simulation:
    return Simulation(app, chats=chats, seed=seed, orgs=orgs, salt=salt, **kw).run()


# -- checks ------------------------------------------------------------------------------------------------

def check_chat(app: Any, state: ChatState) -> list[str]:
    """The foundation invariants of one chat (besides the views): a valid execution state, waiting implies
    an empty queue, message ids 1..n in order, every tool call resolved at most once (one result, after its
    call) and run at most once (one ``run`` claim of its execution)."""
    cid = state.chat_id
    problems: list[str] = []
    if state.execution_state not in VALID_STATES:
        problems.append(f"{cid}: invalid execution state ({state.status}, queue {len(state.queue)})")
    if state.status == "waiting" and state.queue:
        problems.append(f"{cid}: waiting with {len(state.queue)} queued prompts")
    ids = [m.message_id for m in state.messages]
    if ids != list(range(1, len(ids) + 1)):
        problems.append(f"{cid}: message ids not increasing from 1")
    seen_calls: set[str] = set()
    results: Counter[str] = Counter()
    for m in state.messages:
        for r in m.results:
            if r.tool_call_id not in seen_calls and m.role == "tool":
                problems.append(f"{cid}: result for unknown call {r.tool_call_id} in message {m.message_id}")
            results[r.tool_call_id] += 1
        for call in m.calls:
            seen_calls.add(call.tool_call_id)
    for call_id, n in results.items():
        if n > 1:
            problems.append(f"{cid}: tool call {call_id} resolved {n} times")
    for m in state.messages:
        if m.role != "assistant" or not m.calls:
            continue
        for call_id, eid in tool_call_execution_ids(cid, m.message_id, [x.tool_call_id for x in m.calls]).items():
            events = app.stream(eid)
            runs = sum(1 for e in events if isinstance(e, tev.ToolCallClaimed) and e.outcome == "run")
            if runs > 1:
                problems.append(f"{cid}: tool call {call_id} ran {runs} times")
    return problems


def check_chats(app: Any, chat_ids: Iterable[Any], url: str | None = None) -> list[str]:
    """``check_chat`` on every chat, and (given the database ``url``) replayed state == the chat_status and
    chat_queue views (caught up first)."""
    from projections import catch_up, open_backend
    from projections.chats import chat_projections

    problems: list[str] = []
    states: dict[str, ChatState] = {}
    for chat_id in chat_ids:
        agg = app.load(UUID(str(chat_id)))
        if not isinstance(agg, Chat):
            problems.append(f"{chat_id}: not a chat")
            continue
        states[str(chat_id)] = agg.state
        problems.extend(check_chat(app, agg.state))
    if url is None:
        return problems
    backend = open_backend(url)
    try:
        for p in chat_projections(app):
            catch_up(app, p, backend)
        ids = list(states)
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows = {r["chat_id"]: json_row(r) for r in backend.query("chat_views", "chat_status",
                                                                    where={"chat_id": chunk})}
            queued = Counter(r["chat_id"] for r in backend.query("chat_views", "chat_queue",
                                                                  where={"chat_id": chunk}))
            for chat_id in chunk:
                want = json_row(status_values(states[chat_id]))
                got = rows.get(chat_id)
                if got is None:
                    problems.append(f"{chat_id}: missing from the chat_status view")
                    continue
                diff = sorted(k for k in want if want[k] != got.get(k))
                if diff:
                    problems.append(f"{chat_id}: chat_status view differs from replay in {diff}")
                if queued.get(chat_id, 0) != len(states[chat_id].queue):
                    problems.append(f"{chat_id}: chat_queue view holds {queued.get(chat_id, 0)} prompts, "
                                    f"replay {len(states[chat_id].queue)}")
    finally:
        backend.close()
    return problems


def check_decisions(app: Any, decisions: list[dict[str, Any]], sample: int | None = None,
                    seed: int = 0) -> list[str]:
    """``next-action`` on the chat as it was at each (sampled) decision point agrees with what the simulator
    did next: the same action, finish reason, calls and pending dynamic calls, and the first command the
    worker ran is the one that action calls for."""
    chosen = decisions if sample is None or sample >= len(decisions) else random.Random(seed).sample(decisions, sample)
    problems: list[str] = []
    for d in chosen:
        _, na, _ = decide_chat(app, UUID(d["chat_id"]), version=d["version"])
        got = (na.action, na.finish_reason, na.forced, [x.tool_call_id for x in na.calls],
               [x.tool_call_id for x in na.pending_dynamic], bool(na.policy_results))
        want = (d["action"], d["finish_reason"], d["forced"], d["calls"], d["pending_dynamic"], d["policy_rejected"])
        if got != want:
            problems.append(f"{d['chat_id']}@{d['version']}: next-action says {got}, the simulator did {want}")
        if not d["did"] or d["did"][0] not in FIRST_COMMAND[d["action"]]:
            problems.append(f"{d['chat_id']}@{d['version']}: {d['action']} followed by {d['did'][:1]}")
    return problems


# -- CLI ---------------------------------------------------------------------------------------------------

def print_summary(s: dict[str, Any]) -> None:
    click.echo(f"simulated {s['chats']} chats ({s['root_chats']} root, {s['child_chats']} subagent) in "
               f"{s['orgs']} organizations, seed {s['seed']}: {s['seconds']:.1f} s")
    click.echo(f"  commands {s['commands']} ({s['applied']} applied, {s['refused']} refused"
               f"{', ' + str(s['unexpected_refusals']) + ' UNEXPECTED' if s['unexpected_refusals'] else ''}); "
               f"events {s['events']}; worker decisions {s['decisions']}")
    if s["refusals"]:
        click.echo("  refusals: " + ", ".join(f"{k} {v}" for k, v in s["refusals"].items()))
    click.echo("  final states: " + ", ".join(f"{k} {v}" for k, v in s["final_states"].items()))
    act = s["activity"]
    actions = ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in act.items() if k.startswith("action:"))
    click.echo(f"  decisions: {actions}")
    other = ", ".join(f"{k} {v}" for k, v in act.items() if not k.startswith("action:") and k not in ("chats", "child_chats"))
    click.echo(f"  activity: {other}")
    if s["anomalies"]:
        click.echo(f"  ANOMALIES: {s['anomalies']}")


@main.command("simulate")
@click.option("--chats", type=click.IntRange(min=1), default=50, show_default=True, help="Chats to simulate (subagent chats included).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the fake model and users.")
@click.option("--orgs", type=click.IntRange(min=1), default=3, show_default=True, help="Organizations.")
@click.option("--concurrency", type=click.IntRange(min=1), default=32, show_default=True,
              help="Chats in flight at once (interleaved).")
@click.option("--salt", default=None, help="Id salt (default: random, so every run records new chats).")
@click.option("--check", is_flag=True, help="Then check the invariants on every simulated chat and next-action "
                                            "agreement on a sample of decisions; exit 1 on a problem.")
@click.option("--check-sample", type=click.IntRange(min=0), default=500, show_default=True,
              help="Decision points to re-decide with --check.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_ctx
def simulate_cmd(c: Ctx, chats: int, seed: int, orgs: int, concurrency: int, salt: str | None, check: bool,
                 check_sample: int, as_json: bool) -> None:
    """Drive CHATS chats through the real commands with a deterministic fake model, and summarize."""
    if not as_json:
        click.echo(f"Simulating {chats} chats into {redact(c.url)} ...")
    sim = simulate(c.app, chats, seed, orgs, salt, concurrency=concurrency)
    summary = sim.summary()
    problems: list[str] = []
    if check:
        t0 = time.perf_counter()
        problems = check_chats(c.app, [x.chat_id for x in sim.chats], c.url)
        problems += check_decisions(c.app, sim.decisions, check_sample, seed)
        problems += [f"unexpected refusal: {u}" for u in sim.unexpected] + sim.anomalies
        summary["check"] = {"chats": len(sim.chats), "decisions_checked": min(check_sample, len(sim.decisions)),
                            "problems": len(problems), "seconds": round(time.perf_counter() - t0, 2),
                            "first_problems": problems[:10]}
    if as_json:
        emit_json(summary)
    else:
        print_summary(summary)
        if check:
            ck = summary["check"]
            click.echo(f"  check: {ck['chats']} chats, {ck['decisions_checked']} decisions re-decided: "
                       f"{ck['problems']} problems ({ck['seconds']:.1f} s)")
            for p in problems[:10]:
                click.echo(f"    {p}")
    if problems:
        raise SystemExit(1)
