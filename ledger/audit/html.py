"""A self-contained HTML page of an audit (no network assets: inline CSS, no scripts, no fonts)."""

from __future__ import annotations

from html import escape
from typing import Any

from ledger.audit.timeline import short
from ledger.chain import text as chain_text

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #d7dbe2;padding-bottom:4px}
.meta{color:#5b6475;font-size:13px}.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px 14px;margin:8px 0}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde1e8;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #eceef2;vertical-align:top}
th{background:#eef1f5;font-weight:600}tr.err td{background:#fff1f0}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f0f2f5;padding:1px 4px;border-radius:3px}
.st{display:inline-block;min-width:26px;text-align:center;padding:2px 6px;margin:2px 0;border-radius:10px;font:600 12px ui-monospace,monospace;color:#fff}
.W{background:#6b7280}.R0,.R1,.R1P{background:#2563eb}.I0,.I1,.I1P{background:#d97706}.A0,.A1,.A1P{background:#7c3aed}
.E0,.E1,.E1P,.XE0,.XE1,.XE1P,.Invalid{background:#dc2626}.XW{background:#374151}.P{background:#0d9488}
.path{display:flex;flex-wrap:wrap;align-items:center;gap:2px}.arrow{color:#9aa3b2;margin:0 3px}.v{color:#8a93a3;font-size:11px;margin-left:2px}
.ok{color:#15803d;font-weight:600}.bad{color:#b91c1c;font-weight:600}.muted{color:#8a93a3}
ul{margin:4px 0 4px 18px;padding:0}
"""


def _e(v: Any) -> str:
    return escape("" if v is None else str(v))


def _plist(p: Any) -> str:
    return "all" if p is None else (", ".join(p) or "none")


def _state_cell(s: dict[str, Any]) -> str:
    if "execution_state" not in s:
        return "<br>".join(f"{_e(k)}={_e(v)}" for k, v in s.items())
    policy = "all" if s["policy"] is None else ", ".join(s["policy"]) or "none"
    q = ", ".join(f"#{i}" + (" (under edit)" if i == s.get("editing") else "") for i in s["queue"]) or "–"
    return (f'<span class="st {_e(s["execution_state"])}">{_e(s["execution_state"])}</span> '
            f'{_e(s["status"])}<br><span class="muted">queue</span> {_e(q)} · <span class="muted">policy</span> '
            f'{_e(policy)} · <span class="muted">model</span> <code>{_e(short(s["model"]))}</code>'
            + (f'<br><span class="bad">error: {_e(s["last_error"]["message"])}</span>' if s["last_error"] else ""))


def render(data: dict[str, Any], events: list[Any], settings_at: Any = None) -> str:
    """The page for ``timeline(...)`` output; chats also get turns, steps (each with its model and settings
    as of then and the fence it committed under; ``settings_at`` as ``explain_turn`` takes it), queued
    prompts, tool calls, errors."""
    entries = data["events"]
    last = entries[-1]["state"] if entries else {}
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>Audit {_e(data['aggregate'])} {_e(data['stream_id'])}</title><style>{CSS}</style></head><body>",
             f"<h1>Audit of {_e(data['aggregate'])} <code>{_e(data['stream_id'])}</code></h1>",
             f"<div class='meta'>{len(entries)} events, version {data['version']}"
             + (f" · {entries[0]['time']} → {entries[-1]['time']}" if entries else "") + "</div>"]
    if data.get("chain"):  # the stream's hash chain status (``ledger.chain``)
        parts.append(f"<div class='meta chain'>{_e(chain_text(data['chain']))}</div>")
    if data["aggregate"] == "chat" and entries:
        parts.append(_chat_sections(data, events, last, settings_at))
    parts.append("<h2>Timeline</h2><table><tr><th>v</th><th>time</th><th>event</th><th>summary</th>"
                 "<th>state after</th></tr>")
    for x in entries:
        err = " class='err'" if x["type"] in ("TurnFailed", "IdleChatFailed", "InvalidStateReconciled") else ""
        parts.append(f"<tr{err}><td>{x['version']}</td><td>{_e(x['time'][11:23] if x['time'] else '')}"
                     f"<br><span class='muted'>{_e(x['time'][:10] if x['time'] else '')}</span></td>"
                     f"<td><b>{_e(x['type'])}</b></td><td>{_e(x['summary'])}</td><td>{_state_cell(x['state'])}</td></tr>")
    parts.append("</table></body></html>")
    return "".join(parts)


def _chat_sections(data: dict[str, Any], events: list[Any], last: dict[str, Any], settings_at: Any = None) -> str:
    from ledger.audit.explain import explain_queued, explain_tool_call, explain_turn, fence_text
    from ledger.chat import events as ev
    from ledger.chat.values import ToolCallPart

    out = []
    created = events[0]
    out.append(f"<div class='card'><b>{_e(created.title) or '(untitled)'}</b> · organization "
               f"<code>{_e(created.organization_id)}</code> · owner <code>{_e(created.owner_id)}</code><br>"
               f"now: {_state_cell(last)}</div>")
    # execution-state path: only the changes
    out.append("<h2>Execution-state path</h2><div class='card path'>")
    prev = None
    for x in data["events"]:
        st = x["state"]["execution_state"]
        if st != prev:
            if prev is not None:
                out.append("<span class='arrow'>→</span>")
            out.append(f"<span class='st {_e(st)}' title='{_e(x['type'])}'>{_e(st)}</span>"
                       f"<span class='v'>v{x['version']}</span>")
            prev = st
    out.append("</div>")
    # turns
    turn_ids = [e.turn_id for e in events if isinstance(e, (ev.ChatCreated, ev.TurnStarted, ev.QueuedPromptPromoted))]
    out.append("<h2>Turns</h2><table><tr><th>turn</th><th>started</th><th>model and why</th><th>policy</th>"
               "<th>steps / calls / attempts</th><th>ended</th></tr>")
    turns = [explain_turn(events, str(tid), settings_at) for tid in turn_ids]
    for tid, t in zip(turn_ids, turns):
        end = t["ended"]
        ended = "—" if end is None else f"v{end['version']} {end['how']}" + (f": {end['error']['message']}" if end.get("error") else "")
        cls = " class='err'" if end and end["how"] == "failed" else ""
        policy = "all" if t["tool_policy"] is None else ", ".join(t["tool_policy"]) or "none"
        out.append(f"<tr{cls}><td><code>{_e(short(tid))}</code></td><td>v{t['started']['version']} {_e(t['started']['cause'])}</td>"
                   f"<td>{_e(t['model_explanation'])}</td><td>{_e(policy)}</td>"
                   f"<td>{t['steps']} / {len(t['tool_calls'])} / {len(t['attempts'])}</td><td>{_e(ended)}</td></tr>")
    out.append("</table>")
    # steps: what each ran with, as of then, and its fence
    steps = [(tid, st) for tid, t in zip(turn_ids, turns) for st in t["step_details"]]
    out.append("<h2>Steps</h2>")
    if not steps:
        out.append("<div class='muted'>none</div>")
    else:
        out.append("<table><tr><th>v</th><th>turn</th><th>attempt / runner</th><th>fence</th><th>model</th>"
                   "<th>context / compaction</th><th>advisor</th><th>settings</th></tr>")
        for tid, st in steps:
            ran = st["settings"]
            m = ran.get("model") if ran else None
            model = (f"{m['provider']}/{m['model']} ({m['source']}" + (f", {m['reason']}" if m.get("reason") else "")
                     + ")") if m else ("defaults" if ran else "unknown")
            limits = (f"{ran['context_limit']} · {ran['compaction_threshold']}% of {ran['compaction_trigger_limit']}"
                      if ran else "–")
            advisor = ("eligible" if ran["advisor_eligible"] else f"no ({ran.get('advisor_reason')})"
                       ) + f", {ran['advisor_remaining_uses']} left" if ran else "–"
            source = {"recorded": "recorded by the attempt", "resolved": "resolved as of then"}.get(
                st["settings_from"] or "", "–")
            out.append(f"<tr><td>{st['version']}</td><td><code>{_e(short(tid))}</code></td>"
                       f"<td>{_e(st['generation_attempt'])} / <code>{_e(short(st['runner_id']) if st['runner_id'] else '-')}"
                       f"</code></td><td>{_e(fence_text(st['fence']))}</td><td>{_e(model)}</td><td>{_e(limits)}</td>"
                       f"<td>{_e(advisor)}</td><td>{_e(source)}</td></tr>")
        out.append("</table>")
    # queued prompts
    qids = [e.prompt.queued_message_id for e in events if isinstance(e, ev.PromptQueued)]
    out.append("<h2>Queued prompts</h2>")
    if not qids:
        out.append("<div class='muted'>none</div>")
    else:
        out.append("<table><tr><th>#</th><th>queued</th><th>text</th><th>hook policy / prefix</th>"
                   "<th>edits and pauses</th><th>outcome</th><th>model</th></tr>")
        for qid in qids:
            q = explain_queued(events, qid)
            o = q["outcome"]
            outcome = "still queued" if o is None else f"v{o['version']} {o['how']}: {o['why']}"
            if o and o["how"] == "promoted":
                outcome += f" (policy {_plist(o['tool_policy_before'])} → {_plist(o['tool_policy_after'])})"
            model = o.get("model_explanation", "") if o else ""
            if o and o.get("reasoning_effort"):
                model += f" · reasoning effort {o['reasoning_effort']}"
            policy = "all" if q["hook_allowed_tools"] is None else ", ".join(q["hook_allowed_tools"]) or "none"
            edits = [f"v{x['version']} " + (f"content: {x['text']}" if x["what"] == "content" else x["what"])
                     for x in q["edits"]]
            edits += [f"v{pz['version']} paused" + (f" → v{pz['resumed']['version']} resumed "
                                                   f"({pz['resumed']['cause'].replace('_', ' ')})"
                                                   if pz["resumed"] else " (still paused)")
                      for pz in q["pauses"]]
            out.append(f"<tr><td>{qid}</td><td>v{q['queued']['version']} by <code>{_e(short(q['created_by']))}</code> "
                       f"while {_e(q['chat_state_when_queued'])}</td><td>{_e(q['text'])}</td>"
                       f"<td>{_e(policy)} / {len(q['hook_prefix'])} prefix</td>"
                       f"<td>{'<br>'.join(_e(x) for x in edits) or '–'}</td><td>{_e(outcome)}</td>"
                       f"<td>{_e(model)}</td></tr>")
        out.append("</table>")
    # tool calls
    call_ids = [p.tool_call_id for e in events for m in (getattr(e, "messages", None) or ())
                if m.role == "assistant" for p in m.parts if isinstance(p, ToolCallPart)]
    out.append("<h2>Tool calls</h2>")
    if not call_ids:
        out.append("<div class='muted'>none</div>")
    else:
        out.append("<table><tr><th>call</th><th>tool</th><th>made</th><th>policy in force</th><th>closed</th></tr>")
        for cid in dict.fromkeys(call_ids):
            t = explain_tool_call(events, cid)
            c = t["closed"]
            closed = c["how"] if c["how"] == "open" else f"v{c['version']} {c['how']}" + (f": {c['reason']}" if c.get("reason") else "")
            policy = "all" if t["policy_in_force"] is None else ", ".join(t["policy_in_force"]) or "none"
            offered = "" if t["offered_by_policy"] else " <span class='bad'>(not in policy)</span>"
            cls = " class='err'" if c.get("is_error") or c["how"] == "canceled" else ""
            out.append(f"<tr{cls}><td><code>{_e(cid)}</code></td><td>{_e(t['tool_name'])}{offered}</td>"
                       f"<td>v{t['recorded']['version']} msg {t['assistant_message_id']}</td><td>{_e(policy)}</td>"
                       f"<td>{_e(closed)}</td></tr>")
        out.append("</table>")
    # errors
    errors = [e for e in events if isinstance(e, (ev.TurnFailed, ev.IdleChatFailed, ev.InvalidStateReconciled))]
    out.append("<h2>Errors</h2>")
    if not errors:
        out.append("<div class='ok'>none recorded</div>")
    else:
        out.append("<ul>" + "".join(f"<li class='bad'>v{e.originator_version} {_e(type(e).__name__)}: "
                                    f"{_e(e.last_error.message)}{' (' + _e(e.last_error.kind) + ')' if e.last_error.kind else ''}</li>"
                                    for e in errors) + "</ul>")
    return "".join(out)
