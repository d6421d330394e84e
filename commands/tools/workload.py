"""A deterministic synthetic chat workload, decided by the real pure core, for benchmarks.

Each chat runs turns of assistant steps with local and dynamic tool calls, results, requires-action,
queued prompts with hook policies, interrupts and errors. Events are built with the same ``decide``
functions the command handler uses and saved many chats per transaction, so large ledgers (hundreds of
thousands of events) are recorded in seconds.
"""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from ledger.base import Emitter
from ledger.chat import decide as d
from ledger.chat.aggregate import Chat
from ledger.chat.state import outstanding_tool_calls
from ledger.errors import LedgerError
from ledger.chat.values import ChatError, MessageInput, TextPart, ToolCallPart, ToolResultPart, Usage

ORGS = [uuid.UUID(int=0xA000 + i) for i in range(8)]
USERS = [uuid.UUID(int=0xB000 + i) for i in range(50)]


def _user(text: str) -> MessageInput:
    return MessageInput(role="user", parts=[TextPart(text=text)])


MODELS = {org: uuid.UUID(int=0xC000 + i) for i, org in enumerate(ORGS)}


def setup_catalogs(app: Any) -> dict[uuid.UUID, Any]:
    """Each organization gets every user as a member and one usable default model (through the real
    commands, unless already there); returns the model facts the chat deciders need, per organization."""
    from commands.handler import command_from_dict, execute
    from ledger.catalog.resolve import ModelFacts

    facts = {}
    for org in ORGS:
        catalog = app.load(org)
        if catalog is None:
            for user in USERS:
                execute(app, command_from_dict({"type": "add_organization_member", "organization_id": str(org),
                                                "user_id": str(user)}))
            execute(app, command_from_dict({"type": "create_model_config", "organization_id": str(org),
                                            "model_config_id": str(MODELS[org]), "provider": "anthropic",
                                            "model": "claude", "context_limit": 200_000}))
            catalog = app.load(org)
        facts[org] = ModelFacts(org, catalog.state)
    return facts


