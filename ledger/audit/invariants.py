"""Aggregate invariants checked after each event by ``events verify`` (pure).

``check(state, event, previous)`` returns the reasons the state after ``event`` breaks an invariant of its
aggregate type (empty when it holds). ``previous`` is a small per-stream memo the checker keeps (so the
checks are incremental: linear in the events, not quadratic in the messages).
"""

from __future__ import annotations

from typing import Any

from ledger.audit.timeline import aggregate_kind
from ledger.chat.state import VALID_STATES


def check(state: Any, event: Any, memo: dict[str, Any]) -> list[str]:
    kind = aggregate_kind(state)
    f = _CHECKS.get(kind)
    return f(state, event, memo) if f else []


def _chat(s: Any, e: Any, memo: dict[str, Any]) -> list[str]:
    out = []
    st = s.execution_state
    if st not in VALID_STATES:
        out.append(f"invalid execution state {st} (status {s.status}, queue {len(s.queue)}, archived {s.archived})")
    if s.status == "waiting" and s.queue:
        out.append(f"waiting with {len(s.queue)} queued prompt(s)")
    seen = memo.get("messages", 0)
    for i in range(seen, len(s.messages)):
        if s.messages[i].message_id != i + 1:
            out.append(f"message ids not contiguous: message {s.messages[i].message_id} at position {i + 1}")
            break
    if len(s.messages) < seen:
        out.append(f"message count went down from {seen} to {len(s.messages)}")
    memo["messages"] = len(s.messages)
    ids = [q.queued_message_id for q in s.queue]
    if len(set(ids)) != len(ids):
        out.append(f"duplicate queued message ids {ids}")
    positions = [q.position for q in s.queue]
    if any(a >= b for a, b in zip(positions, positions[1:])):
        out.append(f"queue not ordered by position {positions}")
    if ids and max(ids) >= s.next_queued_message_id:
        out.append(f"queued id {max(ids)} not below next_queued_message_id {s.next_queued_message_id}")
    editing = [q.queued_message_id for q in s.queue if q.editing_since is not None]
    if len(editing) > 1:
        out.append(f"more than one queued prompt under edit {editing}")
    # (No queue length bound: the cap is per send, ``max_queue_size``, default 20.)
    if s.version != e.originator_version:
        out.append(f"state version {s.version} != event version {e.originator_version}")
    return out


def _catalog(s: Any, e: Any, memo: dict[str, Any]) -> list[str]:
    # (The default may point at a just-deleted config between the events of one command: the
    # DefaultModelConfigChanged that moves it follows in the same command, so that is not checked here.)
    out = []
    both = set(s.configs) & s.deleted
    if both:
        out.append(f"deleted model configs still live: {sorted(map(str, both))}")
    return out


def _conversation(s: Any, e: Any, memo: dict[str, Any]) -> list[str]:
    out = []
    seen = memo.get("boxes", 0)
    for i in range(seen, len(s.boxes)):
        if s.boxes[i].id != i + 1:
            out.append(f"box ids not contiguous: box {s.boxes[i].id} at position {i + 1}")
            break
    memo["boxes"] = len(s.boxes)
    if s.submitted > len(s.boxes):
        out.append(f"submitted {s.submitted} beyond {len(s.boxes)} boxes")
    return out


def _tool_call(s: Any, e: Any, memo: dict[str, Any]) -> list[str]:
    out = []
    if type(e).__name__ == "ToolCallClaimed":
        if e.claim_epoch != memo.get("epoch", 0) + 1:
            out.append(f"claim epoch {e.claim_epoch} does not follow {memo.get('epoch', 0)}")
        if (e.outcome == "run") != (e.claim_epoch == 1):
            out.append(f"claim {e.claim_epoch} has outcome {e.outcome}")
        memo["epoch"] = e.claim_epoch
    if type(e).__name__ == "ToolCallResponseRecorded":
        if memo.get("response"):
            out.append("a second response was recorded")
        memo["response"] = True
    return out


_CHECKS = {"chat": _chat, "catalog": _catalog, "conversation": _conversation, "tool_call_execution": _tool_call}
