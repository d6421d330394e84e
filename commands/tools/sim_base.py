"""What the simulator's parts share: its ids, tool names and the per-chat bookkeeping (``SimChat``)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

NAMESPACE = UUID("5f3c2a8e-9b1d-4e6f-a7c0-51a1a7e5c0de")
LOCAL_TOOLS = ("read_file", "execute", "search", "write_file")
DYNAMIC_TOOLS = ("ask_user",)
USERS_PER_ORG = 4
#: the first command the worker runs for each action (what "did what next-action said" means)
FIRST_COMMAND = {
    "generate_assistant": ("record_generation_attempt",),
    "execute_local_tools": ("claim_tool_call", "commit_step"),
    "enter_requires_action": ("enter_requires_action",),
    "compact": ("commit_step",),
    "finish_turn": ("finish_turn",),
    "error": ("finish_error",),
}
class SimChat:
    __slots__ = ("chat_id", "org", "owner", "parent", "owned", "turns_left", "tokens", "seq", "failing",
                 "children", "ticks", "done", "over_limit")

    def __init__(self, chat_id: str, org: dict[str, Any], owner: str, parent: SimChat | None, owned: bool,
                 turns: int) -> None:
        self.chat_id, self.org, self.owner, self.parent, self.owned = chat_id, org, owner, parent, owned
        self.turns_left = turns
        self.tokens = 0
        self.seq = 0
        self.failing: str | None = None
        self.children: list[SimChat] = []
        self.ticks = 0
        self.done = False
        self.over_limit = False
