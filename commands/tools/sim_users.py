"""The simulated users (``commands.tools.simulate``): new turns, queued prompts, interrupts, edits, results."""

from __future__ import annotations

import json
from typing import Any

from commands.tools.sim_base import DYNAMIC_TOOLS, LOCAL_TOOLS, SimChat
from ledger.chat.state import ChatState, has_compactable_history, outstanding_tool_calls
from ledger.policy.tools import ADVISOR


class UserRole:
    """Mixed into ``Simulation``: what the users do between worker steps."""

    # -- the users -----------------------------------------------------------------------------------

    def _prompt(self, c: SimChat, what: str) -> dict[str, Any]:
        rng = self.rng
        fields: dict[str, Any] = {"chat_id": c.chat_id, "text": f"{what} {c.seq}"}
        if rng.random() < 0.3:
            fields["prefix_messages"] = [{"role": "user", "visibility": "model",
                                          "parts": [{"type": "text", "text": "hook: repository context"}]}]
        if rng.random() < 0.2:
            fields["hook_allowed_tools"] = rng.sample(LOCAL_TOOLS + DYNAMIC_TOOLS + (ADVISOR,), rng.randint(1, 4))
        if rng.random() < 0.05 and not c.org["legacy_disabled"]:
            fields["model_config_id"] = c.org["legacy"]
        return fields

    def _editable(self, state: ChatState) -> list[int]:
        return [m.message_id for m in state.messages
                if m.role == "user" and not m.deleted and m.visibility != "model" and not m.compressed]

    def user_while_running(self, c: SimChat, state: ChatState) -> None:
        rng = self.rng
        r = rng.random()
        if r < 0.35 and len(state.queue) < 5:
            self.stats["queued_prompts"] += 1
            self.cmd("send_message", **self._prompt(c, "also"))
        elif r < 0.45:
            self.stats["send_interrupts"] += 1
            self.cmd("send_message", **self._prompt(c, "stop, instead"), busy_behavior="interrupt")
        elif r < 0.6:
            self.stats["interrupts:" + ("owned" if state.owned else "unowned")] += 1
            self.cmd("interrupt", chat_id=c.chat_id)
        elif r < 0.7 and state.queue:
            self.stats["queued_deleted"] += 1
            self.cmd("delete_queued_message", chat_id=c.chat_id,
                     queued_message_id=rng.choice(state.queue).queued_message_id)
        elif r < 0.8 and state.queue:
            self.stats["queued_promoted"] += 1
            self.cmd("promote_queued_message", chat_id=c.chat_id,
                     queued_message_id=rng.choice(state.queue).queued_message_id)
        elif r < 0.9 and self._editable(state):
            self.stats["edits"] += 1
            self.cmd("edit_message", chat_id=c.chat_id, message_id=rng.choice(self._editable(state)),
                     text=f"edited request {c.seq}")
        else:
            self.cmd("request_compaction", expect=("transition_not_allowed",), chat_id=c.chat_id)  # refused: running

    def user_requires_action(self, c: SimChat, state: ChatState) -> None:
        rng = self.rng
        pending = outstanding_tool_calls(state, dynamic_only=True)
        r = rng.random()
        if r < 0.72:
            results = [{"tool_call_id": p.tool_call_id, "output": json.dumps({"answer": "yes"})} for p in pending]
            if len(results) > 1 and rng.random() < 0.15:
                self.cmd("complete_requires_action", expect=("tool_result_missing",), chat_id=c.chat_id,
                         results=results[:-1])
            self.stats["requires_action_completed"] += 1
            self.cmd("complete_requires_action", chat_id=c.chat_id, results=results, created_by=c.owner)
        elif r < 0.85:
            self.stats["requires_action_canceled"] += 1
            self.cmd("cancel_requires_action", chat_id=c.chat_id)
        elif r < 0.95:
            self.stats["interrupts:requires_action"] += 1
            self.cmd("interrupt", chat_id=c.chat_id)
        else:
            self.stats["send_interrupts"] += 1
            self.cmd("send_message", **self._prompt(c, "never mind,"), busy_behavior="interrupt")

    def user_waiting(self, c: SimChat, state: ChatState, active_chats: list[SimChat]) -> None:
        rng = self.rng
        if c.turns_left <= 0:
            self.finish_life(c, state)
            return
        r = rng.random()
        if r < 0.1 and self._editable(state):
            self.stats["edits"] += 1
            self.cmd("edit_message", chat_id=c.chat_id, message_id=rng.choice(self._editable(state)),
                     text=f"let me rephrase {c.seq}", created_by=c.owner)
        elif r < 0.2 and has_compactable_history(state):
            self.stats["compaction_requests"] += 1
            self.cmd("request_compaction", chat_id=c.chat_id)
            return  # not a turn of its own
        elif r < 0.32 and c.parent is None and self.created < self.n_chats:
            child = self.create_chat(parent=c)
            if child is not None:
                active_chats.append(child)
            return
        else:
            self.cmd("send_message", **self._prompt(c, "next"))
        c.turns_left -= 1

    def user_error(self, c: SimChat, state: ChatState) -> None:
        rng = self.rng
        err = state.last_error
        if err is not None and err.kind == "config" and has_compactable_history(state) and rng.random() < 0.8:
            self.stats["compaction_requests"] += 1
            self.cmd("request_compaction", chat_id=c.chat_id)
            return
        if c.turns_left > 0 and rng.random() < 0.8:
            c.turns_left -= 1
            self.cmd("send_message", **self._prompt(c, "try again"))
            return
        self.finish_life(c, state)

    def finish_life(self, c: SimChat, state: ChatState) -> None:
        rng = self.rng
        r = rng.random()
        if c.parent is None and r < 0.45:
            self.stats["archived"] += 1
            if self.cmd("set_archived", expect=("transition_not_allowed",), chat_id=c.chat_id, archived=True) is None:
                self.cmd("end_chat", chat_id=c.chat_id)  # a child still busy: end the family instead
        elif r < 0.7:
            self.stats["ended"] += 1
            self.cmd("end_chat", chat_id=c.chat_id)
        c.done = True
