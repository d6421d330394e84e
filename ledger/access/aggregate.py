"""The eventsourcing adapter of an API token: a ``DeciderAggregate`` around the pure core."""

from __future__ import annotations

from typing import ClassVar

from ledger.access.events import TOKEN_TOPIC
from ledger.access.state import TokenState, evolve
from ledger.base import DeciderAggregate


class ApiToken(DeciderAggregate):
    """One stream per token; ``state`` is a ``TokenState``."""

    TOPIC: ClassVar[str] = TOKEN_TOPIC
    state: TokenState
    evolve = staticmethod(evolve)
