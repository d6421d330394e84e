"""Every row of the transition matrix (docs/chatd.md §3 and the "1P" matrix of docs/chatd.md §4.1):
accepted from each allowed state with the right resulting state; refused from every other state with
``transition_not_allowed`` and the exact message (from Invalid: ``invalid_state``), leaving the stream
version unchanged. The states include the queue-editing ones (E1P, R1P, I1P, A1P, P, XE1P: prompt 1, the
head, under edit) and Invalid (a running chat archived by an imported event)."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.chat.decide import MATRIX
from ledger.errors import LedgerError
from tests.chat.helpers import RESOLVE_DYNAMIC, STATES as VALID, chat_in, chat_state, run

STATES = VALID + ("Invalid",)

# transition -> (command without chat_id, expected result state per from-state when the matrix allows several)
COMMANDS: dict[str, dict[str, Any]] = {
    "SendMessage": {"type": "send_message", "text": "next"},
    "SendMessageInterrupt": {"type": "send_message", "text": "now", "busy_behavior": "interrupt"},
    "EditMessage": {"type": "edit_message", "message_id": 1, "text": "edited"},
    "RequestCompaction": {"type": "request_compaction"},
    "ClearContext": {"type": "clear_context"},
    "DeleteQueuedMessage": {"type": "delete_queued_message", "queued_message_id": 1},
    "PromoteQueuedMessage": {"type": "promote_queued_message", "queued_message_id": 1},
    "Interrupt": {"type": "interrupt"},
    "CompleteRequiresAction": {"type": "complete_requires_action",
                               "results": [{"tool_call_id": "call_dyn", "output": "\"main\""}]},
    "CancelRequiresAction": {"type": "cancel_requires_action"},
    "RecordGenerationAttempt": {"type": "record_generation_attempt"},
    "RecordRetryState": {"type": "record_retry_state", "retry_state": {"attempt": 1}},
    "CommitStep": {"type": "commit_step", "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "x"}]}]},
    "EnterRequiresAction": {"type": "enter_requires_action"},
    "FinishTurn": {"type": "finish_turn"},
    "FinishInterruption": {"type": "finish_interruption", "partial_messages": [RESOLVE_DYNAMIC]},
    "FinishError": {"type": "finish_error", "error": {"message": "provider failed", "kind": "generic"}},
    "FailIdle": {"type": "fail_idle", "error": "agent unreachable"},
    "EndChat": {"type": "end_chat"},
    "EditQueuedMessage": {"type": "edit_queued_message", "queued_message_id": 1, "editing": True},
    "ReconcileInvalidState": {"type": "reconcile_invalid_state"},
}
# With one queued prompt, which of the matrix's outputs each from-state leads to.
EXPECTED = {
    ("DeleteQueuedMessage", "E1"): "E0", ("DeleteQueuedMessage", "R1"): "R0",
    ("DeleteQueuedMessage", "I1"): "I0", ("DeleteQueuedMessage", "A1"): "A0",
    ("PromoteQueuedMessage", "E1"): "R0", ("PromoteQueuedMessage", "A1"): "R0",
    ("FinishTurn", "R1"): "R0", ("FinishInterruption", "I1"): "R0",
    # a head under edit: deleting it empties the queue (from P: resumes to waiting)
    ("DeleteQueuedMessage", "E1P"): "E0", ("DeleteQueuedMessage", "R1P"): "R0",
    ("DeleteQueuedMessage", "I1P"): "I0", ("DeleteQueuedMessage", "A1P"): "A0", ("DeleteQueuedMessage", "P"): "W",
    # sending it now ends its edit and promotes it
    ("PromoteQueuedMessage", "E1P"): "R0", ("PromoteQueuedMessage", "A1P"): "R0", ("PromoteQueuedMessage", "P"): "R0",
    # beginning the edit of the head (a no-op when it is already under edit)
    ("EditQueuedMessage", "E1"): "E1P", ("EditQueuedMessage", "R1"): "R1P", ("EditQueuedMessage", "I1"): "I1P",
    ("EditQueuedMessage", "A1"): "A1P", ("EditQueuedMessage", "E1P"): "E1P", ("EditQueuedMessage", "R1P"): "R1P",
    ("EditQueuedMessage", "I1P"): "I1P", ("EditQueuedMessage", "A1P"): "A1P", ("EditQueuedMessage", "P"): "P",
    ("ReconcileInvalidState", "Invalid"): "E1",  # the queue is kept
}
NAME = {"SendMessageInterrupt": "SendMessage"}
REASON = {"ReconcileInvalidState": ": reconcile is only valid for invalid states"}


def _cases(allowed: bool) -> list[tuple[str, str]]:
    cases = []
    for transition in COMMANDS:
        for state in STATES:
            if (state in MATRIX[transition]) == allowed:
                cases.append((transition, state))
    return cases


def test_every_matrix_transition_has_a_command() -> None:
    assert set(COMMANDS) | {"SetArchived"} == set(MATRIX)


@pytest.mark.parametrize("transition,state", _cases(allowed=True))
def test_allowed(memory_app, transition: str, state: str) -> None:
    chat_id = chat_in(memory_app, state)
    result = run(memory_app, chat_id=chat_id, **COMMANDS[transition])
    targets = MATRIX[transition][state]
    expected = EXPECTED.get((transition, state), targets[0])
    assert expected in targets
    assert result["execution_state"] == expected
    assert chat_state(memory_app, chat_id).execution_state == expected


@pytest.mark.parametrize("transition,state", _cases(allowed=False))
def test_refused(memory_app, transition: str, state: str) -> None:
    chat_id = chat_in(memory_app, state)
    before = chat_state(memory_app, chat_id)
    head = memory_app.head()
    with pytest.raises(LedgerError) as err:
        run(memory_app, chat_id=chat_id, **COMMANDS[transition])
    if state == "Invalid":
        assert (err.value.code, err.value.message) == ("invalid_state", "chat is in an invalid execution state")
    else:
        assert err.value.code == "transition_not_allowed"
        assert err.value.message == (f"chat state transition {NAME.get(transition, transition)} not allowed from "
                                     f"state {state}{REASON.get(transition, '')}")
    assert chat_state(memory_app, chat_id) == before
    assert memory_app.head() == head


@pytest.mark.parametrize("state", STATES)
def test_set_archived(memory_app, state: str) -> None:
    """Archive from W/E0/E1/E1P, unarchive from XW/XE0/XE1/XE1P; busy and paused states refuse."""
    chat_id = chat_in(memory_app, state)
    archived = not chat_state(memory_app, chat_id).archived
    version = chat_state(memory_app, chat_id).version
    if state in MATRIX["SetArchived"]:
        result = run(memory_app, type="set_archived", chat_id=chat_id, archived=archived)
        assert result["execution_state"] == MATRIX["SetArchived"][state][0]
    else:
        with pytest.raises(LedgerError) as err:
            run(memory_app, type="set_archived", chat_id=chat_id, archived=archived)
        if state == "Invalid":
            assert err.value.code == "invalid_state"
        else:
            assert err.value.message == f"chat state transition SetArchived not allowed from state {state}"
        assert chat_state(memory_app, chat_id).version == version


@pytest.mark.parametrize("state", VALID)
def test_acquire_and_abandon_in_any_state(memory_app, state: str) -> None:
    chat_id = chat_in(memory_app, state)
    before = chat_state(memory_app, chat_id)
    run(memory_app, type="abandon", chat_id=chat_id)
    after = chat_state(memory_app, chat_id)
    assert after.worker_id is None and after.execution_state == before.execution_state
    with pytest.raises(LedgerError) as err:
        run(memory_app, type="abandon", chat_id=chat_id)
    assert (err.value.code, err.value.message) == ("not_owned", "chat is not owned")
    run(memory_app, type="acquire", chat_id=chat_id, worker_id=str(before.worker_id), runner_id=str(before.runner_id))
    assert chat_state(memory_app, chat_id).worker_id == before.worker_id
