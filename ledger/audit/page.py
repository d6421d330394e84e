"""The data of an audit page, as plain values (dicts, lists, strings): what ``ledger.audit.render``'s
templates show. Pure: built from a stream's recorded events and its timeline; what other streams hold
(tool-call execution records, model names, child chats) is passed in by the service layer
(``commands.audit_page``). The templates only lay it out, so another entry point (the HTTP service's
``/ui/``) renders the same pages from the same data with its own ``link``.

Anchors (the ``id`` of each thing on a chat page): ``ev-<version>`` per event, ``msg-<message id>`` per
message, ``call-<tool call id>`` per tool call, ``result-<tool call id>`` per tool result, ``exec-<execution
id>`` per execution record, ``turn-<turn id>`` per turn, ``q-<queued id>`` per queued prompt.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable

from ledger.ids import shortest_unique

SettingsAt = Callable[[Any, int], dict[str, Any] | None] | None


def policy_text(p: list[str] | None) -> str:
    return "all tools" if p is None else (", ".join(p) or "no tools")


def _seconds(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    return (datetime.fromisoformat(b.replace("Z", "+00:00")) - datetime.fromisoformat(a.replace("Z", "+00:00"))).total_seconds()


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _value(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def timeline_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each event with its anchor, actor, the time since the event before it, and its state as text pairs."""
    rows, previous = [], None
    for x in data["events"]:
        state = x["state"]
        pairs = [] if "execution_state" in state else [(k, _value(v)) for k, v in state.items()]
        rows.append({**x, "anchor": f"ev-{x['version']}", "after": duration_text(_seconds(previous, x["time"])),
                     "error": x["type"] in ("TurnFailed", "IdleChatFailed", "InvalidStateReconciled"),
                     "pairs": pairs, "usage_text": usage_text(x.get("usage"))})
        previous = x["time"]
    return rows


def usage_text(u: dict[str, Any] | None) -> str:
    """One usage sum as people read it: tokens in/out (cache read/written, reasoning), cost, run time."""
    if not u:
        return ""
    parts = [f"{u['input_tokens']:,} in / {u['output_tokens']:,} out tokens"]
    if u["cache_read_tokens"] or u["cache_creation_tokens"]:
        parts.append(f"cache {u['cache_read_tokens']:,} read / {u['cache_creation_tokens']:,} written")
    if u["reasoning_tokens"]:
        parts.append(f"{u['reasoning_tokens']:,} reasoning")
    if u["total_cost_micros"]:
        parts.append(f"cost {u['total_cost_micros'] / 1_000_000:.6f}")
    if u["runtime_ms"]:
        parts.append(f"{u['runtime_ms'] / 1000:.1f} s")
    return " · ".join(parts)


def usage_rows(summary: dict[str, Any] | None) -> list[dict[str, str]]:
    """The page's usage table: the chat's total first, then each turn's."""
    if not summary or not summary.get("total"):
        return []
    return [{"scope": "chat", "turn_id": None, "text": usage_text(summary["total"]),
             "messages": str(summary["total"]["messages"])},
            *({"scope": "turn", "turn_id": t["turn_id"], "text": usage_text(t), "messages": str(t["messages"])}
              for t in summary["by_turn"])]


def chain_line(data: dict[str, Any]) -> str | None:
    """The stream's hash chain status as the audit shows it (``ledger.chain``), when the caller read it."""
    from ledger.chain import text

    return text(data["chain"]) if data.get("chain") else None


def stream_page(data: dict[str, Any]) -> dict[str, Any]:
    """A catalog's or a conversation's page: its timeline, each state as labelled values."""
    rows = timeline_rows(data)
    return {"kind": data["aggregate"], "stream_id": data["stream_id"], "version": data["version"],
            "events": rows, "first": rows[0]["time"] if rows else None, "last": rows[-1]["time"] if rows else None,
            "now": rows[-1]["pairs"] if rows else [], "ids": shortest_unique([data["stream_id"]]),
            "chain": chain_line(data)}