class ChatScript:
    """Drives one chat with its own random generator; ``step()`` records one command's events."""

    def __init__(self, rng: random.Random, start: datetime, facts: dict[uuid.UUID, Any]) -> None:
        self.rng = rng
        self.now = start
        self.chat: Chat | None = None
        self.n = 0
        self.facts = facts
        self.models: Any = None

    def _em(self) -> Emitter:
        self.now += timedelta(milliseconds=self.rng.randint(5, 500))
        agg = self.chat
        return Emitter(agg.id if agg else uuid.UUID(int=self.rng.getrandbits(128), version=4),
                       agg.version if agg else 0, self.now)

    def step(self) -> None:
        rng = self.rng
        self.n += 1
        if self.chat is None:
            em = self._em()
            org = rng.choice(ORGS)
            self.models = self.facts[org]
            events = d.create_chat(em, models=self.models, chat_topic=Chat.TOPIC, organization_id=org,
                                   owner_id=rng.choice(USERS), parent=None, title=None,
                                   message=_user(f"Task {rng.randint(1, 10**6)}: please help"),
                                   model_config_id=None, hook_allowed_tools=rng.choice([None, ["read", "execute", "ask_user"]]),
                                   dynamic_tools=["ask_user"], initial_status="running", turn_id=None)
            self.chat = Chat.start(events)
            return
        s = self.chat.state
        st = s.execution_state
        em = self._em()
        try:
            if st in ("W", "E0", "E1"):
                events = d.send_message(s, em, message=_user("next question"), models=self.models)
            elif st[0] == "I":
                events = d.finish_interruption(s, em, models=self.models, partial_messages=[
                    MessageInput(role="tool", parts=[ToolResultPart(tool_call_id=c.tool_call_id, tool_name=c.tool_name,
                                                                    result="interrupted", is_error=True)])
                    for c in outstanding_tool_calls(s)])
            elif st[0] == "A":
                pending = outstanding_tool_calls(s, dynamic_only=True)
                events = d.complete_requires_action(s, em, results=[d.ToolResult(c.tool_call_id, '"yes"') for c in pending])
            else:
                events = self._running(s, em)
        except LedgerError:
            return  # a refused command records nothing; the script tries something else next step
        self.chat.record(events)

    def _running(self, s: Any, em: Emitter) -> list[Any]:
        rng = self.rng
        pending = outstanding_tool_calls(s)
        roll = rng.random()
        if pending:
            local = [c for c in pending if c.tool_name != "ask_user"]
            if not local:
                return d.enter_requires_action(s, em)
            return d.commit_step(s, em, messages=[MessageInput(role="tool", parts=[ToolResultPart(
                tool_call_id=c.tool_call_id, tool_name=c.tool_name, result={"ok": True, "lines": rng.randint(1, 200)})])
                for c in local])
        if roll < 0.08 and len(s.queue) < 3:
            return d.send_message(s, em, message=_user("and also this"), models=self.models,
                                  hook_allowed_tools=rng.choice([None, ["read", "execute"]]))
        if roll < 0.10:
            return d.interrupt(s, em, models=self.models)
        if roll < 0.12:
            return d.finish_error(s, em, error=ChatError(message="provider overloaded", kind="overloaded"))
        if roll < 0.45:
            calls = [ToolCallPart(tool_call_id=f"call_{s.version}_{i}", tool_name=rng.choice(["read", "execute", "ask_user"]),
                                  args={"path": f"src/file_{rng.randint(1, 99)}.py"}) for i in range(rng.randint(1, 3))]
            return d.commit_step(s, em, messages=[MessageInput(role="assistant", parts=[TextPart(text="Working on it."), *calls],
                                                               usage=Usage(input_tokens=rng.randint(1000, 90000), output_tokens=200))])
        if roll < 0.75:
            return d.commit_step(s, em, messages=[MessageInput(role="assistant", parts=[TextPart(text="Here is the answer.")],
                                                               usage=Usage(input_tokens=rng.randint(1000, 90000), output_tokens=300))])
        return d.finish_turn(s, em, models=self.models)


def generate(app: Any, events: int, seed: int = 7, chat_events: int = 60, save_every: int = 200,
             interleave: int = 1) -> int:
    """Record about ``events`` events as chats of about ``chat_events`` events each. Returns the count.

    ``interleave=1``: chat after chat (each chat's events are contiguous in the log, ``save_every`` chats
    per transaction) — like an import of finished chats. ``interleave=K``: K chats are active at once and
    each takes one step per round (one transaction per round; a finished chat is replaced by a new one),
    so the log interleaves K chats event by event — like chats recorded live."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    facts = setup_catalogs(app)

    def new_script() -> tuple[ChatScript, int]:
        script = ChatScript(random.Random(rng.getrandbits(64)), start, facts)
        return script, max(2, int(rng.gauss(chat_events, chat_events / 3)))

    recorded = 0
    if interleave > 1:
        active = [new_script() for _ in range(interleave)]
        while recorded < events:
            stepped = []
            for i, (script, left) in enumerate(active):
                if recorded + len(stepped) >= events:
                    break
                script.step()
                stepped.append(script.chat)
                active[i] = (script, left - 1) if left > 1 else new_script()
            recorded += sum(len(c.pending_events) for c in stepped)  # type: ignore[union-attr]
            app.save(*stepped)
        return recorded
    pending: list[Chat] = []
    while recorded < events:
        script, length = new_script()
        for _ in range(min(length, events - recorded)):
            script.step()
        recorded += len(script.chat.pending_events)  # type: ignore[union-attr]
        pending.append(script.chat)  # type: ignore[arg-type]
        if len(pending) >= save_every:
            app.save(*pending)
            pending = []
    if pending:
        app.save(*pending)
    return recorded
