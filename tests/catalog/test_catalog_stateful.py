"""Hypothesis drives random catalogs (several organizations; configs created, updated, enabled/disabled,
deleted; defaults moved; providers toggled; admin and personal overrides set; the deployment switch
flipped) together with random chat histories (creates, sends with and without explicit models, queueing,
promotions, edits), and checks after every step:

* no chat ever records a model config of another organization (ChatCreated, TurnStarted,
  QueuedPromptPromoted, every message they insert, every queued prompt);
* resolving any chat's model for any context gives a usable config of the chat's organization, or
  ``no_default_model``;
* every organization with a live config has exactly one default, which is live, and is usable whenever
  any config is usable (the models view agrees: exactly one ``is_default`` row);
* the cached catalog equals the catalog replayed from the store.
"""

from __future__ import annotations

import uuid
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, rule

from commands.handler import command_from_dict, execute
from ledger.catalog.aggregate import ModelConfigClaim, OrganizationCatalog
from ledger.catalog.resolve import ChatModelFacts, resolve_model
from ledger.catalog.state import DEPLOYMENT_ID
from ledger.catalog.values import CONTEXTS
from ledger.catalog.views import models_view
from ledger.chat import events as ev
from ledger.errors import LedgerError
from ledger.store import ChatLedgerApp

ORGS = [str(uuid.UUID(int=(0xA << 120) + i)) for i in range(3)]
USERS = [str(uuid.UUID(int=(0xB << 120) + i)) for i in range(3)]
MODELS = [str(uuid.UUID(int=(0xC << 120) + i)) for i in range(7)]
PROVIDERS = ["anthropic", "openai"]
WORKER = {"worker_id": str(uuid.UUID(int=1)), "runner_id": str(uuid.UUID(int=2))}
maybe_model = st.none() | st.sampled_from(MODELS)
orgs = st.sampled_from(ORGS)