def chat_page(data: dict[str, Any], events: list[Any], settings_at: SettingsAt = None,
              executions: dict[str, dict[str, Any]] | None = None,
              model_names: dict[str, str] | None = None) -> dict[str, Any]:
    """A chat's page: header (parent, children), path of execution states, messages (texts, tool-call
    arguments and results linked to each other and to their execution records, edits old → new), turns
    (model and why, duration), steps, queued prompts, tool calls, errors, timeline.

    ``executions``: execution id -> ``{"status", "events": [{"version", "time", "type", "summary"}]}``;
    ``model_names``: model config id -> "provider/model (display name)"."""
    from ledger.audit.explain import explain_queued, explain_tool_call, explain_turns, fence_text
    from ledger.chat import events as ev
    from ledger.chat.views import message_rows

    executions = executions or {}
    names = model_names or {}
    created = events[0]
    targets = explain_targets(events)
    rows = [{**r, "explain": targets.get(r["version"], [])} for r in timeline_rows(data)]
    messages = message_rows(events)
    recorded_at = {m.message_id: e.originator_version for e in events for m in (getattr(e, "messages", None) or ())}
    results = {p["tool_call_id"]: m["message_id"] for m in messages for p in m["parts"] if p["type"] == "tool-result"}

    calls = []
    for cid in dict.fromkeys(p["tool_call_id"] for m in messages if m["role"] == "assistant"
                             for p in m["parts"] if p["type"] == "tool-call"):
        t = explain_tool_call(events, cid)
        c = t["closed"]
        closed_at = next((r["time"] for r in rows if r["version"] == c.get("version")), None)
        calls.append({"tool_call_id": cid, "tool_name": t["tool_name"], "args": json.dumps(t["args"], ensure_ascii=False),
                      "made": t["recorded"]["version"], "message_id": t["assistant_message_id"],
                      "policy": policy_text(t["policy_in_force"]), "offered": t["offered_by_policy"],
                      "closed": c["how"] if c["how"] == "open" else f"v{c['version']} {c['how']}"
                      + (f": {c['reason']}" if c.get("reason") else ""),
                      "error": bool(c.get("is_error")) or c["how"] == "canceled",
                      "duration": duration_text(_seconds(t["recorded"].get("time"), closed_at)),
                      "result_message_id": results.get(cid), "execution_id": t["execution_id"],
                      "execution": executions.get(t["execution_id"] or "")})
    call_by_id = {c["tool_call_id"]: c for c in calls}

    edits = []
    for i, e in enumerate(events):
        if isinstance(e, ev.MessageEdited):
            old = next((m for m in messages if m["message_id"] == e.edited_message_id), None)
            new = next((m for later in events[i + 1:] for m in (getattr(later, "messages", None) or ())
                        if m.role == "user"), None)
            edits.append({"version": e.originator_version, "message_id": e.edited_message_id,
                          "old": _text(old["parts"]) if old else "", "new": _text(_parts(new)) if new else "",
                          "new_message_id": new.message_id if new else None})
    edited = {x["message_id"]: x for x in edits}

    shown_messages, anchored = [], set()  # a provider id used again later gets its anchor once (the first)
    for m in messages:
        parts = []
        for p in m["parts"]:
            kind = p["type"]
            if kind in ("text", "reasoning"):
                parts.append({"kind": kind, "text": p["text"]})
            elif kind == "tool-call":
                c = call_by_id.get(p["tool_call_id"], {})
                parts.append({"kind": "call", "anchored": _first(anchored, "call", p["tool_call_id"]),
                              "tool_call_id": p["tool_call_id"], "tool_name": p["tool_name"],
                              "args": json.dumps(p.get("args"), ensure_ascii=False),
                              "result_message_id": c.get("result_message_id"), "execution_id": c.get("execution_id"),
                              "has_execution": c.get("execution") is not None})
            elif kind == "tool-result":
                parts.append({"kind": "result", "anchored": _first(anchored, "result", p["tool_call_id"]),
                              "tool_call_id": p["tool_call_id"], "tool_name": p["tool_name"],
                              "result": _value(p.get("result")), "is_error": bool(p.get("is_error")),
                              "call_known": p["tool_call_id"] in call_by_id})
            else:
                parts.append({"kind": "other", "text": f"[{kind}]"})
        shown_messages.append({**m, "version": recorded_at.get(m["message_id"]), "shown_parts": parts,
                               "model": names.get(m["model_config_id"] or "", m["model_config_id"]),
                               "edit": edited.get(m["message_id"])})

    # the messages turn by turn, for folding: the latest turns open, the older ones closed once there are many
    groups: list[dict[str, Any]] = []
    for m in shown_messages:
        if not groups or groups[-1]["turn_id"] != m["turn_id"]:
            groups.append({"turn_id": m["turn_id"], "number": len(groups) + 1, "messages": []})
        groups[-1]["messages"].append(m)
    for g in groups:
        g["open"] = g["number"] > len(groups) - OPEN_TURNS
        g["first_version"] = next((m["version"] for m in g["messages"] if m["version"]), None)
        g["errors"] = sum(1 for m in g["messages"] for p in m["shown_parts"] if p.get("is_error"))

    turn_ids = [e.turn_id for e in events if isinstance(e, (ev.ChatCreated, ev.TurnStarted, ev.QueuedPromptPromoted))]
    turns, steps = [], []
    times = {r["version"]: r["time"] for r in rows}
    explained = {t["turn_id"]: t for t in explain_turns(events, settings_at)}  # (one pass over the chat)
    for tid in turn_ids:
        t = explained[str(tid)]
        end = t["ended"]
        turns.append({"turn_id": str(tid), "started": f"v{t['started']['version']} {t['started']['cause']}",
                      "model": _named(t["model_explanation"], names), "policy": policy_text(t["tool_policy"]),
                      "counts": f"{t['steps']} / {len(t['tool_calls'])} / {len(t['attempts'])}",
                      "ended": "—" if end is None else f"v{end['version']} {end['how']}"
                      + (f": {end['error']['message']}" if end.get("error") else ""),
                      "failed": bool(end and end["how"] == "failed"),
                      "duration": duration_text(_seconds(times.get(t["started"]["version"]),
                                                         times.get(end["version"]) if end else None))})
        for st in t["step_details"]:
            ran = st["settings"]
            mo = ran.get("model") if ran else None
            steps.append({
                "version": st["version"], "turn_id": str(tid),
                "attempt": f"{st['generation_attempt']}", "runner": st["runner_id"] or "-",
                "fence": fence_text(st["fence"]),
                "model": (f"{mo['provider']}/{mo['model']} ({mo['source']}" + (f", {mo['reason']}" if mo.get("reason") else "")
                          + ")") if mo else ("defaults" if ran else "unknown"),
                "limits": f"{ran['context_limit']} · {ran['compaction_threshold']}% of {ran['compaction_trigger_limit']}"
                if ran else "–",
                "advisor": (("eligible" if ran["advisor_eligible"] else f"no ({ran.get('advisor_reason')})")
                            + f", {ran['advisor_remaining_uses']} left") if ran else "–",
                "source": {"recorded": "recorded by the attempt", "resolved": "resolved as of then"}.get(
                    st["settings_from"] or "", "–")})

    queued = []
    for qid in [e.prompt.queued_message_id for e in events if isinstance(e, ev.PromptQueued)]:
        q = explain_queued(events, qid)
        o = q["outcome"]
        outcome = "still queued" if o is None else f"v{o['version']} {o['how']}: {o['why']}"
        if o and o["how"] == "promoted":
            outcome += f" (policy {policy_text(o['tool_policy_before'])} → {policy_text(o['tool_policy_after'])})"
        model = o.get("model_explanation", "") if o else ""
        if o and o.get("reasoning_effort"):
            model += f" · reasoning effort {o['reasoning_effort']}"
        history = [f"v{x['version']} " + (f"content: {x['text']}" if x["what"] == "content" else x["what"])
                   for x in q["edits"]]
        history += [f"v{pz['version']} paused" + (f" → v{pz['resumed']['version']} resumed "
                                                  f"({pz['resumed']['cause'].replace('_', ' ')})"
                                                  if pz["resumed"] else " (still paused)") for pz in q["pauses"]]
        queued.append({"queued_message_id": qid, "queued": f"v{q['queued']['version']}", "by": q["created_by"],
                       "while": q["chat_state_when_queued"], "text": q["text"],
                       "policy": policy_text(q["hook_allowed_tools"]), "prefix": len(q["hook_prefix"]),
                       "history": history, "outcome": outcome, "model": _named(model, names)})

    errors = [{"version": e.originator_version, "type": type(e).__name__, "message": e.last_error.message,
               "kind": e.last_error.kind}
              for e in events if isinstance(e, (ev.TurnFailed, ev.IdleChatFailed, ev.InvalidStateReconciled))]
    path, prev = [], None
    for r in rows:
        st = r["state"]["execution_state"]
        if st != prev:
            path.append({"state": st, "version": r["version"], "type": r["type"]})
            prev = st
    every_id = [data["stream_id"], *(str(t) for t in turn_ids), *(c["execution_id"] for c in calls if c["execution_id"]),
                *(m["created_by"] for m in messages if m["created_by"]), str(created.organization_id),
                str(created.owner_id)]
    children = [str(e.child_chat_id) for e in events if isinstance(e, ev.ChildChatCreated)]
    metadata = chat_metadata(events)
    every_id += [v for k, v in metadata.items() if k.endswith("_id") and v]
    return {
        "metadata": metadata,
        "kind": "chat", "stream_id": data["stream_id"], "version": data["version"], "chain": chain_line(data),
        "title": next((e.title for e in reversed(events) if isinstance(e, ev.TitleSet)), created.title) or "(untitled)",
        "organization_id": str(created.organization_id),
        "owner_id": str(created.owner_id),
        "parent_chat_id": str(created.parent_chat_id) if created.parent_chat_id else None, "children": children,
        "now": rows[-1]["state"] if rows else {}, "now_policy": policy_text(rows[-1]["state"]["policy"]) if rows else "",
        "first": rows[0]["time"] if rows else None, "last": rows[-1]["time"] if rows else None,
        "path": path, "messages": shown_messages, "turn_groups": groups, "edits": edits, "turns": turns, "steps": steps,
        "queued": queued, "calls": calls, "errors": errors, "events": rows,
        "usage": usage_rows(data.get("usage")),
        "ids": shortest_unique(every_id + children + ([str(created.parent_chat_id)] if created.parent_chat_id else [])),
        "model_names": names,
    }


