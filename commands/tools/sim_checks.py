"""Checks of a simulated ledger: the foundation invariants per chat, views vs replay, decisions re-decided."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Iterable
from uuid import UUID

from commands.next_action import decide_chat
from commands.tools.sim_base import FIRST_COMMAND
from ledger.chat.aggregate import Chat
from ledger.chat.state import VALID_STATES, ChatState
from ledger.chat.views import json_row, status_values, tool_call_execution_ids
from ledger.toolcalls import events as tev


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
    """Each (sampled) decision of the simulator made again — ``next-action`` on the chat as it was at the
    decision's version, with the catalog and the deployment as of the log position the simulator decided
    at — agrees with what the simulator did: the same action, finish reason, calls, pending dynamic calls
    and settings (model, thresholds, limits, advisor), and the first command the worker ran is the one that
    action calls for."""
    chosen = decisions if sample is None or sample >= len(decisions) else random.Random(seed).sample(decisions, sample)
    problems: list[str] = []
    for d in chosen:
        _, na, info = decide_chat(app, UUID(d["chat_id"]), version=d["version"], position=d.get("position"))
        got = (na.action, na.finish_reason, na.forced, [x.tool_call_id for x in na.calls],
               [x.tool_call_id for x in na.pending_dynamic], bool(na.policy_results))
        want = (d["action"], d["finish_reason"], d["forced"], d["calls"], d["pending_dynamic"], d["policy_rejected"])
        if got != want:
            problems.append(f"{d['chat_id']}@{d['version']}: next-action says {got}, the simulator did {want}")
        if "settings" in d and info["settings"] != d["settings"]:
            problems.append(f"{d['chat_id']}@{d['version']}: settings re-decided {info['settings']}, "
                            f"the simulator ran with {d['settings']}")
        if not d["did"] or d["did"][0] not in FIRST_COMMAND[d["action"]]:
            problems.append(f"{d['chat_id']}@{d['version']}: {d['action']} followed by {d['did'][:1]}")
    return problems
