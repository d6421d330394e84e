"""``chat-ledger simulate``: a scripted runner that drives chats only through the real commands.

A deterministic fake model (one seeded ``random.Random``; no decision reads the clock) plays the model,
the worker and the users of ``--chats N`` chats in ``--orgs K`` organizations:

* **setup** (catalog and deployment commands): each organization gets members, a default model, a
  ``legacy`` model some chats pick explicitly and that is disabled half-way through the run (generation
  and queue promotions then fall back to the default — recorded — and new explicit picks are refused), a
  model of a disabled provider (explicit picks refused), a compaction override with a smaller context
  limit in every third organization, an advisor override in the first; the deployment enables the advisor
  (2 uses per turn).
* **the worker**: at each step of a running chat it asks the decision procedure what to do next —
  ``commands.next_action.decide_chat``, which is what ``chat-ledger next-action`` prints — and does
  exactly that: ``generate_assistant`` (``record_generation_attempt``; a provider error is retried on
  the reference schedule with ``record_retry_state`` and ends in ``finish_error`` after the last
  attempt; else ``commit_step`` of an assistant message with text, tool calls and usage),
  ``execute_local_tools`` (``claim_tool_call`` / ``record_tool_call_response`` / ``commit_step``; a
  repeated claim returns the saved response; a batch breaking the advisor's exclusive-tool rule commits
  the error results and runs nothing), ``enter_requires_action``, ``compact`` (a summary ``commit_step``,
  consuming a manual request), ``finish_turn``, ``error`` (``finish_error``). An owned chat interrupted
  while its tools run cancels them (``cancel_tool_call``: the truthful result) and ``finish_interruption``.
  Every worker command carries the ``fence`` next-action reports; an owned chat's runner passes the
  settings it runs with to ``record_generation_attempt``; a late worker of an earlier attempt is refused.
* **the users**, interleaved at random between worker steps: new turns with hook prefixes and tool
  policies, queued prompts (deleted, promoted), interrupts (owned and unowned), edits, manual compaction,
  ``complete_requires_action`` / ``cancel_requires_action``, subagent (child) chats, archiving and
  ``end_chat``, and a few commands the ledger must refuse.

Chats are interleaved (a random active chat steps each time), so their notifications interleave. Every
decision is recorded (``Simulation.decisions``: chat, stream version, log position, action, calls, the
settings, and the commands the worker then ran) so ``next-action`` on the chat at that version, with the
other streams as of that position, can be checked against it (``check_decisions``); ``check_chats``
checks the foundation invariants on every simulated chat.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from typing import Any, Iterable
from uuid import UUID

from commands.handler import command_from_dict, execute
from commands.next_action import decide_chat
from commands.tools.sim_base import DYNAMIC_TOOLS, LOCAL_TOOLS, NAMESPACE, USERS_PER_ORG, SimChat
from commands.tools.sim_users import UserRole
from commands.tools.sim_worker import WorkerRole
from ledger.chat.aggregate import Chat
from ledger.chat.state import ChatState
from ledger.errors import LedgerError


class Simulation(WorkerRole, UserRole):
    """One run: ``run()`` drives the chats; ``summary()`` reports it."""

    def __init__(self, app: Any, *, chats: int, seed: int, orgs: int = 3, salt: str | None = None,
                 concurrency: int = 32, max_ticks: int = 400, turns: int = 4, steps: int = 6,
                 progress: Any = None) -> None:
        self.app = app
        self.progress = progress  # progress(chats done, chats) after each chat is done, if given
        self.finished = 0
        self.n_chats = chats
        self.seed = seed
        self.n_orgs = max(orgs, 1)
        self.rng = random.Random(seed)
        self.salt = salt if salt is not None else default_salt(app, seed)  # ids only; decisions never read it
        self.concurrency = concurrency
        self.max_ticks = max_ticks
        self.turns = max(turns, 1)  # at most this many user turns per chat (subagents: half)
        self.steps = max(steps, 1)  # the fake model answers without tools after this many steps of a turn
        self.orgs: list[dict[str, Any]] = []
        self.chats: list[SimChat] = []
        self.created = 0
        self.commands = 0
        self.log: list[tuple[str, str]] = []  # (command type, "ok" | refusal code), in order
        self.refusals: Counter[str] = Counter()
        self.unexpected: list[dict[str, Any]] = []
        self.anomalies: list[str] = []
        self.decisions: list[dict[str, Any]] = []
        self.stats: Counter[str] = Counter()
        self.seconds = 0.0
        self.events = 0
        self._did: list[str] | None = None
        self._fence: dict[str, Any] = {}  # the fence of the worker step under way (``WorkerRole.worker_step``)
        self.legacy_phase_done = False

    # -- plumbing ------------------------------------------------------------------------------------

    def uid(self, *parts: Any) -> str:
        return str(uuid.uuid5(NAMESPACE, "/".join([self.salt, *map(str, parts)])))

    def cmd(self, ctype: str, expect: Iterable[str] = (), **fields: Any) -> dict[str, Any] | None:
        """Run one command; a refusal returns None (counted by code; unexpected unless its code is in
        ``expect``: the users' deliberate mistakes)."""
        self.commands += 1
        if self._did is not None:
            self._did.append(ctype)
        try:
            result = execute(self.app, command_from_dict({"type": ctype, **fields}))
        except LedgerError as e:
            self.refusals[e.code] += 1
            self.log.append((ctype, e.code))
            if e.code not in expect:
                self.unexpected.append({"type": ctype, "code": e.code, "message": e.message,
                                        "chat_id": fields.get("chat_id")})
            return None
        self.log.append((ctype, "ok"))
        return result

    def state(self, c: SimChat) -> ChatState:
        agg = self.app.load(UUID(c.chat_id))
        assert isinstance(agg, Chat)
        return agg.state

    # -- setup ---------------------------------------------------------------------------------------

    def setup(self) -> None:
        rng = self.rng
        for k in range(self.n_orgs):
            org_id = self.uid("org", k)
            limit = rng.choice([32_000, 64_000, 200_000])
            org = {"id": org_id, "k": k, "users": [self.uid("user", k, i) for i in range(USERS_PER_ORG)],
                   "default": self.uid("model", k, "default"), "legacy": self.uid("model", k, "legacy"),
                   "gated": self.uid("model", k, "gated"), "compaction": None, "limit": limit,
                   "legacy_disabled": False, "disables_legacy": k % 2 == 0}
            for user in org["users"]:
                self.cmd("add_organization_member", organization_id=org_id, user_id=user)
            self.cmd("create_model_config", organization_id=org_id, model_config_id=org["default"],
                     provider="anthropic", model="claude-sonnet-4-5", context_limit=limit, is_default=True)
            # same limit and threshold as the default: a fallback changes the model, not the decisions
            self.cmd("create_model_config", organization_id=org_id, model_config_id=org["legacy"],
                     provider="openai", model="gpt-4.1", context_limit=limit)
            self.cmd("create_model_config", organization_id=org_id, model_config_id=org["gated"],
                     provider="google", model="gemini-2.5-pro", context_limit=limit)
            self.cmd("set_provider", organization_id=org_id, provider="google", enabled=False)
            if k % 3 == 0:
                org["compaction"] = self.uid("model", k, "compaction")
                self.cmd("create_model_config", organization_id=org_id, model_config_id=org["compaction"],
                         provider="anthropic", model="claude-haiku-4-5", context_limit=limit * 3 // 5)
                self.cmd("set_admin_model_override", organization_id=org_id, context="compaction",
                         model_config_id=org["compaction"])
            if k == 0:
                self.cmd("set_admin_model_override", organization_id=org_id, context="advisor",
                         model_config_id=org["default"])
            self.orgs.append(org)
        self.cmd("set_deployment_settings", advisor_enabled=True, advisor_max_uses_per_turn=2)

    # -- chat lifecycle ------------------------------------------------------------------------------

    def create_chat(self, parent: SimChat | None = None) -> SimChat | None:
        rng = self.rng
        org = parent.org if parent is not None else rng.choice(self.orgs)
        owner = parent.owner if parent is not None else rng.choice(org["users"])
        n = self.created
        self.created += 1
        fields: dict[str, Any] = {"organization_id": org["id"], "owner_id": owner,
                                  "chat_id": self.uid("chat", n), "text": f"task {n}: fix the build"}
        if parent is not None:
            fields["parent_chat_id"] = parent.chat_id
            fields["text"] = f"subagent task {n}: investigate the failing test"
        r = rng.random()
        if r < 0.04:  # a model of a disabled provider: refused, then the user picks the default
            self.cmd("create_chat", expect=("model_config_provider_disabled",), **fields, model_config_id=org["gated"])
        elif r < 0.25:
            if org["legacy_disabled"]:
                self.cmd("create_chat", expect=("model_config_invalid",), **fields,
                         model_config_id=org["legacy"])  # refused: disabled
            else:
                fields["model_config_id"] = org["legacy"]
        if rng.random() < 0.5:
            fields["dynamic_tools"] = list(DYNAMIC_TOOLS)
        if rng.random() < 0.2:
            fields["hook_allowed_tools"] = rng.sample(LOCAL_TOOLS + DYNAMIC_TOOLS, rng.randint(1, 3))
        result = self.cmd("create_chat", **fields)
        if result is None:
            return None
        c = SimChat(result["chat_id"], org, owner, parent, owned=rng.random() < 0.6,
                    turns=rng.randint(1, self.turns) if parent is None else rng.randint(1, max(self.turns // 2, 1)))
        if parent is not None:
            parent.children.append(c)
            self.stats["child_chats"] += 1
        self.chats.append(c)
        self.stats["chats"] += 1
        return c

    def run(self) -> Simulation:
        t0 = time.perf_counter()
        head0 = self.app.head()
        self.setup()
        active_chats: list[SimChat] = []
        disable_at = self.n_chats // 2
        roots = self.n_chats - self.n_chats // 6  # the rest is left for subagent chats
        while self.created < self.n_chats or active_chats:
            while (self.created < self.n_chats and len(active_chats) < self.concurrency
                   and (self.created - self.stats["child_chats"] < roots or not active_chats)):
                if self.created >= disable_at and not self.legacy_phase_done:
                    # half-way: the legacy model is disabled in every other organization (fallbacks)
                    self.legacy_phase_done = True
                    for org in self.orgs:
                        if org["disables_legacy"]:
                            self.cmd("update_model_config", organization_id=org["id"],
                                     model_config_id=org["legacy"], enabled=False)
                            org["legacy_disabled"] = True
                c = self.create_chat()
                if c is not None:
                    active_chats.append(c)
            if not active_chats:
                continue
            c = self.rng.choice(active_chats)
            self.tick(c, active_chats)
            if c.done:
                active_chats.remove(c)
                self.finished += 1
                if self.progress is not None:
                    self.progress(self.finished, self.n_chats)
        self.seconds = time.perf_counter() - t0
        self.events = self.app.head() - head0
        return self

    def tick(self, c: SimChat, active_chats: list[SimChat]) -> None:
        c.ticks += 1
        # one replay per tick: the chat and what next-action says about it (acted on only when running)
        state, na, info = decide_chat(self.app, UUID(c.chat_id))
        if state.archived:
            c.done = True
            return
        if c.ticks > self.max_ticks:  # a safety net; the mix ends chats well before
            self.stats["chats_cut_off"] += 1
            self.cmd("end_chat", chat_id=c.chat_id)
            c.done = True
            return
        status = state.status
        rng = self.rng
        if status == "running":
            if rng.random() < 0.12:
                self.user_while_running(c, state)
            else:
                self.worker_step(c, state, na, info)
        elif status == "interrupting":
            self.worker_finish_interruption(c, state)
        elif status == "requires_action":
            self.user_requires_action(c, state)
        elif status == "waiting":
            self.user_waiting(c, state, active_chats)
        elif status == "error":
            self.user_error(c, state)

    # -- report --------------------------------------------------------------------------------------

    def final_states(self) -> Counter[str]:
        return Counter(self.state(c).execution_state for c in self.chats)

    def summary(self) -> dict[str, Any]:
        ok = sum(1 for _, outcome in self.log if outcome == "ok")
        return {
            "seed": self.seed, "orgs": self.n_orgs,
            "chats": len(self.chats), "root_chats": len(self.chats) - self.stats["child_chats"],
            "child_chats": self.stats["child_chats"],
            "commands": self.commands, "applied": ok, "refused": self.commands - ok,
            "refusals": dict(sorted(self.refusals.items())),
            "unexpected_refusals": len(self.unexpected), "anomalies": len(self.anomalies),
            "events": self.events, "decisions": len(self.decisions),
            "final_states": dict(sorted(self.final_states().items())),
            "activity": dict(sorted(self.stats.items())),
            "seconds": round(self.seconds, 2),
        }


def default_salt(app: Any, seed: int) -> str:
    """The ids' salt when none is given: the seed's own, so one seed gives the same ids on any new ledger — unless
    this ledger already holds that run's first organization (a second run of the seed here), then one made
    from the ledger's head, so the run records new chats beside the first."""
    from commands.catalog import find_catalog

    salt = f"seed-{seed}"
    first_org = uuid.UUID(str(uuid.uuid5(NAMESPACE, "/".join([salt, "org", "0"]))))
    return salt if find_catalog(app, first_org) is None else f"{salt}-at-{app.head()}"


def simulate(app: Any, chats: int, seed: int, orgs: int = 3, salt: str | None = None, **kw: Any) -> Simulation:
    return Simulation(app, chats=chats, seed=seed, orgs=orgs, salt=salt, **kw).run()
