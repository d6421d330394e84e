"""The simulated worker (``commands.tools.simulate``): does exactly what ``next-action`` decides for a running chat."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec

from commands.tools.sim_base import LOCAL_TOOLS, SimChat
from ledger.chat.decide import fence_of
from ledger.chat.state import ChatState, active
from ledger.policy.generation import NextAction, unresolved_calls
from ledger.policy.retry import retry_decision
from ledger.policy.tools import ADVISOR, advisor_result
from commands.toolcalls import load_execution
from ledger.toolcalls.identity import locate_call
from ledger.toolcalls.state import CANCELABLE_TOOLS, UNKNOWN_OUTCOME_BODY, response_result

#: the timeout a simulated runner gives its first claim of a call (counted from that claim)
TOOL_TIMEOUT_MS = 600_000


class WorkerRole:
    """Mixed into ``Simulation``: the worker's steps."""

    # -- the worker ----------------------------------------------------------------------------------

    def worker_step(self, c: SimChat, state: ChatState, na: NextAction, info: dict[str, Any]) -> None:
        """Do what the decision procedure says for the chat as it is at ``state.version``. Every worker
        command carries the fence of the chat as decided on (``fence_of``, what ``next-action`` reports),
        with the runner that owns it."""
        fence = msgspec.to_builtins(fence_of(state))
        if c.owned and state.worker_id is None:  # acquiring changes nothing the decision reads
            runner = self.uid("runner", c.chat_id)
            self.cmd("acquire", chat_id=c.chat_id, worker_id=self.uid("worker", c.chat_id), runner_id=runner)
            fence["runner_id"] = runner
        record = {"chat_id": c.chat_id, "version": state.version, "position": self.app.head(), "action": na.action,
                  "finish_reason": na.finish_reason, "forced": na.forced,
                  "calls": [x.tool_call_id for x in na.calls],
                  "pending_dynamic": [x.tool_call_id for x in na.pending_dynamic],
                  "policy_rejected": bool(na.policy_results), "settings": info["settings"], "did": []}
        self.decisions.append(record)
        self.stats[f"action:{na.action}"] += 1
        self._did = record["did"]
        self._fence = fence
        try:
            if na.action == "generate_assistant":
                self.generate(c, state, na, info)
            elif na.action == "execute_local_tools":
                self.run_tools(c, state, na)
            elif na.action == "enter_requires_action":
                self.cmd("enter_requires_action", chat_id=c.chat_id, fence=fence)
            elif na.action == "compact":
                self.compact(c, state, na, info)
            elif na.action == "finish_turn":
                self.cmd("finish_turn", chat_id=c.chat_id, fence=fence)
            elif na.action == "error":
                assert na.error is not None
                self.stats["still_over_limit_errors"] += 1
                self.cmd("finish_error", chat_id=c.chat_id, fence=fence,
                         error={"message": na.error.message, "kind": na.error.kind})
        finally:
            self._did = None

    def generate(self, c: SimChat, state: ChatState, na: NextAction, info: dict[str, Any]) -> None:
        """One model action: record the attempt (an owned chat's runner passes what it runs with, the
        ledger resolves it for the others), then commit under the attempt's fence. A worker of an earlier
        attempt that commits late is refused (``fence_mismatch``) and records nothing."""
        rng = self.rng
        extra = {"settings": info["attempt_settings"]} if c.owned else {}
        r = self.cmd("record_generation_attempt", chat_id=c.chat_id, fence=self._fence, **extra)
        if r is None:
            return
        attempt = r["generation_attempt"]
        fence = {**self._fence, "generation_attempt": attempt}
        if attempt >= 2:
            # the worker of the previous attempt wakes up late and tries to commit: refused by the fence
            self.stats["stale_commits_refused"] += 1
            self.cmd("commit_step", expect=("fence_mismatch",), chat_id=c.chat_id,
                     fence={**fence, "generation_attempt": attempt - 1},
                     messages=[{"role": "assistant", "parts": [{"type": "text", "text": "stale"}]}])
        if c.failing is None and rng.random() < 0.04:
            c.failing = rng.choice(["transient"] * 14 + ["persistent", "fatal"])
        if c.failing is not None:
            self.stats["provider_errors"] += 1
            if c.failing == "fatal":
                c.failing = None
                self.cmd("finish_error", chat_id=c.chat_id, fence=fence,
                         error={"message": "provider rejected the request: invalid_request_error", "kind": "generic"})
                return
            retry_after = rng.choice([None, None, None, 2.0, 45.0])
            decision = retry_decision(attempt, retry_after)
            if decision.retry:
                self.stats["retries"] += 1
                self.cmd("record_retry_state", chat_id=c.chat_id, fence=fence, retry_state={
                    "attempt": attempt, "delay_seconds": decision.delay, "retry_after": retry_after,
                    "error": "the model is overloaded", "kind": "overloaded"})
                if c.failing == "transient" and rng.random() < 0.6:
                    c.failing = None
                return
            c.failing = None
            self.stats["retries_exhausted"] += 1
            self.cmd("finish_error", chat_id=c.chat_id, fence=fence, error={
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
        self.cmd("commit_step", chat_id=c.chat_id, fence=fence, messages=[message])

    def run_tools(self, c: SimChat, state: ChatState, na: NextAction) -> None:
        rng = self.rng
        amid = next(m.message_id for m in reversed(state.messages) if m.role == "assistant" and active(m))
        if na.policy_results:
            self.stats["exclusive_batches_rejected"] += 1
            self.cmd("commit_step", chat_id=c.chat_id, fence=self._fence, messages=[
                {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": p.tool_call_id,
                                            "tool_name": p.tool_name, "result": p.result, "is_error": True}]}
                for p in na.policy_results])
            return
        results: list[dict[str, Any]] = []
        remaining_advice = na.advisor.remaining_uses
        for i, call in enumerate(na.calls):
            crashed = False
            ids = dict(chat_id=c.chat_id, assistant_message_id=amid, tool_call_id=call.tool_call_id)
            claim = self.cmd("claim_tool_call", **ids, tool_name=call.tool_name, timeout_ms=TOOL_TIMEOUT_MS)
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
                # now and then the runner's handler crashes: it saves the "outcome is unknown" 500, which is
                # the result (drawn apart, from the seed and the command count: the main random sequence stays as it was)
                crashed = random.Random(f"{self.seed}/{self.commands}/{call.tool_call_id}").random() < 0.03
            if crashed:
                self.stats["unknown_outcomes"] += 1
                saved = self.cmd("record_tool_call_response", **ids, outcome="unknown")
                status, text = 500, UNKNOWN_OUTCOME_BODY
                body = json.loads(text)
                if saved is not None and saved["response_outcome"] != "unknown":
                    self.anomalies.append(f"{c.chat_id}: the unknown outcome of {call.tool_call_id} was lost")
            else:
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
        self.cmd("commit_step", chat_id=c.chat_id, fence=self._fence, messages=results)
        if rng.random() < 0.02 and results:
            # a cancel of a call whose result is committed is refused (only the three acting tools can be
            # canceled at all); a late claim then gets the saved response, never a second run
            first = na.calls[0]
            ids = dict(chat_id=c.chat_id, assistant_message_id=amid, tool_call_id=first.tool_call_id)
            canceled = self.cmd("cancel_tool_call", expect=("tool_call_resolved", "tool_call_not_cancelable"), **ids)
            self.stats["late_cancels"] += 1
            if canceled is not None:
                self.anomalies.append(f"{c.chat_id}: a cancel of a resolved call was accepted")
            late = self.cmd("claim_tool_call", **ids, tool_name=first.tool_name)
            if late is not None and late["outcome"] == "run":
                self.anomalies.append(f"{c.chat_id}: a late claim of {first.tool_call_id} ran again")

    def saved_result(self, state: ChatState, amid: int, tool_call_id: str) -> dict[str, Any] | None:
        """``{result, is_error, outcome}`` of the call's saved response (None: no response yet)."""
        execution = load_execution(self.app, locate_call(state, amid, tool_call_id).execution_id)
        if execution is None or execution.state.response is None:
            return None
        result, is_error = response_result(execution.state.response)
        return {"result": result, "is_error": is_error, "outcome": "saved_response"}

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
                if call.tool_name in CANCELABLE_TOOLS:
                    r = self.cmd("cancel_tool_call", chat_id=c.chat_id, assistant_message_id=amid,
                                 tool_call_id=call.tool_call_id)
                else:  # not cancelable: its saved response, when the run had ended, is the truth
                    r = self.saved_result(state, amid, call.tool_call_id)
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
        self.cmd("finish_interruption", chat_id=c.chat_id, fence=msgspec.to_builtins(fence_of(state)),
                 partial_messages=partial)

    def compact(self, c: SimChat, state: ChatState, na: NextAction, info: dict[str, Any]) -> None:
        c.seq += 1
        call_id = f"chat_summarized_{c.seq}"
        source = "manual" if na.forced else "automatic"
        cp = na.compaction
        self.stats[f"compactions:{source}"] += 1
        self.cmd("commit_step", chat_id=c.chat_id, fence=self._fence, consume_compaction_request=na.forced, messages=[
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
