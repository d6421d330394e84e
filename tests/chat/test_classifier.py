"""chatd's classifier table (``chatstate/state_internal_test.go``), ported: every case with upstream's name in
its id, against the ledger's ``classify`` (status, queue non-empty, archived, head under edit). The ledger's
``1P``/``P`` states (the queue-editing design, still open upstream) are the only states upstream lacks."""

from __future__ import annotations

import itertools

import pytest

from ledger.chat.state import VALID_STATES, classify

VALID = [
    ("W", "waiting", False, False), ("E0", "error", False, False), ("E1", "error", False, True),
    ("R0", "running", False, False), ("R1", "running", False, True),
    ("I0", "interrupting", False, False), ("I1", "interrupting", False, True),
    ("A0", "requires_action", False, False), ("A1", "requires_action", False, True),
    ("XW", "waiting", True, False), ("XE0", "error", True, False), ("XE1", "error", True, True),
]


@pytest.mark.parametrize("want, status, archived, queue", [pytest.param(*c, id=f"TestClassifyExecutionState_Valid/{c[0]}")
                                                           for c in VALID])
def test_TestClassifyExecutionState_Valid(want, status, archived, queue):
    assert classify(status, queue, archived) == want


@pytest.mark.parametrize("status, archived, queue", [
    pytest.param("pending", False, False, id="TestClassifyExecutionState_Invalid/UnknownStatus"),
    pytest.param("waiting", False, True, id="TestClassifyExecutionState_Invalid/WaitingWithQueue"),
    pytest.param("waiting", True, True, id="TestClassifyExecutionState_Invalid/WaitingArchivedWithQueue"),
    pytest.param("running", True, False, id="TestClassifyExecutionState_Invalid/ArchivedRunning"),
    pytest.param("interrupting", True, False, id="TestClassifyExecutionState_Invalid/ArchivedInterrupting"),
    pytest.param("requires_action", True, False, id="TestClassifyExecutionState_Invalid/ArchivedRequiresAction"),
])
def test_TestClassifyExecutionState_Invalid(status, archived, queue):
    assert classify(status, queue, archived) == "Invalid"


def test_TestClassifyExecutionState_RejectsAllUnlistedCombinations():
    """Every (status, archived, queue) tuple of an existing chat: exactly upstream's twelve classify valid."""
    statuses = ["waiting", "error", "running", "interrupting", "requires_action", "pending"]
    valid = [(s, a, q) for s, a, q in itertools.product(statuses, (False, True), (False, True))
             if classify(s, q, a) != "Invalid"]
    assert len(valid) == len(VALID) == 12
    assert {classify(s, q, a) for s, a, q in valid} == {c[0] for c in VALID}


def test_TestAllExecutionStates_Enumeration():
    """Upstream's states (N and Invalid aside) are all the ledger's; the ledger's others are the 1P/P forms."""
    upstream = {c[0] for c in VALID}
    assert len(VALID_STATES) == len(set(VALID_STATES))
    assert upstream <= set(VALID_STATES)
    assert set(VALID_STATES) - upstream == {"E1P", "R1P", "I1P", "A1P", "P", "XE1P"}


def test_TestExecutionState_Predicates_QueueNonEmpty():
    """A state's queue digit is chatd's ``QueueNonEmpty``: 1 (or 1P, P) exactly when prompts are queued."""
    for code in VALID_STATES:
        status = {"W": "waiting", "E": "error", "R": "running", "I": "interrupting", "A": "requires_action",
                  "P": "paused"}[code.lstrip("X")[0]]
        nonempty = "1" in code or code == "P"
        assert classify(status, nonempty, code.startswith("X"), code.endswith("P")) == code
        if not code.endswith("P"):
            assert classify(status, not nonempty, code.startswith("X")) != code
