"""The chat decider's rules shared by its transitions: chatd's transition matrix, the exact texts,
fences, tool-policy narrowing, titles and deterministic turn ids (docs/chatd.md §2–§3)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID, uuid5

from ledger.chat.state import ChatState
from ledger.chat.values import (
    Fence,
    Part,
    TextPart,
)
from ledger.errors import LedgerError, invalid_command, transition_not_allowed

# -- docs/chatd.md §2.1: cancellation reasons (exact texts) -----------------------------------------------
NEW_USER_MESSAGE = "Tool execution interrupted by new user message"
QUEUED_PROMOTION = "Tool execution interrupted by queued message promotion"
USER_MESSAGE = "Tool execution interrupted by user message"
MESSAGE_EDIT = "Tool execution interrupted by message edit"
INTERRUPTED_BY_USER = "Tool execution interrupted by user"
TIMED_OUT = "Tool execution timed out"
CHAT_ENDED = "Tool execution interrupted because the chat was ended"
INVALID_STATE_CANCELED = "Tool execution canceled due to invalid chat state"
#: ReconcileInvalidState's default ``last_error`` (docs/chatd.md §4.1)
INVALID_STATE_ERROR = "chat was in an invalid state; send a new message or edit history to continue"
PAUSED_HEAD_UNDER_EDIT = ("paused_queued_head_under_edit",
                          "chat is paused at a queued message under edit; finish editing, send, or remove it first")

REQUIRES_ACTION_TIMEOUT = timedelta(minutes=5)
TITLE_MAX = 200
TURN_NAMESPACE = UUID("6f0b7c8e-2d4b-5c1e-9a57-3f1c2b0d9e41")
NIL_CHAT_ID = UUID(int=0)

_LIVE = ("W", "E0", "E1", "R0", "R1", "I0", "I1", "A0", "A1")
#: the idle execution states: no turn runs. A command that resumes one of them into running clears the
#: chat's ownership (``Draft.resumed_from_idle``; chatd's ``TestResumeFromIdleClearsOwnership``)
IDLE_STATES = frozenset(("W", "E0", "E1", "E1P", "P"))
#: busy or error states whose queue head is under edit ("1P")
_HEAD_UNDER_EDIT = ("E1P", "R1P", "I1P", "A1P")

#: transition -> {from execution state: allowed resulting states} (docs/chatd.md §3, docs/commands.md, "Conventions", and the
#: "1P" matrix of docs/chatd.md §4.1: a 1P state admits what its "1" sibling admits, P is idle)
MATRIX: dict[str, dict[str, tuple[str, ...]]] = {
    "SetArchived": {"W": ("XW",), "E0": ("XE0",), "E1": ("XE1",), "E1P": ("XE1P",),
                    "XW": ("W",), "XE0": ("E0",), "XE1": ("E1",), "XE1P": ("E1P",)},
    "SendMessage": {"W": ("R0",), "E0": ("R0",), "E1": ("R1", "R1P"), "E1P": ("E1P",), "R0": ("R1",),
                    "R1": ("R1",), "R1P": ("R1P",), "I0": ("I1",), "I1": ("I1",), "I1P": ("I1P",),
                    "A0": ("A1",), "A1": ("A1",), "A1P": ("A1P",), "P": ("P",)},
    "SendMessageInterrupt": {"W": ("R0",), "E0": ("R0",), "E1": ("R1", "R1P"), "E1P": ("E1P",),
                             "R0": ("I1",), "R1": ("I1",), "R1P": ("I1P",), "I0": ("I1",), "I1": ("I1",),
                             "I1P": ("I1P",), "A0": ("R1",), "A1": ("R1",), "A1P": ("R1P",), "P": ("P",)},
    "EditMessage": {s: ("R0",) for s in _LIVE + _HEAD_UNDER_EDIT + ("P",)},
    "RequestCompaction": {"W": ("R0",), "E0": ("R0",), "E1": ("R1",), "E1P": ("R1P",)},
    "ClearContext": {"W": ("W",), "E0": ("W",)},
    "DeleteQueuedMessage": {"E1": ("E0", "E1", "E1P"), "E1P": ("E0", "E1", "E1P"),
                            "R1": ("R0", "R1", "R1P"), "R1P": ("R0", "R1", "R1P"),
                            "I1": ("I0", "I1", "I1P"), "I1P": ("I0", "I1", "I1P"),
                            "A1": ("A0", "A1", "A1P"), "A1P": ("A0", "A1", "A1P"),
                            "P": ("P", "W", "R0", "R1")},
    "PromoteQueuedMessage": {"E1": ("R0", "R1", "R1P"), "E1P": ("R0", "R1", "R1P"), "R1": ("I1",),
                             "R1P": ("I1",), "I1": ("I1",), "I1P": ("I1",), "A1": ("R0", "R1", "R1P"),
                             "A1P": ("R0", "R1", "R1P"), "P": ("R0", "R1", "R1P")},
    "EditQueuedMessage": {"E1": ("E1", "E1P"), "E1P": ("E1", "E1P"), "R1": ("R1", "R1P"),
                          "R1P": ("R1", "R1P"), "I1": ("I1", "I1P"), "I1P": ("I1", "I1P"),
                          "A1": ("A1", "A1P"), "A1P": ("A1", "A1P"), "P": ("P", "R0", "R1")},
    "Interrupt": {"R0": ("I0",), "R1": ("I1",), "R1P": ("I1P",), "A0": ("R0",), "A1": ("R1",),
                  "A1P": ("R1P",)},
    "CompleteRequiresAction": {"A0": ("R0",), "A1": ("R1",), "A1P": ("R1P",)},
    "CancelRequiresAction": {"A0": ("R0",), "A1": ("R1",), "A1P": ("R1P",)},
    "RecordGenerationAttempt": {"R0": ("R0",), "R1": ("R1",), "R1P": ("R1P",)},
    "RecordRetryState": {"R0": ("R0",), "R1": ("R1",), "R1P": ("R1P",)},
    "CommitStep": {"R0": ("R0",), "R1": ("R1",), "R1P": ("R1P",)},
    "EnterRequiresAction": {"R0": ("A0",), "R1": ("A1",), "R1P": ("A1P",)},
    "FinishTurn": {"R0": ("W",), "R1": ("R0", "R1", "R1P"), "R1P": ("P",)},
    "FinishInterruption": {"I0": ("W",), "I1": ("R0", "R1", "R1P"), "I1P": ("P",)},
    "FinishError": {"W": ("E0",), "R0": ("E0",), "R1": ("E1",), "R1P": ("E1P",)},
    "FailIdle": {"W": ("E0",)},
    # Inferred (docs/chatd.md §4.1): EndChat from a 1P state clears the queue with its edit marker
    # like any queue; P hosts no turn, so no hook outcome can end it.
    "EndChat": {s: ("XW",) for s in _LIVE + _HEAD_UNDER_EDIT},
    "ReconcileInvalidState": {"Invalid": ("E0", "E1", "E1P")},
}
#: Transition names as they appear in error messages.
TRANSITION_NAME = {"SendMessageInterrupt": "SendMessage"}


def require(state: ChatState, transition: str) -> str:
    """The chat's execution state, if ``transition`` is allowed from it; else the matrix error. From
    Invalid only ReconcileInvalidState is allowed (every other transition: ``invalid_state``)."""
    st = state.execution_state
    if st == "Invalid" and transition != "ReconcileInvalidState":
        raise LedgerError("invalid_state", "chat is in an invalid execution state")
    if st not in MATRIX[transition]:
        reason = "reconcile is only valid for invalid states" if transition == "ReconcileInvalidState" else None
        raise transition_not_allowed(TRANSITION_NAME.get(transition, transition), st, reason)
    return st


# -- fences (chatd ``loadChatForTask`` / ``verifyTaskFence`` / ``generationAttemptFence``) ----------------

#: the status each worker command requires of the chat when it carries a fence (chatd loads the chat for
#: the task with that status: the generation task runs on ``running``, the interrupt task on ``interrupting``)
FENCED_STATUS = {
    "CommitStep": "running", "FinishTurn": "running", "FinishError": "running", "EnterRequiresAction": "running",
    "RecordRetryState": "running", "RecordGenerationAttempt": "running", "FinishInterruption": "interrupting",
}


def fence_mismatch(message: str) -> LedgerError:
    return LedgerError("fence_mismatch", message)


def check_fence(state: ChatState, fence: Fence | None, transition: str) -> None:
    """Refuse a worker command whose fence does not match the chat as it is, with chatd's wording and in
    chatd's order: the owner, the status the task requires, not archived, the history version, then the
    generation attempt (``<stored> != <given>``). No fence: nothing is checked (the command behaves as
    without fences)."""
    if fence is None:
        return
    if fence.runner_id is not None and (state.worker_id is None or state.runner_id != fence.runner_id):
        raise fence_mismatch("chat not owned by task")
    status = FENCED_STATUS[transition]
    if state.status != status:
        raise fence_mismatch(f"chat status mismatch: {state.status} != {status}")
    if state.archived:
        raise fence_mismatch("chat archived")
    if fence.history_version is not None and state.history_version != fence.history_version:
        raise fence_mismatch(f"chat history version mismatch: {state.history_version} != {fence.history_version}")
    if fence.generation_attempt is not None and state.generation_attempt != fence.generation_attempt:
        raise fence_mismatch(f"generation fence mismatch: {state.generation_attempt} != {fence.generation_attempt}")


def fence_of(state: ChatState) -> Fence:
    """The fence a worker acting on the chat as it is now sends with its next command (``next-action``)."""
    return Fence(runner_id=state.runner_id, history_version=state.history_version,
                 generation_attempt=state.generation_attempt)


def worker_facts(state: ChatState, fence: Fence | None) -> dict[str, Any]:
    """What a worker event records of the command: the attempt and runner it belongs to, and its fence."""
    return {"generation_attempt": state.generation_attempt, "runner_id": state.runner_id, "fence": fence}


class SettingsNeeded(Exception):
    """Raised by ``record_generation_attempt`` when no settings were given and the checks passed: the
    handler resolves what the attempt runs with at this position and decides again with them."""


def turn_id_for(chat_id: UUID, kind: str, number: int) -> UUID:
    return uuid5(TURN_NAMESPACE, f"{chat_id}/{kind}/{number}")


def fallback_title(parts: list[Part]) -> str:
    text = " ".join("".join(p.text for p in parts if isinstance(p, TextPart)).split())
    if not text:
        return "New chat"
    return text if len(text) <= 80 else text[:79].rstrip() + "…"


def normalize_title(title: str) -> str:
    title = title.strip()
    if not title:
        raise invalid_command("Title cannot be empty.")
    if len(title) > TITLE_MAX:
        raise invalid_command(f"Title must be at most {TITLE_MAX} characters.")
    return title


def narrow_tool_policy(current: list[str] | None, incoming: list[str] | None) -> list[str] | None:
    """Hook tool policy narrowing (TR-H NarrowHookAllowedTools): None incoming keeps the current policy;
    no current policy adopts the incoming one; otherwise the intersection in the incoming order. Never widens."""
    if incoming is None:
        return current
    deduped = list(dict.fromkeys(incoming))
    if current is None:
        return deduped
    allowed = set(current)
    return [t for t in deduped if t in allowed]
