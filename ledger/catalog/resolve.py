"""Which model config a chat uses: pure rules over facts the handler read (docs/chatd.md §6.2–§6.4).

* ``ModelFacts`` is what a command handler read of other streams for a chat of one organization: that
  organization's catalog, the deployment settings, and the owning organization of any model config id
  the command mentions that the catalog does not hold (from its ``ModelConfigClaim``), so a foreign id is
  told apart from a missing one. ``decide`` reads nothing else.
* A config is *usable* for a chat when it exists, is enabled, belongs to the chat's organization, and its
  provider is enabled with credentials available. A foreign config is never used: an explicit one is
  refused, a stored one (a queued prompt's, the chat's) or an override falls back to the organization's
  usable default, recorded with the reason.
* ``select_for_create`` / ``validate_explicit`` / ``resolve_kept`` are the command-time rules;
  ``resolve_model`` is the generation-time rule for every context (root, subagents, title generation,
  compaction, advisor). They return or record a ``ModelResolution`` and raise ``LedgerError`` with the
  the documented codes and messages (docs/commands.md, "Errors").
"""

from __future__ import annotations

from typing import Mapping
from uuid import UUID

import msgspec

from ledger.catalog.state import DEFAULT_DEPLOYMENT, CatalogState, DeploymentState
from ledger.catalog.values import (
    EFFORT_SCALE, Context, EffortLevel, ModelConfig, ModelResolution, Reason, Source,
)
from ledger.errors import LedgerError

NOT_MEMBER = ("not_organization_member", "You are not a member of the specified organization.")
NO_DEFAULT = ("no_default_model", "No default chat model config is configured.")
_UNUSABLE: dict[str, tuple[str, str]] = {
    "foreign_org": ("model_config_foreign_org", "Model config does not belong to the specified organization."),
    "missing": ("model_config_invalid", "Invalid model_config_id: model config not found or disabled."),
    "disabled": ("model_config_invalid", "Invalid model_config_id: model config not found or disabled."),
    "provider_disabled": ("model_config_provider_disabled",
                          "Invalid model_config_id: provider is not enabled for this model."),
    "credentials_unavailable": ("model_config_credentials_unavailable",
                                "Invalid model_config_id: provider credentials unavailable for this model."),
}


#: why a configured override is not usable, in words (``model_override_unusable``)
REASON_TEXT: dict[str, str] = {
    "disabled": "the model config is disabled",
    "missing": "the model config does not exist",
    "foreign_org": "the model config belongs to another organization",
    "provider_disabled": "its provider is not enabled",
    "credentials_unavailable": "its provider's credentials are unavailable",
}
#: contexts whose configured admin override must be usable: a hard failure of the context, never a
#: fallback to the chat's model (requirements 001: "restoring the hard-failure contract for
#: configured-but-unusable title generation overrides")
HARD_OVERRIDE_CONTEXTS = frozenset({"title_generation"})


def override_unusable(context: str, model_config_id: UUID | None, reason: Reason) -> LedgerError:
    return LedgerError("model_override_unusable",
                       f"the {context} model override {model_config_id} is not usable: {REASON_TEXT[reason]} "
                       f"({reason})")


class ModelFactsNeeded(Exception):
    """Raised by ``decide`` when the command turns out to resolve a model and no facts were given: the
    handler loads them and decides again. Commands that resolve nothing never read the catalog."""


def not_member() -> LedgerError:
    return LedgerError(*NOT_MEMBER)


def no_default_model() -> LedgerError:
    return LedgerError(*NO_DEFAULT)


def unusable_error(reason: Reason) -> LedgerError:
    return LedgerError(*_UNUSABLE[reason])


