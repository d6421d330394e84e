"""Refusals of tool-call execution commands: stable codes and messages (add, never rename)."""

from __future__ import annotations

from ledger.errors import LedgerError

# (code, message)
TOOL_CALL_NOT_FOUND = ("tool_call_not_found", "the assistant message has no tool call with that id")
TOOL_CALL_NO_IDENTITY = (
    "tool_call_no_identity",
    "tool call has no execution id: its provider tool call id is empty or repeated in the message",
)
TOOL_CALL_CANCELED = ("tool_call_canceled", "tool call was canceled; it will not run")
TOOL_CALL_NOT_CLAIMED = ("tool_call_not_claimed", "tool call has not been claimed")
TOOL_CALL_INPUT_MISMATCH = ("tool_call_input_mismatch", "input_sha256 does not match the first claim of this tool call")
TOOL_CALL_NOT_CANCELABLE = (
    "tool_call_not_cancelable", "only execute, edit_files and write_file calls can be canceled")
TOOL_CALL_RESOLVED = ("tool_call_resolved", "tool call already has a result in the chat; there is nothing to cancel")
TOOL_CALL_CLAIM_STALE = ("tool_call_claim_stale", "the claim epoch is not the call's current claim")
TOOL_CALL_NOT_RUNNING = ("tool_call_not_running", "the call's run has ended or was given up; no process to record")
TOOL_CALL_RESPONSE_RECORDED = (
    "tool_call_response_recorded", "a different response is already recorded for this tool call")


def tool_not_allowed(tool_name: str, policy: list[str]) -> LedgerError:
    allowed = ", ".join(policy) if policy else "no tools"
    return LedgerError("tool_not_allowed", f"tool {tool_name!r} is not allowed by the chat's tool policy in force "
                                           f"({allowed}); it will not run")


def refuse(error: tuple[str, str]) -> LedgerError:
    return LedgerError(*error)