#: turns whose messages a page shows open (the older ones are folded, each a click away)
OPEN_TURNS = 5


def chat_metadata(events: list[Any]) -> dict[str, Any]:
    """The chat's metadata as its events leave it (the chat's own fold: title source, plan mode, pin,
    workspace binding, sharing, labels)."""
    from ledger.chat.evolve import evolve

    state = None
    for e in events:
        state = evolve(state, e)
    return {"title_source": state.title_source, "plan_mode": state.plan_mode, "pinned": state.pinned_at is not None,
            "workspace_id": _id(state.workspace_id), "build_id": _id(state.build_id),
            "agent_id": _id(state.agent_id), "shared": state.shared, "labels": dict(state.labels)}


def _id(value: Any) -> str | None:
    return str(value) if value is not None else None


def explain_targets(events: list[Any]) -> dict[int, list[tuple[str, str]]]:
    """Stream version -> what its event can be explained as: ``(what, id)`` with ``what`` one of
    ``turn``, ``tool_call``, ``queued_message`` (the parameters of ``explain``). A worker's event belongs
    to the turn in progress; a step's tool calls and a queued prompt's events name their own."""
    from ledger.chat import events as ev
    from ledger.chat.values import ToolCallPart

    out: dict[int, list[tuple[str, str]]] = {}
    turn: str | None = None
    for e in events:
        found: list[tuple[str, str]] = []
        own_turn = getattr(e, "turn_id", None)
        if own_turn is not None:
            turn = str(own_turn)
        if own_turn is not None or isinstance(e, (ev.WorkerEvent, ev.GenerationAttemptRecorded)):
            found += [("turn", turn)] if turn else []
        queued = e.prompt.queued_message_id if isinstance(e, ev.PromptQueued) else getattr(e, "queued_message_id", None)
        if queued is not None:
            found.append(("queued_message", str(queued)))
        for m in getattr(e, "messages", None) or ():
            found += [("tool_call", p.tool_call_id) for p in m.parts if isinstance(p, ToolCallPart)]
        found += [("tool_call", cid) for cid in getattr(e, "tool_call_ids", None) or ()]
        if found:
            out[e.originator_version] = list(dict.fromkeys(found))
    return out


def _named(text: str, names: dict[str, str]) -> str:
    """``text`` with each model config id followed by its model's name."""
    for cid, name in names.items():
        text = text.replace(cid, f"{cid[:8]} ({name})")
    return text


def _first(seen: set[tuple[str, str]], kind: str, ident: str) -> bool:
    if (kind, ident) in seen:
        return False
    seen.add((kind, ident))
    return True


def _parts(m: Any) -> list[dict[str, Any]]:
    from ledger.chat.views import to_jsonable

    return to_jsonable(m.parts)


def _text(parts: list[dict[str, Any]]) -> str:
    return " ".join(p["text"] for p in parts if p.get("type") == "text")
