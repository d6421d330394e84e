"""evolve(state, event) -> state for the catalog, the deployment and model config claims.

Total for valid histories and linear: the given state is updated in place and returned. Every fact an
effect needs is in the event (a config event carries the whole config; a default move names the new one).
"""

from __future__ import annotations

from typing import Any

from ledger.base import remember_idempotency_key
from ledger.catalog import events as ev
from ledger.catalog.state import CatalogState, ClaimState, DeploymentState, initial_catalog
from ledger.catalog.values import AdminOverride, Limits, ProviderState, UserOverride


def _track(state: Any, event: Any) -> None:
    state.version = event.originator_version
    remember_idempotency_key(state.idempotency, event)


def evolve_catalog(state: CatalogState | None, event: Any) -> CatalogState:
    t = type(event)
    if t is ev.CatalogStarted:
        state = initial_catalog(event.organization_id)
    else:
        assert state is not None, "only CatalogStarted starts a catalog stream"
        _CATALOG[t](state, event)
    _track(state, event)
    state.updated_at = event.timestamp
    return state


def _member_added(s: CatalogState, e: ev.MemberAdded) -> None:
    s.members.add(e.user_id)


def _member_removed(s: CatalogState, e: ev.MemberRemoved) -> None:
    s.members.discard(e.user_id)


def _config_created(s: CatalogState, e: ev.ModelConfigCreated) -> None:
    s.configs[e.config.model_config_id] = e.config


def _config_updated(s: CatalogState, e: ev.ModelConfigUpdated) -> None:
    s.configs[e.config.model_config_id] = e.config  # keeps its place in creation order


def _config_deleted(s: CatalogState, e: ev.ModelConfigDeleted) -> None:
    s.configs.pop(e.model_config_id, None)
    s.deleted.add(e.model_config_id)  # a deleted default is moved by the DefaultModelConfigChanged that follows


def _default_changed(s: CatalogState, e: ev.DefaultModelConfigChanged) -> None:
    s.default_model_config_id = e.model_config_id


def _provider_set(s: CatalogState, e: ev.ProviderSet) -> None:
    s.providers[e.provider] = ProviderState(enabled=e.enabled, credentials_available=e.credentials_available)


def _admin_override_set(s: CatalogState, e: ev.AdminModelOverrideSet) -> None:
    if e.model_config_id is None:
        s.admin_overrides.pop(e.context, None)
    else:
        s.admin_overrides[e.context] = AdminOverride(model_config_id=e.model_config_id,
                                                     reasoning_effort=e.reasoning_effort)


def _user_override_set(s: CatalogState, e: ev.UserModelOverrideSet) -> None:
    s.user_overrides.setdefault(e.user_id, {})[e.context] = UserOverride(
        mode=e.mode, model_config_id=e.model_config_id, reasoning_effort=e.reasoning_effort)


_CATALOG: dict[type, Any] = {
    ev.MemberAdded: _member_added,
    ev.MemberRemoved: _member_removed,
    ev.ModelConfigCreated: _config_created,
    ev.ModelConfigUpdated: _config_updated,
    ev.ModelConfigDeleted: _config_deleted,
    ev.DefaultModelConfigChanged: _default_changed,
    ev.ProviderSet: _provider_set,
    ev.AdminModelOverrideSet: _admin_override_set,
    ev.UserModelOverrideSet: _user_override_set,
}


def evolve_deployment(state: DeploymentState | None, event: Any) -> DeploymentState:
    t = type(event)
    if t is ev.DeploymentStarted:
        state = DeploymentState()
    else:
        assert state is not None and t is ev.DeploymentSettingsChanged, f"unexpected deployment event {t}"
        state.personal_model_overrides_enabled = event.personal_model_overrides_enabled
        state.advisor_enabled = event.advisor_enabled
        state.advisor_max_uses_per_turn = event.advisor_max_uses_per_turn
        state.advisor_max_output_tokens = event.advisor_max_output_tokens
        state.limits = event.limits if event.limits is not None else Limits()
    _track(state, event)
    state.updated_at = event.timestamp
    return state


def evolve_claim(state: ClaimState | None, event: Any) -> ClaimState:
    assert state is None and type(event) is ev.ModelConfigClaimed, "a claim stream has one event"
    return ClaimState(model_config_id=event.model_config_id or event.originator_id,
                      organization_id=event.organization_id,
                      version=event.originator_version)
