"""The generation retry schedule (docs/chatd.md §8, chatd ``chatretry`` and ``recordGenerationRetry``).

Durations are seconds (floats). ``attempt`` is the chat's ``generation_attempt``: 1 for the first model
or tool action of a history version, counted up by ``record_generation_attempt``.
"""

from __future__ import annotations

import msgspec

from ledger.catalog.values import DEFAULT_LIMITS

INITIAL_DELAY = 1.0
MAX_DELAY = 60.0
MAX_ATTEMPTS = DEFAULT_LIMITS["max_generation_retries"]


def delay(n: int) -> float:
    """Backoff before retry ``n`` (0-indexed): ``min(1s * 2**n, 60s)``; a negative ``n`` gives 1s."""
    d = INITIAL_DELAY
    for _ in range(max(n, 0)):
        d *= 2
        if d >= MAX_DELAY:
            return MAX_DELAY
    return d


class RetryDecision(msgspec.Struct, frozen=True, kw_only=True):
    """Whether a retryable failure of ``attempt`` is retried, and after how long (None when not)."""

    attempt: int
    retry: bool
    delay: float | None = None


def retry_decision(attempt: int, retry_after: float | None = None, *,
                   max_attempts: int = MAX_ATTEMPTS) -> RetryDecision:
    """The worker's decision after a retryable failure of generation attempt ``attempt``.

    No retry at ``attempt <= 0`` (no attempt recorded) or ``attempt >= max_attempts`` (chatd's
    ``MaxAttempts``, or the deployment's ``limits.max_generation_retries``: the chat then finishes with an
    error). Otherwise the delay is ``delay(attempt - 1)``, unless the provider's retry-after is longer, in
    which case the retry-after wins.
    """
    if attempt <= 0 or attempt >= max_attempts:
        return RetryDecision(attempt=attempt, retry=False)
    wait = delay(attempt - 1)
    if retry_after is not None and retry_after > wait:
        wait = retry_after
    return RetryDecision(attempt=attempt, retry=True, delay=wait)


def schedule() -> list[float]:
    """The delays of every retry the schedule allows, attempt 1 to MAX_ATTEMPTS - 1 (without retry-after)."""
    return [delay(n - 1) for n in range(1, MAX_ATTEMPTS)]
