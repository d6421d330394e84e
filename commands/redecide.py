"""``events verify --decisions``: every recorded decision made again with the facts as of its position.

Stream-wise and flat in memory: the chats are taken one at a time (in creation order); each chat's stream
is read and folded once, and at each decision it recorded the pure rule is called again on the chat's
state just before the decision, with the catalog, the deployment, the model-config claims and the parent
chat read as of the decision's log position (``commands.asof.AsOf``, bounded caches). Then the chat's
tool-call executions are read one at a time and each claim is decided again. What is compared
(``ledger.audit.redecide``):

* each generation attempt's recorded ``settings`` (model, limits, threshold, advisor, offered tools, action);
* each recorded model resolution: a promotion's, a creation's, a send's or edit's;
* each claim of a tool-call execution (outcome, epoch, the chat holding the call by then);
* each retry payload's delay, for the attempt the chat was at;
* the deployment limits each decision recorded it applied (``limits``: queue cap, prompt bytes, attachments,
  dynamic tools, tool output bytes), against the deployment's limits at the decision's position.

A disagreement is an anomaly ``{"stream_id", "version", "notification_id", "check": "decision",
"decision", "recorded", "redecided", "differences", "reason"}``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from typing import Any, Callable
from uuid import UUID

import msgspec

from commands.asof import AsOf
from commands.catalog import deployment_limits, load_model_facts
from commands.next_action import advisor_bodies, settings_report
from commands.queries import chat_ids
from commands.toolcalls import load_execution
from ledger import positions
from ledger.audit import redecide as rd
from ledger.base import Emitter
from ledger.catalog.resolve import resolve_kept, select_for_create, validate_explicit
from ledger.catalog.values import ModelResolution
from ledger.chat import events as ev
from ledger.chat.evolve import evolve
from ledger.chat.state import ChatState
from ledger.chat.values import ToolCallPart
from ledger.chat.views import tool_call_execution_ids
from ledger.errors import LedgerError
from ledger.policy.generation import next_action
from ledger.policy.retry import retry_decision
from ledger.policy.settings import attempt_settings
from ledger.toolcalls import decide as tool_decide
from ledger.toolcalls import events as tev
from ledger.toolcalls.aggregate import ToolCallExecution
from ledger.toolcalls.identity import CallFacts
from ledger.toolcalls.state import evolve as tool_evolve


class Decisions:
    """The running tally of one ``--decisions`` pass."""

    def __init__(self) -> None:
        self.checked: Counter[str] = Counter()
        self.anomalies: list[dict[str, Any]] = []
        self.skipped: list[str] = []  # chats that do not decode or replay (verify reports why)

    def compare(self, kind: str, stream_id: UUID, version: int, nid: int, recorded: Any, redecided: Any,
                diffs: list[dict[str, Any]]) -> None:
        self.checked[kind] += 1
        if not diffs:
            return
        what = "; ".join(f"{d['field']}: recorded {_short(d.get('recorded'))}, re-decided {_short(d.get('redecided'))}"
                         for d in diffs)
        self.anomalies.append({"stream_id": str(stream_id), "version": version, "notification_id": nid,
                               "check": "decision", "decision": kind, "recorded": recorded,
                               "redecided": redecided, "differences": diffs,
                               "reason": f"{kind} re-decided differently: {what}"})

    def report(self) -> dict[str, Any]:
        return {"checked": dict(sorted(self.checked.items())), "disagreements": len(self.anomalies),
                "skipped_chats": self.skipped}


def _short(v: Any) -> str:
    text = msgspec.json.encode(v).decode() if not isinstance(v, str) else repr(v)
    return text if len(text) <= 80 else text[:79] + "…"


def check_decisions(app: Any, upto: int | None = None) -> Decisions:
    """Re-decide every decision recorded by every chat (and its tool-call executions) up to notification
    ``upto`` (default: the head now)."""
    upto = app.head() if upto is None else upto
    reader = AsOf(app, index=True)
    tally = Decisions()
    for chat_id in chat_ids(app):
        try:
            _chat(app, reader, chat_id, upto, tally)
        except Exception:  # an undecodable or unreplayable stream: verify's own pass names the event
            tally.skipped.append(str(chat_id))
    return tally


def _chat(app: Any, reader: AsOf, chat_id: UUID, upto: int, tally: Decisions) -> None:
    nids = dict(positions.positions(app.recorder, chat_id, upto))
    state: ChatState | None = None
    bodies: dict[str, Any] = {}
    calls: list[tuple[int, int, list[str]]] = []  # (assistant message id, version inserted, provider call ids)
    for e in app.stream(chat_id):
        nid = nids.get(e.originator_version)
        if nid is None:  # recorded after the head this pass reads to
            break
        if state is not None or isinstance(e, ev.ChatCreated):
            _decision(app, reader, state, e, nid, bodies, tally)
        for m in getattr(e, "messages", ()) or ():
            if m.role == "assistant":
                ids = [p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart) and not p.provider_executed]
                if ids:
                    calls.append((m.message_id, e.originator_version, ids))
        bodies.update(advisor_bodies([e]))
        state = evolve(state, e)
    if state is None:
        return
    chat_nids = sorted(nids.items())
    for amid, inserted, ids in calls:
        all_ids = [c.tool_call_id for c in state.messages[amid - 1].calls]
        for call_id, execution_id in tool_call_execution_ids(chat_id, amid, all_ids).items():
            if call_id in ids:
                _claims(app, state, amid, call_id, execution_id, inserted, chat_nids, upto, tally)


def _decision(app: Any, reader: AsOf, state: ChatState | None, e: Any, nid: int, bodies: dict[str, Any],
              tally: Decisions) -> None:
    """The decision recorded by ``e`` (if any), made again on ``state`` (the chat just before it)."""
    facts = reader.at(nid)
    sid, version = e.originator_id, e.originator_version
    if isinstance(e, ev.GenerationAttemptRecorded) and e.settings is not None and state is not None:
        report = settings_report(facts, state)
        decision = next_action(state, report.settings, advisor_result_bodies=bodies)
        again = attempt_settings(state, report.settings, report.recorded_model, decision, e.settings.source)
        tally.compare("attempt_settings", sid, version, nid, rd.plain(e.settings), rd.plain(again),
                      rd.attempt_differences(e.settings, again))
    elif isinstance(e, ev.RetryStateRecorded) and state is not None:
        if rd.recorded_delay(e.retry_state) is not None:  # (a payload without a delay records no decision)
            again, diffs = rd.redecide_retry(e.retry_state, state.generation_attempt, retry_decision)
            tally.compare("retry_delay", sid, version, nid, e.retry_state, again, diffs)
    elif getattr(e, "model_resolution", None) is not None:
        decide = resolution_rule(facts, state, e)
        if decide is not None:
            recorded, again = rd.plain(e.model_resolution), rd.outcome(decide)
            tally.compare("model_resolution", sid, version, nid, recorded, again, rd.differences(recorded, again))
    if getattr(e, "limits", None):
        # the deployment limits the decision applied, against the deployment as of its position
        again = deployment_limits(facts).used(*e.limits)
        tally.compare("limits", sid, version, nid, dict(e.limits), again, rd.differences(dict(e.limits), again))


def resolution_rule(facts: Any, state: ChatState | None, e: Any) -> Callable[[], ModelResolution] | None:
    """The rule that chose ``e.model_resolution``, bound to the facts as of ``e``'s position."""
    res = e.model_resolution
    if isinstance(e, ev.ChatCreated):
        parent = facts.load(e.parent_chat_id) if e.parent_chat_id is not None else None
        parent_model = parent.state.model_config_id if parent is not None else None
        explicit = res.model_config_id if res.source == "explicit" else None
        mf = load_model_facts(facts, e.organization_id, [explicit, parent_model], deployment=True)
        return lambda: select_for_create(mf, owner_id=e.owner_id, explicit=explicit,
                                         parent_model_config_id=parent_model, is_child=e.parent_chat_id is not None)
    assert state is not None
    if isinstance(e, ev.QueuedPromptPromoted):
        head = next((q for q in state.queue if q.queued_message_id == e.queued_message_id), None)
        mid, source = ((head.model_config_id, "explicit") if head is not None and head.model_config_id is not None
                       else (state.model_config_id, "chat_model"))
        mf = load_model_facts(facts, state.organization_id, [mid])
        if head is None:
            return lambda: _not_queued(e.queued_message_id)
        return lambda: resolve_kept(mf, mid, source)  # type: ignore[arg-type]
    if isinstance(e, ev.TurnStarted):
        if res.source == "explicit":
            mf = load_model_facts(facts, state.organization_id, [res.model_config_id])
            return lambda: validate_explicit(mf, res.model_config_id)
        kept = state.model_config_id
        return lambda: ModelResolution(model_config_id=kept, source="chat_model")  # type: ignore[arg-type]
    return None


