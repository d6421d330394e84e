"""Catalog, deployment and claim state, and the usability rule.

``CatalogState`` keeps live configs in creation order (``configs``) and the ids of deleted ones
(``deleted``), so a deleted id stays recognisably "missing" and is never reused. ``evolve`` updates the
state in place (linear replay).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import msgspec

from ledger.catalog.values import (
    AdminOverride, Limits, ModelConfig, ProviderState, Reason, UserOverride,
)

#: the Deployment singleton's stream id
DEPLOYMENT_ID = UUID("d3910e5e-0000-4000-8000-00000000d3b1")

DEFAULT_ADVISOR_MAX_USES_PER_TURN = 3
DEFAULT_ADVISOR_MAX_OUTPUT_TOKENS = 4096

_ENABLED = ProviderState()


class CatalogState(msgspec.Struct, kw_only=True):
    organization_id: UUID
    members: set[UUID] = msgspec.field(default_factory=set)
    configs: dict[UUID, ModelConfig] = msgspec.field(default_factory=dict)
    deleted: set[UUID] = msgspec.field(default_factory=set)
    default_model_config_id: UUID | None = None
    providers: dict[str, ProviderState] = msgspec.field(default_factory=dict)
    admin_overrides: dict[str, AdminOverride] = msgspec.field(default_factory=dict)
    user_overrides: dict[UUID, dict[str, UserOverride]] = msgspec.field(default_factory=dict)
    idempotency: dict[str, list[int]] = msgspec.field(default_factory=dict)
    version: int = 0
    updated_at: datetime | None = None

    def provider(self, name: str) -> ProviderState:
        return self.providers.get(name, _ENABLED)

    def problem(self, model_config_id: UUID | None) -> Reason | None:
        """Why a config of this organization is not usable, or None when it is (exists, enabled, its
        provider enabled with credentials). An id this catalog never had is ``missing`` here; telling a
        foreign id apart needs its claim (``ledger.catalog.resolve.ModelFacts``)."""
        config = self.configs.get(model_config_id) if model_config_id is not None else None
        if config is None:
            return "missing"
        if not config.enabled:
            return "disabled"
        provider = self.provider(config.provider)
        if not provider.enabled:
            return "provider_disabled"
        if not provider.credentials_available:
            return "credentials_unavailable"
        return None

    def usable(self, model_config_id: UUID | None) -> bool:
        return self.problem(model_config_id) is None

    def usable_configs(self) -> list[ModelConfig]:
        return [c for c in self.configs.values() if self.problem(c.model_config_id) is None]

    def usable_default(self) -> UUID | None:
        d = self.default_model_config_id
        return d if d is not None and self.usable(d) else None

    def is_member(self, user_id: UUID) -> bool:
        return user_id in self.members


def initial_catalog(organization_id: UUID) -> CatalogState:
    return CatalogState(organization_id=organization_id)


class DeploymentState(msgspec.Struct, kw_only=True):
    personal_model_overrides_enabled: bool = False
    advisor_enabled: bool = False
    advisor_max_uses_per_turn: int = DEFAULT_ADVISOR_MAX_USES_PER_TURN
    advisor_max_output_tokens: int = DEFAULT_ADVISOR_MAX_OUTPUT_TOKENS
    limits: Limits = Limits()
    idempotency: dict[str, list[int]] = msgspec.field(default_factory=dict)
    version: int = 0
    updated_at: datetime | None = None


#: the settings of a deployment that never recorded any
DEFAULT_DEPLOYMENT = DeploymentState()


class ClaimState(msgspec.Struct, kw_only=True):
    model_config_id: UUID
    organization_id: UUID
    version: int = 0
