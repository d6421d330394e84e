"""The token index looks at the log once for a burst of callers: those that asked while another caller's
look was under way take the outcome of the next look, which began after they asked — its failure too.
So a database that has gone costs a burst of requests two waits (the look under way, and the next), not
one wait each in turn (which had eight clients answered one every 2 s, the last after 16 s)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError

from commands import tokens
from commands.tokens import TokenIndex, issue_token
from tests.catalog.kit import ALICE


class _CountingLock:
    """The index's lock, counting the callers that have asked for it (held or waiting)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asked = 0

    def __enter__(self) -> None:
        self.asked += 1
        self._lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()


def test_callers_waiting_on_a_look_share_the_next_one(memory_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = issue_token(memory_app, user=ALICE, deployment_admin=True)["secret"]
    real = tokens._token_events
    looks: list[str] = []
    first_began, release = threading.Event(), threading.Event()
    down = [True]

    def token_events(app: Any, after: int, limit: int = 1000) -> list[Any]:
        looks.append("look")
        if len(looks) == 1:
            first_began.set()
            release.wait(10)
        if down[0]:
            raise OperationalError("server closed the connection unexpectedly")
        return real(app, after, limit)

    monkeypatch.setattr(tokens, "_token_events", token_events)
    index = TokenIndex(memory_app)
    index._lock = lock = _CountingLock()  # type: ignore[assignment]
    outcomes: list[Any] = []

    def find() -> None:
        try:
            outcomes.append(index.find(secret))
        except OperationalError as e:
            outcomes.append(e)

    first = threading.Thread(target=find)
    first.start()
    assert first_began.wait(10)
    waiting = [threading.Thread(target=find) for _ in range(5)]
    for t in waiting:
        t.start()
    deadline = time.monotonic() + 10
    while lock.asked < 6:  # every caller has asked for the lock (five of them wait on it)
        assert time.monotonic() < deadline, lock.asked
        time.sleep(0.001)  # polling the condition above, not standing in for it
    release.set()
    for t in [first, *waiting]:
        t.join(10)
    assert len(outcomes) == 6 and all(isinstance(o, OperationalError) for o in outcomes), outcomes
    assert len(looks) == 2  # the first caller's look, and one more for the five that waited on it

    down[0] = False  # back: the next caller looks again (a failure is not remembered as an answer)
    assert str(index.find(secret).user) == ALICE
    assert len(looks) == 3
    assert str(index.find(secret).user) == ALICE and len(looks) == 3  # fresh: from memory