class ModelFacts:
    """The facts of other streams one command on a chat of ``organization_id`` decides with."""

    __slots__ = ("organization_id", "catalog", "deployment", "owners")

    def __init__(self, organization_id: UUID, catalog: CatalogState | None,
                 deployment: DeploymentState | None = None, owners: Mapping[UUID, UUID] | None = None) -> None:
        self.organization_id = organization_id
        self.catalog = catalog
        self.deployment = deployment if deployment is not None else DEFAULT_DEPLOYMENT
        self.owners = owners or {}

    def problem(self, model_config_id: UUID | None) -> Reason | None:
        """Why the config is not usable for this organization's chats, or None when it is."""
        if model_config_id is None:
            return "missing"
        cat = self.catalog
        if cat is not None and model_config_id in cat.configs:
            return cat.problem(model_config_id)
        owner = self.owners.get(model_config_id)
        if owner is not None and owner != self.organization_id:
            return "foreign_org"
        return "missing"

    def config(self, model_config_id: UUID | None) -> ModelConfig | None:
        if self.catalog is None or model_config_id is None:
            return None
        return self.catalog.configs.get(model_config_id)

    def usable_default(self) -> UUID | None:
        return self.catalog.usable_default() if self.catalog is not None else None

    def is_member(self, user_id: UUID) -> bool:
        return self.catalog is not None and self.catalog.is_member(user_id)


def validate_explicit(facts: ModelFacts, model_config_id: UUID) -> ModelResolution:
    """An explicitly chosen model must be usable in the chat's organization; else the documented error (docs/commands.md, "Errors")."""
    reason = facts.problem(model_config_id)
    if reason is not None:
        raise unusable_error(reason)
    return ModelResolution(model_config_id=model_config_id, source="explicit")


def fallback(facts: ModelFacts, requested: UUID | None, reason: Reason) -> ModelResolution:
    """The organization's usable default in place of ``requested``; ``no_default_model`` without one."""
    default = facts.usable_default()
    if default is None:
        raise no_default_model()
    return ModelResolution(model_config_id=default, source="fallback_default", reason=reason,
                           requested_model_config_id=requested)


def resolve_kept(facts: ModelFacts, model_config_id: UUID | None, source: Source) -> ModelResolution:
    """Keep a stored model (a queued prompt's, the chat's) when usable and local, else fall back."""
    reason = facts.problem(model_config_id)
    if reason is None:
        assert model_config_id is not None
        return ModelResolution(model_config_id=model_config_id, source=source)
    return fallback(facts, model_config_id, reason)


def select_for_create(facts: ModelFacts, *, owner_id: UUID, explicit: UUID | None,
                      parent_model_config_id: UUID | None = None, is_child: bool = False) -> ModelResolution:
    """CreateChat (docs/chatd.md §6.2): membership, then the explicit model, else (a root chat) the owner's
    personal ``root`` override when the deployment enables personal overrides and it names a usable model,
    else the organization's usable default. A child chat without an explicit model runs on its parent's
    model when that is usable here, else on the default."""
    if not facts.is_member(owner_id):
        raise not_member()
    if explicit is not None:
        return validate_explicit(facts, explicit)
    if is_child:
        return resolve_kept(facts, parent_model_config_id, "chat_model")
    return root_choice(facts, owner_id)


def root_choice(facts: ModelFacts, owner_id: UUID) -> ModelResolution:
    """The model of a new root chat of ``owner_id`` with no explicit model: a usable personal ``root``
    override (when the deployment enables them), else the organization's usable default. An unusable
    override falls back to the default (recorded with the reason)."""
    if facts.deployment.personal_model_overrides_enabled and facts.catalog is not None:
        override = facts.catalog.user_overrides.get(owner_id, {}).get("root")
        if override is not None and override.mode == "model":
            reason = facts.problem(override.model_config_id)
            if reason is None:
                assert override.model_config_id is not None
                return ModelResolution(model_config_id=override.model_config_id, source="personal_override",
                                       reasoning_effort=override.reasoning_effort)
            return fallback(facts, override.model_config_id, reason)
    default = facts.usable_default()
    if default is None:
        raise no_default_model()
    return ModelResolution(model_config_id=default, source="org_default")


# -- generation time ---------------------------------------------------------------------------------------

class ChatModelFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the resolver needs of a chat: its organization, owner and stored model."""

    organization_id: UUID
    owner_id: UUID
    model_config_id: UUID | None


class IgnoredOverride(msgspec.Struct, frozen=True, kw_only=True):
    source: Source
    model_config_id: UUID | None
    reason: Reason


class ResolvedModel(msgspec.Struct, frozen=True, kw_only=True):
    """The model a context runs on. ``ignored`` lists overrides skipped because they are not usable."""

    context: Context
    model_config_id: UUID
    source: Source
    reason: Reason | None = None
    requested_model_config_id: UUID | None = None
    context_limit: int = 0
    reasoning_effort: EffortLevel | None = None
    ignored: list[IgnoredOverride] = []


def effective_effort(config: ModelConfig, requested: str | None) -> EffortLevel | None:
    """Requested effort else the config's default, clamped to the config's max; None if the config has none."""
    if config.reasoning_effort is None:
        return None
    effort = requested or config.reasoning_effort.default
    cap = config.reasoning_effort.max
    if EFFORT_SCALE.index(effort) > EFFORT_SCALE.index(cap):
        effort = cap
    return effort  # type: ignore[return-value]


def resolve_model(context: Context, chat: ChatModelFacts, catalog: CatalogState | None,
                  deployment: DeploymentState | None = None, user: UUID | None = None,
                  owners: Mapping[UUID, UUID] | None = None) -> ResolvedModel:
    """The model ``context`` runs on for ``chat`` (docs/chatd.md §6.3, §6.4). Records nothing.

    * ``root``: the chat's stored model when usable and local, else the organization's usable default
      (``fallback_default`` with the reason), else ``no_default_model``.
    * ``general``/``explore`` (a subagent of this chat): the personal override of ``user`` (default: the
      chat's owner) when the deployment enables them — ``chat_default`` stops at the chat's model, a usable
      ``model`` is used, anything else falls through — then the organization's admin override, then the
      chat's model (as for ``root``).
    * ``title_generation``: the admin override, else the chat's model. A configured override that is
      not usable is a hard failure of the context: ``model_override_unusable`` naming the override and
      why (requirements 001), never a fallback to the chat's model.
    * ``advisor``: the admin override, else the chat's model.
    * ``compaction``: the admin override, else the chat's model; the context limit is the smaller of the
      chat model's and the override's.
    Other overrides that are foreign, missing or unusable are ignored (listed in ``ignored``).
    """
    facts = ModelFacts(chat.organization_id, catalog if catalog is not None and
                       catalog.organization_id == chat.organization_id else None, deployment, owners)
    user = user or chat.owner_id
    ignored: list[IgnoredOverride] = []

    def done(res: ModelResolution, effort: str | None = None, limit_cap: int | None = None) -> ResolvedModel:
        config = facts.config(res.model_config_id)
        assert config is not None
        limit = config.context_limit if limit_cap is None else min(config.context_limit, limit_cap)
        return ResolvedModel(
            context=context, model_config_id=res.model_config_id, source=res.source, reason=res.reason,
            requested_model_config_id=res.requested_model_config_id, context_limit=limit,
            reasoning_effort=effective_effort(config, effort), ignored=ignored)

    def chat_res() -> ModelResolution:  # the chat's own model, with the runtime fallback
        return resolve_kept(facts, chat.model_config_id, "chat_model")

    cat = facts.catalog

    if context in ("general", "explore") and facts.deployment.personal_model_overrides_enabled and cat is not None:
        override = cat.user_overrides.get(user, {}).get(context)
        mode = override.mode if override is not None else "deployment_default"
        if mode == "chat_default":
            return done(chat_res())
        if mode == "model" and override is not None:
            reason = facts.problem(override.model_config_id)
            if reason is None:
                assert override.model_config_id is not None
                return done(ModelResolution(model_config_id=override.model_config_id, source="personal_override"),
                            override.reasoning_effort)
            ignored.append(IgnoredOverride(source="personal_override", model_config_id=override.model_config_id,
                                           reason=reason))
    if context != "root" and cat is not None:
        admin = cat.admin_overrides.get(context)
        if admin is not None:
            reason = facts.problem(admin.model_config_id)
            if reason is None:
                res = ModelResolution(model_config_id=admin.model_config_id, source="admin_override")
                if context == "compaction":
                    base = facts.config(chat_res().model_config_id)
                    assert base is not None
                    return done(res, admin.reasoning_effort, base.context_limit)
                return done(res, admin.reasoning_effort)
            if context in HARD_OVERRIDE_CONTEXTS:
                raise override_unusable(context, admin.model_config_id, reason)
            ignored.append(IgnoredOverride(source="admin_override", model_config_id=admin.model_config_id,
                                           reason=reason))
    return done(chat_res())