def _not_queued(queued_message_id: int) -> ModelResolution:
    raise LedgerError("queued_message_not_found", f"queued message {queued_message_id} was not queued")


def _claims(app: Any, chat: ChatState, amid: int, call_id: str, execution_id: UUID, inserted: int,
            chat_nids: list[tuple[int, int]], upto: int, tally: Decisions) -> None:
    """Each claim of one tool-call execution decided again on the execution's state before its command
    (a first claim opens the stream in the same command: decided on no state)."""
    found = load_execution(app, execution_id)  # its stream: maybe not at its natural id (ledger.streams)
    if found is None:
        return
    stream_id = found.id
    events = app.stream(stream_id)
    if not events or not isinstance(events[0], tev.ToolCallExecutionOpened):
        return
    nids = dict(positions.positions(app.recorder, stream_id, upto))
    call = next(c for c in chat.messages[amid - 1].calls if c.tool_call_id == call_id)
    facts = CallFacts(execution_id=execution_id, chat_id=chat.chat_id, assistant_message_id=amid,
                      tool_call_id=call_id, tool_name=call.tool_name)
    chat_positions = [nid for _, nid in chat_nids]
    state = prev = None
    for e in events:
        nid = nids.get(e.originator_version)
        if nid is None:
            break
        if isinstance(e, tev.ToolCallClaimed):
            base = None if isinstance(prev, tev.ToolCallExecutionOpened) else state
            i = bisect_right(chat_positions, nid)
            chat_version = chat_nids[i - 1][0] if i else 0
            em = Emitter(stream_id, base.version if base is not None else 0, e.timestamp)
            got = rd.claim_outcome(lambda: tool_decide.claim(
                base, em, facts, topic=ToolCallExecution.TOPIC, tool_name=facts.tool_name,
                input_sha256=e.input_sha256), chat_version >= inserted)
            want = rd.claim_recorded(e)
            tally.compare("claim", execution_id, e.originator_version, nid, want, got, rd.differences(want, got))
        prev = e
        state = tool_evolve(state, e)
