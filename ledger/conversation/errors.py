"""Refusals of the conversation: stable codes, and the reference's wording where docs/codex.md §3 fixes it.

The messages marked §3 are the exact strings of the reference (docs/codex.md §3) (codex-state 0.3.0). The others name
errors the reference reports as Rust debug values (``RestartError``, Chatend's ``TransitionError`` and
``RecoveryError``); they get plain sentences here.
"""

from __future__ import annotations

from ledger.errors import LedgerError

# (code, message)
MALFORMED_TOOL_CALL = ("malformed_tool_call", "stage contains a malformed tool call")  # §3
STALE_STAGE = ("stale_stage", "stale Codex inference stage")  # §3
STEER_UNCOMMITTED = ("steer_uncommitted", "a Codex steer remains uncommitted")  # §3
TOOL_CALL_IDS_EXHAUSTED = ("tool_call_ids_exhausted", "ToolCallId space was exhausted")  # §3
STALE_STEER = ("stale_steer", "stale Codex inference steer")  # §3
FRONTIER_INCONSISTENT = ("frontier_inconsistent", "Codex submitted frontier is inconsistent")  # §3
STEER_GENERATIONS_EXHAUSTED = ("steer_generations_exhausted", "Codex steer generation was exhausted")  # §3
INVALID_STEER = ("invalid_steer", "stale or invalid Codex steer")  # §3
STALE_COMPLETION = ("stale_completion", "stale Codex inference completion")  # §3
FOREIGN_SESSION = ("foreign_session_tool_call", "recovered ToolCallId belongs to another session")  # §3

# Stall causes on the completion path (§3): recorded as the stall message; the command reports them
# as the outcome's error, because the stall itself is recorded.
COMPLETED_WITH_UNCOMMITTED_STEER = (
    "completed_with_uncommitted_steer", "Codex inference completed with an uncommitted steer")  # §3
TERMINAL_OUTPUT_BOX = ("terminal_output_box", "terminal Codex output contains a box")  # §3

NOT_STALLED = ("not_stalled", "conversation is not stalled")  # RestartError::NotStalled
NOT_RESTARTABLE = ("not_restartable", "stalled conversation is not restartable")  # RestartError::NotRestartable
JOB_IDS_EXHAUSTED = ("job_ids_exhausted", "inference job ids were exhausted")  # StateError::JobIdExhausted

UNKNOWN_TOOL_CALL = ("unknown_tool_call", "tool return names an unknown tool call")
DUPLICATE_TOOL_RETURN = ("duplicate_tool_return", "tool call already has a return")

# Transcript validation (Chatend RecoveryError) when a persisted transcript is recovered.
NON_CONTIGUOUS_BOX_ID = ("non_contiguous_box_id", "recovered box ids are not contiguous from 1")
EMPTY_AGENT_TEXT = ("empty_agent_text", "recovered agent text box is empty")
DUPLICATE_TOOL_CALL = ("duplicate_tool_call", "recovered transcript repeats a tool call id")
RECOVERED_UNKNOWN_TOOL_CALL = ("unknown_tool_call", "recovered tool return names an unknown tool call")
WRONG_ORIGINATING_CALL = ("wrong_originating_call", "recovered tool return names the wrong originating call")
RECOVERED_DUPLICATE_RETURN = ("duplicate_tool_return", "recovered tool call has more than one return")

CONVERSATION_NOT_FOUND = ("conversation_not_found", "conversation not found")
CONVERSATION_EXISTS = ("conversation_exists", "conversation already exists")


def refuse(error: tuple[str, str]) -> LedgerError:
    return LedgerError(*error)
