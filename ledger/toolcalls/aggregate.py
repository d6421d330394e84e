"""The eventsourcing adapter of a tool-call execution: a ``DeciderAggregate`` around the pure core."""

from __future__ import annotations

from typing import ClassVar

from ledger.base import DeciderAggregate
from ledger.toolcalls.events import TOOL_CALL_EXECUTION_TOPIC
from ledger.toolcalls.state import ToolCallExecutionState, evolve


class ToolCallExecution(DeciderAggregate):
    """One stream per tool call; ``state`` is a ``ToolCallExecutionState``."""

    TOPIC: ClassVar[str] = TOOL_CALL_EXECUTION_TOPIC
    state: ToolCallExecutionState
    evolve = staticmethod(evolve)