class CatalogMachine(RuleBasedStateMachine):
    chats = Bundle("chats")

    def __init__(self) -> None:
        super().__init__()
        self.app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
        self.chat_ids: list[uuid.UUID] = []

    def teardown(self) -> None:
        self.app.close()

    def do(self, **command: Any) -> dict[str, Any] | None:
        command = {k: v for k, v in command.items() if v is not None or k == "model_config_id"}
        if command.get("model_config_id") is None and command["type"] != "set_admin_model_override":
            command.pop("model_config_id", None)
        try:
            return execute(self.app, command_from_dict(command))
        except LedgerError as e:
            assert e.code != "conflict", e
            return None

    @initialize()
    def organizations(self):
        """A start that lets chats happen: every organization but the last has every user and configs on
        both providers; the last one user and one config. Random changes take it from there."""
        layout = {ORGS[0]: (USERS, MODELS[0:3]), ORGS[1]: (USERS, MODELS[3:5]), ORGS[2]: (USERS[:1], MODELS[5:6])}
        for org, (users, models) in layout.items():
            for u in users:
                self.do(type="add_organization_member", organization_id=org, user_id=u)
            for i, m in enumerate(models):
                self.do(type="create_model_config", organization_id=org, model_config_id=m,
                        provider=PROVIDERS[i % 2], model="m", context_limit=(i + 1) * 1000)

    # -- the catalog ----------------------------------------------------------------------------------------
    @rule(org=orgs, user=st.sampled_from(USERS), add=st.booleans())
    def member(self, org, user, add):
        self.do(type="add_organization_member" if add else "remove_organization_member", organization_id=org,
                user_id=user)

    @rule(org=orgs, model=st.sampled_from(MODELS), provider=st.sampled_from(PROVIDERS), enabled=st.booleans(),
          default=st.booleans(), limit=st.integers(1, 5))
    def create_config(self, org, model, provider, enabled, default, limit):
        self.do(type="create_model_config", organization_id=org, model_config_id=model, provider=provider,
                model="m", context_limit=limit * 1000, enabled=enabled, is_default=default)

    @rule(org=orgs, model=st.sampled_from(MODELS), enabled=st.none() | st.booleans(),
          provider=st.none() | st.sampled_from(PROVIDERS), default=st.none() | st.booleans())
    def update_config(self, org, model, enabled, provider, default):
        self.do(type="update_model_config", organization_id=org, model_config_id=model, enabled=enabled,
                provider=provider, is_default=default)

    @rule(org=orgs, model=st.sampled_from(MODELS))
    def delete_config(self, org, model):
        self.do(type="delete_model_config", organization_id=org, model_config_id=model)

    @rule(org=orgs, model=st.sampled_from(MODELS))
    def set_default(self, org, model):
        self.do(type="set_default_model_config", organization_id=org, model_config_id=model)

    @rule(org=orgs, provider=st.sampled_from(PROVIDERS), enabled=st.none() | st.booleans(),
          creds=st.none() | st.booleans())
    def set_provider(self, org, provider, enabled, creds):
        self.do(type="set_provider", organization_id=org, provider=provider, enabled=enabled,
                credentials_available=creds)

    @rule(org=orgs, context=st.sampled_from(["general", "explore", "title_generation", "compaction", "advisor"]),
          model=maybe_model)
    def admin_override(self, org, context, model):
        self.do(type="set_admin_model_override", organization_id=org, context=context, model_config_id=model)

    @rule(org=orgs, user=st.sampled_from(USERS), context=st.sampled_from(["root", "general", "explore"]),
          mode=st.sampled_from(["chat_default", "model", "deployment_default"]), model=maybe_model)
    def user_override(self, org, user, context, mode, model):
        self.do(type="set_user_model_override", organization_id=org, user_id=user, context=context, mode=mode,
                model_config_id=model)

    @rule(enabled=st.booleans())
    def deployment(self, enabled):
        self.do(type="set_deployment_settings", personal_model_overrides_enabled=enabled)

    # -- chats --------------------------------------------------------------------------------------------------
    @rule(target=chats, org=orgs, owner=st.sampled_from(USERS), model=maybe_model, waiting=st.booleans(),
          queued=st.lists(maybe_model, max_size=2))
    def create_chat(self, org, owner, model, waiting, queued):
        r = self.do(type="create_chat", organization_id=org, owner_id=owner, text="hi", model_config_id=model,
                    initial_status="waiting" if waiting else "running")
        if r is None:
            return multiple()
        chat_id = uuid.UUID(r["chat_id"])
        self.chat_ids.append(chat_id)
        self.do(type="acquire", chat_id=r["chat_id"], **WORKER)
        for m in queued:  # running: queued behind the turn, promoted later
            self.do(type="send_message", chat_id=r["chat_id"], text="queued", model_config_id=m)
        return r["chat_id"]

    @rule(chat=chats, model=maybe_model, interrupt=st.booleans())
    def send_more(self, chat, model, interrupt):
        self.send(chat, model, interrupt)

    @rule(chat=chats, model=maybe_model, interrupt=st.booleans())
    def send(self, chat, model, interrupt):
        self.do(type="send_message", chat_id=chat, text="more", model_config_id=model,
                busy_behavior="interrupt" if interrupt else "queue")

    @rule(chat=chats, model=maybe_model)
    def edit(self, chat, model):
        self.do(type="edit_message", chat_id=chat, message_id=1, text="again", model_config_id=model)

    @rule(chat=chats, kind=st.sampled_from(["finish_turn", "finish_interruption", "interrupt", "abandon"]))
    def worker(self, chat, kind):
        self.do(type=kind, chat_id=chat)

    @rule(chat=chats, model=maybe_model)
    def progress(self, chat, model):
        """What a runner or user would do next, so queued prompts get promoted after catalog changes."""
        s = self.app.load(uuid.UUID(chat)).state
        st_ = s.execution_state
        if st_ == "R1":
            self.do(type="finish_turn", chat_id=chat)
        elif st_ == "E1":
            self.do(type="promote_queued_message", chat_id=chat, queued_message_id=s.queue[-1].queued_message_id)
        elif st_[0] == "I":
            self.do(type="finish_interruption", chat_id=chat)
        else:
            self.do(type="send_message", chat_id=chat, text="next", model_config_id=model)

    @rule(chat=chats, how=st.sampled_from(["disable", "delete", "provider", "credentials"]))
    def break_a_model_in_use(self, chat, how):
        """Make the model a chat's next promotion or generation would use unusable."""
        s = self.app.load(uuid.UUID(chat)).state
        mid = next((q.model_config_id for q in s.queue if q.model_config_id), s.model_config_id)
        cat = self.app.load(s.organization_id).state
        config = cat.configs.get(mid) if mid else None
        if config is None:
            return
        org, m = str(s.organization_id), str(mid)
        if how == "disable":
            self.do(type="update_model_config", organization_id=org, model_config_id=m, enabled=False)
        elif how == "delete":
            self.do(type="delete_model_config", organization_id=org, model_config_id=m)
        elif how == "provider":
            self.do(type="set_provider", organization_id=org, provider=config.provider, enabled=False)
        else:
            self.do(type="set_provider", organization_id=org, provider=config.provider, credentials_available=False)
        self.progress(chat, None)

    @rule(chat=chats, qid=st.integers(1, 4))
    def promote(self, chat, qid):
        self.do(type="promote_queued_message", chat_id=chat, queued_message_id=qid)

    @rule(chat=chats)
    def fail(self, chat):
        self.do(type="finish_error", chat_id=chat, error={"message": "boom"})

    # -- invariants ----------------------------------------------------------------------------------------------
    def owner_of(self, model_config_id: uuid.UUID) -> uuid.UUID | None:
        claim = self.app.load(model_config_id)
        return claim.state.organization_id if isinstance(claim, ModelConfigClaim) else None

    @invariant()
    def chats_never_record_a_foreign_model(self):
        for chat_id in self.chat_ids:
            org = self.app.load(chat_id).state.organization_id
            recorded: list[Any] = []
            for e in self.app.stream(chat_id):
                if isinstance(e, (ev.ChatCreated, ev.TurnStarted, ev.QueuedPromptPromoted)):
                    recorded += [e.model_config_id, e.model_resolution and e.model_resolution.model_config_id]
                    recorded += [m.model_config_id for m in e.messages]
                if isinstance(e, ev.PromptQueued):
                    recorded.append(e.prompt.model_config_id)
            for mid in recorded:
                if mid is not None:
                    assert self.owner_of(mid) == org, (chat_id, mid)

    @invariant()
    def resolution_is_always_local_and_usable(self):
        dep = self.app.load(DEPLOYMENT_ID)
        for chat_id in self.chat_ids:
            s = self.app.load(chat_id).state
            cat = self.app.load(s.organization_id).state
            facts = ChatModelFacts(organization_id=s.organization_id, owner_id=s.owner_id,
                                   model_config_id=s.model_config_id)
            for context in CONTEXTS:
                try:
                    r = resolve_model(context, facts, cat, dep.state if dep else None)  # type: ignore[arg-type]
                except LedgerError as e:
                    if e.code == "model_override_unusable":  # a configured title override fails hard
                        override = cat.admin_overrides[context]
                        assert context == "title_generation" and not cat.usable(override.model_config_id)
                        continue
                    assert e.code == "no_default_model"
                    assert not cat.usable_configs()
                    continue
                assert cat.usable(r.model_config_id), (context, r)
                assert self.owner_of(r.model_config_id) == s.organization_id

    @invariant()
    def one_usable_default_per_organization(self):
        for org in ORGS:
            agg = self.app.load(uuid.UUID(org))
            if not isinstance(agg, OrganizationCatalog):
                continue
            cat = agg.state
            if cat.configs:
                assert cat.default_model_config_id in cat.configs, cat
            else:
                assert cat.default_model_config_id is None
            if cat.usable_configs():
                assert cat.usable(cat.default_model_config_id), cat
            rows = models_view(cat.organization_id, cat)["configs"]
            assert sum(r["is_default"] for r in rows) == (1 if cat.configs else 0)
            cached = self.app.load_cached(uuid.UUID(org), copy=False)
            assert cached.version == agg.version and cached.state == cat


CatalogMachine.TestCase.settings = settings(max_examples=75, stateful_step_count=50, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
TestCatalogMachine = CatalogMachine.TestCase
