"""decide for the catalog and the deployment: (state, command input) -> events, or a LedgerError.

Each function builds its events with an ``Emitter`` on a scratch copy of the state (``Draft``), so rules
that look at the state after an earlier event of the same command (the default rule after a config was
created, disabled or deleted) see it. A catalog stream starts with ``CatalogStarted``, recorded with the
first change; the deployment with ``DeploymentStarted``.

The default rule (docs/chatd.md §6.1 ``ensureDefaultChatModelConfig``, kept exact per organization): whenever
the organization has a live config it has exactly one default, and the default is usable whenever any
config is usable. After every change: a usable default stays; otherwise the first usable config (creation
order, the demoted or deleted one excluded) becomes the default; with no usable config an unusable
default stays where it is, a deleted or demoted one goes to the first other live config (the first
config created self-promotes; a demoted config that is the only one stays). Each move, including to no
default when the last config is deleted, is its own ``DefaultModelConfigChanged`` with the reason.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec

from ledger.base import Emitter
from ledger.catalog import events as ev
from ledger.catalog.evolve import evolve_catalog
from ledger.catalog.resolve import ModelFacts, not_member, unusable_error
from ledger.catalog.state import CatalogState, DeploymentState
from ledger.catalog.values import EFFORT_SCALE, LIMIT_NAMES, DefaultReason, ModelConfig, ProviderState
from ledger.errors import LedgerError, invalid_command

UNSET: Any = msgspec.UNSET

MODEL_CONFIG_NOT_FOUND = ("model_config_not_found", "model config not found")
MODEL_CONFIG_EXISTS = "model_config_already_exists"
ALREADY_MEMBER = ("already_organization_member", "user is already a member of the organization")
MEMBER_NOT_FOUND = ("organization_member_not_found", "user is not a member of the organization")
OVERRIDES_DISABLED = ("personal_model_overrides_disabled",
                      "An administrator has not enabled user personal model overrides.")


def _scratch(state: CatalogState) -> CatalogState:
    """A copy ``evolve`` may change without touching ``state``."""
    return msgspec.structs.replace(
        state, members=set(state.members), configs=dict(state.configs), deleted=set(state.deleted),
        providers=dict(state.providers), admin_overrides=dict(state.admin_overrides),
        user_overrides={u: dict(o) for u, o in state.user_overrides.items()},
        idempotency={k: list(v) for k, v in state.idempotency.items()},
    )


class Draft:
    """The events one catalog command records, and the catalog as it is after each of them."""

    def __init__(self, state: CatalogState | None, em: Emitter, organization_id: UUID, topic: str) -> None:
        self.em = em
        self.before = state
        if state is None:
            first = em.emit(ev.CatalogStarted, originator_topic=topic, organization_id=organization_id)
            self.state = evolve_catalog(None, first)
        else:
            self.state = _scratch(state)

    def emit(self, cls: type, **fields: Any) -> Any:
        event = self.em.emit(cls, **fields)
        evolve_catalog(self.state, event)
        return event

    def was_usable(self, model_config_id: UUID) -> bool:
        return self.before is not None and self.before.usable(model_config_id)

    def ensure_default(self, why: DefaultReason, excluded: UUID | None = None) -> None:
        """Move the default when the rule says so; ``why`` is the reason when it moves away from a default
        this command made unusable, demoted (``excluded``) or deleted."""
        s = self.state
        current = s.default_model_config_id
        live = current is not None and current in s.configs
        if live and current != excluded and s.usable(current):
            return
        candidates = [cid for cid in s.configs if cid != excluded]
        usable = [cid for cid in candidates if s.usable(cid)]
        if usable:
            new: UUID | None = usable[0]
        elif live and current != excluded:
            return  # no usable config anywhere: the (unusable) default stays
        elif candidates:
            new = candidates[0]
        elif live:
            return  # the demoted config is the only one: it stays the default
        else:
            new = None  # the default was deleted and no config is left
        if new == current:
            return
        if current is None:
            reason: DefaultReason = "first_config"
        elif live and current != excluded and not self.was_usable(current):
            reason = "usable_config_available"
        else:
            reason = why
        self.emit(ev.DefaultModelConfigChanged, model_config_id=new, previous_model_config_id=current,
                  reason=reason)

    def set_default(self, model_config_id: UUID) -> None:
        reason = self.state.problem(model_config_id)
        if reason is not None:
            raise unusable_error(reason)
        current = self.state.default_model_config_id
        if current != model_config_id:
            self.emit(ev.DefaultModelConfigChanged, model_config_id=model_config_id,
                      previous_model_config_id=current, reason="set_default")


def _config_of(state: CatalogState | None, model_config_id: UUID) -> ModelConfig:
    config = state.configs.get(model_config_id) if state is not None else None
    if config is None:
        raise LedgerError(*MODEL_CONFIG_NOT_FOUND)
    return config


def _check_config(config: ModelConfig) -> None:
    if not config.provider.strip():
        raise invalid_command("provider is required.")
    if not config.model.strip():
        raise invalid_command("model is required.")
    if config.context_limit <= 0:
        raise invalid_command("context_limit must be greater than 0.")
    if not 0 <= config.compression_threshold <= 100:
        raise invalid_command("compression_threshold must be between 0 and 100.")
    effort = config.reasoning_effort
    if effort is not None and EFFORT_SCALE.index(effort.default) > EFFORT_SCALE.index(effort.max):
        raise invalid_command("reasoning_effort.default must not be greater than reasoning_effort.max.")


# -- members --------------------------------------------------------------------------------------------

def add_member(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
               user_id: UUID) -> list[Any]:
    if state is not None and user_id in state.members:
        raise LedgerError(*ALREADY_MEMBER)
    Draft(state, em, organization_id, topic).emit(ev.MemberAdded, user_id=user_id)
    return em.events


def remove_member(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
                  user_id: UUID) -> list[Any]:
    if state is None or user_id not in state.members:
        raise LedgerError(*MEMBER_NOT_FOUND)
    Draft(state, em, organization_id, topic).emit(ev.MemberRemoved, user_id=user_id)
    return em.events


# -- model configs ----------------------------------------------------------------------------------------

def create_model_config(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
                        config: ModelConfig, is_default: bool, claimed_by: UUID | None) -> list[Any]:
    """``claimed_by``: the organization already owning this id (from its claim), if any."""
    cid = config.model_config_id
    if claimed_by is not None or (state is not None and (cid in state.configs or cid in state.deleted)):
        raise LedgerError(MODEL_CONFIG_EXISTS, f"model config {cid} already exists")
    _check_config(config)
    d = Draft(state, em, organization_id, topic)
    d.emit(ev.ModelConfigCreated, config=config)
    if is_default:
        d.set_default(cid)
    else:
        d.ensure_default("first_config")
    return em.events


CONFIG_FIELDS = ("provider", "model", "display_name", "context_limit", "compression_threshold", "enabled",
           "reasoning_effort")


def update_model_config(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
                        model_config_id: UUID, changes: dict[str, Any], is_default: bool | None) -> list[Any]:
    """``changes``: the fields given (``reasoning_effort`` None clears it). Nothing changed records nothing."""
    old = _config_of(state, model_config_id)
    given = {k: v for k, v in changes.items() if k in CONFIG_FIELDS and v is not UNSET}
    if given.get("display_name") is None and "display_name" in given:
        given["display_name"] = given.get("model", old.model)
    new = msgspec.structs.replace(old, **given)
    _check_config(new)
    changed = [f for f in CONFIG_FIELDS if getattr(old, f) != getattr(new, f)]
    d = Draft(state, em, organization_id, topic)
    if changed:
        d.emit(ev.ModelConfigUpdated, config=new, changed=changed)
    if is_default is True:
        d.set_default(model_config_id)
    elif is_default is False and d.state.default_model_config_id == model_config_id:
        d.ensure_default("default_demoted", excluded=model_config_id)
    # The reason only applies when this config was the usable default and no longer is: it was disabled,
    # or moved to a provider that is disabled or has no credentials.
    why: DefaultReason = "default_disabled"
    if new.enabled and new.provider != old.provider:
        why = ("default_provider_disabled" if not d.state.provider(new.provider).enabled
               else "default_credentials_unavailable")
    d.ensure_default(why)
    return em.events


def delete_model_config(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
                        model_config_id: UUID) -> list[Any]:
    _config_of(state, model_config_id)
    d = Draft(state, em, organization_id, topic)
    d.emit(ev.ModelConfigDeleted, model_config_id=model_config_id)
    d.ensure_default("default_deleted", excluded=model_config_id)
    return em.events


def set_default_model_config(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
                             model_config_id: UUID) -> list[Any]:
    _config_of(state, model_config_id)
    Draft(state, em, organization_id, topic).set_default(model_config_id)
    return em.events


def set_provider(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
                 provider: str, enabled: bool | None, credentials_available: bool | None) -> list[Any]:
    if not provider.strip():
        raise invalid_command("provider is required.")
    known = state.providers.get(provider) if state is not None else None
    base = known or ProviderState()  # a provider never set is enabled with credentials
    new_enabled = base.enabled if enabled is None else enabled
    new_creds = base.credentials_available if credentials_available is None else credentials_available
    if known is not None and (known.enabled, known.credentials_available) == (new_enabled, new_creds):
        return em.events  # nothing changes
    d = Draft(state, em, organization_id, topic)
    d.emit(ev.ProviderSet, provider=provider, enabled=new_enabled, credentials_available=new_creds)
    # The reason only applies when the default was usable and this change made it unusable.
    d.ensure_default("default_provider_disabled" if not new_enabled else "default_credentials_unavailable")
    return em.events


# -- overrides ---------------------------------------------------------------------------------------------

def set_admin_model_override(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
                             context: str, model_config_id: UUID | None, reasoning_effort: str | None,
                             facts: ModelFacts) -> list[Any]:
    """The override must name a config of this organization (``model_config_foreign_org`` for another's,
    ``model_config_not_found`` otherwise); whether it is usable is checked when it is used."""
    if model_config_id is None:
        if reasoning_effort is not None:
            raise invalid_command("reasoning_effort requires a model_config_id.")
        if state is None or context not in state.admin_overrides:
            return em.events  # nothing to clear
    else:
        reason = facts.problem(model_config_id)
        if reason == "foreign_org":
            raise unusable_error(reason)
        if reason == "missing":
            raise LedgerError(*MODEL_CONFIG_NOT_FOUND)
        current = state.admin_overrides.get(context) if state is not None else None
        if current is not None and (current.model_config_id, current.reasoning_effort) == (model_config_id, reasoning_effort):
            return em.events
    Draft(state, em, organization_id, topic).emit(
        ev.AdminModelOverrideSet, context=context, model_config_id=model_config_id, reasoning_effort=reasoning_effort)
    return em.events


def set_user_model_override(state: CatalogState | None, em: Emitter, *, organization_id: UUID, topic: str,
                            user_id: UUID, context: str, mode: str, model_config_id: UUID | None,
                            reasoning_effort: str | None, facts: ModelFacts) -> list[Any]:
    """docs/chatd.md §6.4, checked in this order: the deployment switch, membership, the mode's fields, the
    model (usable in this organization, with the documented errors: docs/commands.md, "Errors")."""
    if not facts.deployment.personal_model_overrides_enabled:
        raise LedgerError(*OVERRIDES_DISABLED)
    if state is None or user_id not in state.members:
        raise not_member()
    if context == "root" and mode == "deployment_default":
        raise invalid_command("deployment_default is not supported for root personal model overrides.")
    if mode != "model":
        if model_config_id is not None:
            raise invalid_command("model_config_id must be empty unless mode is model.")
        if reasoning_effort is not None:
            raise invalid_command("reasoning_effort requires mode model.")
    else:
        if model_config_id is None:
            raise invalid_command("model_config_id is required when mode is model.")
        reason = facts.problem(model_config_id)
        if reason is not None:
            raise unusable_error(reason)
    current = state.user_overrides.get(user_id, {}).get(context)
    if current is not None and (current.mode, current.model_config_id, current.reasoning_effort) == (
            mode, model_config_id, reasoning_effort):
        return em.events
    Draft(state, em, organization_id, topic).emit(
        ev.UserModelOverrideSet, user_id=user_id, context=context, mode=mode, model_config_id=model_config_id,
        reasoning_effort=reasoning_effort)
    return em.events


# -- deployment --------------------------------------------------------------------------------------------

DEPLOYMENT_SETTINGS = ("personal_model_overrides_enabled", "advisor_enabled", "advisor_max_uses_per_turn",
                       "advisor_max_output_tokens", "limits")


def set_deployment_settings(state: DeploymentState | None, em: Emitter, *, topic: str,
                            settings: dict[str, Any]) -> list[Any]:
    """``settings``: the settings given (others keep their value). Nothing changed records nothing."""
    uses = settings.get("advisor_max_uses_per_turn")
    if uses is not None and uses < 1:
        raise invalid_command("advisor_max_uses_per_turn must be at least 1.")
    tokens = settings.get("advisor_max_output_tokens")
    if tokens is not None and tokens < 1:
        raise invalid_command("advisor_max_output_tokens must be at least 1.")
    limits = settings.get("limits")
    if limits is not None:
        for name in LIMIT_NAMES:
            if getattr(limits, name) < 0:
                raise invalid_command(f"limits.{name} must be 0 (the default) or positive.")
    current = state if state is not None else DeploymentState()
    after = {k: (settings[k] if settings.get(k) is not None else getattr(current, k)) for k in DEPLOYMENT_SETTINGS}
    changed = [k for k in DEPLOYMENT_SETTINGS if after[k] != getattr(current, k)]
    if not changed:
        return em.events
    if state is None:
        em.emit(ev.DeploymentStarted, originator_topic=topic)
    em.emit(ev.DeploymentSettingsChanged, changed=changed, **after)
    return em.events
