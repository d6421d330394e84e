"""Re-deciding recorded decisions (pure): each decision the ledger recorded is made again by the same pure
function with the facts as of its log position, and any disagreement is reported.

The facts are passed in (docs/architecture.md; docs/commands.md, "Time-aligned answers"); nothing here reads a store. The service
layer (``commands.redecide``) folds each chat once, reads the other streams as of each decision's position
and calls these functions:

* generation attempts — ``attempt_differences``: what an attempt ran with (``GenerationAttemptRecorded.
  settings``) against the settings and decision derived again from the chat's state before the attempt
  and the catalog and deployment as of it;
* model resolutions — ``outcome`` of the rule called again (a promotion's ``resolve_kept``, a creation's
  ``select_for_create``, an explicit model's ``validate_explicit``) against the recorded resolution;
* tool-call claims — ``claim_outcome`` (``ledger.toolcalls.decide.claim`` on the execution's state before
  the command, and whether the chat held the call at the claim's position) against ``claim_recorded``;
* retry delays — ``redecide_retry``: a recorded delay against ``retry_decision`` for the attempt it
  belongs to.

``differences`` lists where two answers differ (empty: re-decided equal).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import msgspec

from ledger.errors import LedgerError


def differences(a: Any, b: Any, labels: Sequence[str] = ("recorded", "redecided"), path: str = "") -> list[dict[str, Any]]:
    """Every leaf where ``a`` and ``b`` (JSON-like values) differ, as ``{"field": dotted path, labels[0]:
    value in a, labels[1]: value in b}``. Mappings are compared key by key (a missing key is None); any
    other value, lists included, is one leaf."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[dict[str, Any]] = []
        for key in list(a) + [k for k in b if k not in a]:
            out.extend(differences(a.get(key), b.get(key), labels, f"{path}.{key}" if path else str(key)))
        return out
    if a == b:
        return []
    return [{"field": path or "value", labels[0]: a, labels[1]: b}]


def plain(v: Any) -> Any:
    return msgspec.to_builtins(v) if v is not None else None


def outcome(decide: Callable[[], Any]) -> Any:
    """A rule's answer as a comparable value: what it returns, or the refusal it raises."""
    try:
        return plain(decide())
    except LedgerError as e:
        return {"refused": e.code, "message": e.message}


# -- generation attempts ------------------------------------------------------------------------------------

def attempt_differences(recorded: Any, redecided: Any) -> list[dict[str, Any]]:
    """A recorded ``AttemptSettings`` against the one re-derived at its position (``source`` says who
    supplied it, it is not a decision; an ``action`` or a limit the runner did not report is not compared)."""
    a, b = plain(recorded), plain(redecided)
    for v in (a, b):
        v.pop("source", None)
    for unreported in ("action", "max_steps_per_turn", "max_generation_retries", "max_tool_output_bytes"):
        if a.get(unreported) is None:  # (a runner's report, or settings recorded before the field existed)
            a.pop(unreported, None)
            b.pop(unreported, None)
    return differences(a, b)


# -- tool-call claims ---------------------------------------------------------------------------------------

def claim_recorded(claimed: Any) -> dict[str, Any]:
    """What a recorded ``ToolCallClaimed`` decided (and that the chat held the call: it was claimed)."""
    return {"outcome": claimed.outcome, "claim_epoch": claimed.claim_epoch, "call_in_chat": True}


def claim_outcome(decide: Callable[[], list[Any]], call_in_chat: bool) -> dict[str, Any]:
    """The claim decided again (``decide()``: the claim rule on the execution's state before the command;
    its events, or a refusal), and whether the chat held the call at the claim's position (a claim of a
    call the chat did not have yet is not a claim the ledger could have accepted)."""
    try:
        claimed = next(e for e in decide() if type(e).__name__ == "ToolCallClaimed")
        got: dict[str, Any] = {"outcome": claimed.outcome, "claim_epoch": claimed.claim_epoch}
    except LedgerError as e:
        got = {"outcome": f"refused: {e.code}", "claim_epoch": None}
    got["call_in_chat"] = call_in_chat
    return got


# -- retry delays -------------------------------------------------------------------------------------------

def recorded_delay(retry_state: dict[str, Any]) -> float | None:
    """The delay (seconds) a retry payload records: chatd's ``delay_ms``, or ``delay_seconds``."""
    if isinstance(retry_state.get("delay_ms"), (int, float)):
        return float(retry_state["delay_ms"]) / 1000
    if isinstance(retry_state.get("delay_seconds"), (int, float)):
        return float(retry_state["delay_seconds"])
    return None


def retry_after_of(retry_state: dict[str, Any]) -> float | None:
    """The provider's retry-after (seconds) a retry payload records, if it records one."""
    v = retry_state.get("retry_after")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def redecide_retry(retry_state: dict[str, Any], attempt: int,
                   decide: Callable[[int, float | None], Any]) -> tuple[Any, list[dict[str, Any]]]:
    """A recorded retry payload against ``decide(attempt, retry_after)`` (``retry_decision``) for the attempt
    the chat was at: the re-decision and the differences. The payload's ``attempt`` must be that attempt;
    its delay the schedule's, or the provider's ``retry_after`` when the payload records one and it is
    longer. A payload that does not record ``retry_after`` may carry a longer delay (a provider hint chatd
    does not record) but never a shorter one."""
    delay = recorded_delay(retry_state)
    decision = decide(attempt, retry_after_of(retry_state))
    out: list[dict[str, Any]] = []
    payload_attempt = retry_state.get("attempt")
    if payload_attempt is not None and payload_attempt != attempt:
        out.append({"field": "attempt", "recorded": payload_attempt, "redecided": attempt})
    if not decision.retry:
        out.append({"field": "retry", "recorded": True, "redecided": False})
    elif delay is not None and "retry_after" in retry_state:
        if abs(delay - decision.delay) > 1e-9:
            out.append({"field": "delay", "recorded": delay, "redecided": decision.delay})
    elif delay is not None and delay + 1e-9 < decision.delay:
        out.append({"field": "delay", "recorded": delay, "redecided": f">= {decision.delay:g}"})
    return plain(decision), out
