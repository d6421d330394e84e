"""The retry schedule (docs/chatd.md §8): Delay(n) = min(1s * 2^n, 60s), 25 attempts, retry-after wins."""

from __future__ import annotations

import pytest

from ledger.policy.retry import MAX_ATTEMPTS, delay, retry_decision, schedule


@pytest.mark.parametrize("n,seconds", [
    (0, 1), (1, 2), (2, 4), (3, 8), (4, 16), (5, 32), (6, 60), (10, 60), (100, 60), (-1, 1),
])
def test_delay(n, seconds):
    assert delay(n) == seconds  # chatretry TestDelay's table, plus a negative index (1s, like Go's loop)


@pytest.mark.parametrize("attempt,retry,seconds", [
    (-1, False, None), (0, False, None),
    (1, True, 1), (2, True, 2), (3, True, 4), (6, True, 32), (7, True, 60), (24, True, 60),
    (25, False, None), (26, False, None),
])
def test_retry_decision_boundaries(attempt, retry, seconds):
    d = retry_decision(attempt)
    assert (d.attempt, d.retry, d.delay) == (attempt, retry, seconds)


@pytest.mark.parametrize("attempt,retry_after,seconds", [
    (2, 10.0, 10.0),   # a longer retry-after wins
    (3, 1.0, 4),       # a shorter one does not
    (3, 4.0, 4),       # equal: the schedule's delay
    (24, 90.0, 90.0),  # even beyond the 60s cap
])
def test_retry_after(attempt, retry_after, seconds):
    assert retry_decision(attempt, retry_after).delay == seconds


def test_retry_after_does_not_revive_an_exhausted_or_missing_attempt():
    assert retry_decision(MAX_ATTEMPTS, 5.0).retry is False
    assert retry_decision(0, 5.0).retry is False


def test_schedule_is_24_retries_of_about_twenty_minutes():
    s = schedule()
    assert MAX_ATTEMPTS == 25 and len(s) == 24
    assert s[:7] == [1, 2, 4, 8, 16, 32, 60] and set(s[6:]) == {60}
    assert sum(s) == 63 + 18 * 60
