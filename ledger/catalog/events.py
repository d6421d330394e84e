"""Catalog and deployment events: facts in the past tense, each with a stable topic.

A model config's events carry the whole config as it is after the change, so a reader never re-derives
it; a move of the organization's default is its own ``DefaultModelConfigChanged`` with the reason.
"""

from __future__ import annotations

from typing import ClassVar
from uuid import UUID

from ledger.base import LedgerCreated, LedgerEvent
from ledger.catalog.values import (
    AdminContext, DefaultReason, EffortLevel, Limits, ModelConfig, OverrideMode, UserContext,
)

CATALOG_TOPIC = "chat-ledger:catalog.OrganizationCatalog"
DEPLOYMENT_TOPIC = "chat-ledger:catalog.Deployment"
CLAIM_TOPIC = "chat-ledger:catalog.ModelConfigClaim"


class CatalogEvent(LedgerEvent):
    abstract: ClassVar[bool] = True


class CatalogStarted(LedgerCreated, CatalogEvent):
    """The organization's catalog stream begins (recorded with its first change)."""

    TOPIC = "chat-ledger:catalog.CatalogStarted"
    organization_id: UUID


class MemberAdded(CatalogEvent):
    TOPIC = "chat-ledger:catalog.MemberAdded"
    user_id: UUID


class MemberRemoved(CatalogEvent):
    TOPIC = "chat-ledger:catalog.MemberRemoved"
    user_id: UUID


class ModelConfigCreated(CatalogEvent):
    TOPIC = "chat-ledger:catalog.ModelConfigCreated"
    config: ModelConfig


class ModelConfigUpdated(CatalogEvent):
    """``config`` is the config after the update; ``changed`` names the fields that changed."""

    TOPIC = "chat-ledger:catalog.ModelConfigUpdated"
    config: ModelConfig
    changed: list[str]


class ModelConfigDeleted(CatalogEvent):
    TOPIC = "chat-ledger:catalog.ModelConfigDeleted"
    model_config_id: UUID


class DefaultModelConfigChanged(CatalogEvent):
    """The organization's default moved from ``previous_model_config_id`` to ``model_config_id``."""

    TOPIC = "chat-ledger:catalog.DefaultModelConfigChanged"
    model_config_id: UUID | None
    previous_model_config_id: UUID | None
    reason: DefaultReason


class ProviderSet(CatalogEvent):
    """The provider's state after the change."""

    TOPIC = "chat-ledger:catalog.ProviderSet"
    provider: str
    enabled: bool
    credentials_available: bool


class AdminModelOverrideSet(CatalogEvent):
    """``model_config_id`` None clears the context's override."""

    TOPIC = "chat-ledger:catalog.AdminModelOverrideSet"
    context: AdminContext
    model_config_id: UUID | None
    reasoning_effort: EffortLevel | None = None


class UserModelOverrideSet(CatalogEvent):
    TOPIC = "chat-ledger:catalog.UserModelOverrideSet"
    user_id: UUID
    context: UserContext
    mode: OverrideMode
    model_config_id: UUID | None = None
    reasoning_effort: EffortLevel | None = None


# -- the deployment singleton -------------------------------------------------------------------------------

class DeploymentEvent(LedgerEvent):
    abstract: ClassVar[bool] = True


class DeploymentStarted(LedgerCreated, DeploymentEvent):
    TOPIC = "chat-ledger:catalog.DeploymentStarted"


class DeploymentSettingsChanged(DeploymentEvent):
    """The deployment settings after the change; ``changed`` names the settings that changed."""

    TOPIC = "chat-ledger:catalog.DeploymentSettingsChanged"
    personal_model_overrides_enabled: bool
    advisor_enabled: bool
    advisor_max_uses_per_turn: int
    advisor_max_output_tokens: int
    changed: list[str]
    #: None on settings recorded before limits existed: every limit at its default
    limits: Limits | None = None


# -- model config id claims ---------------------------------------------------------------------------------

class ModelConfigClaimed(LedgerCreated):
    """The model config id ``originator_id`` belongs to ``organization_id`` (for good: ids are never reused).

    ``model_config_id`` is given when the claim does not live at the model config id (another kind's stream
    took it: ``ledger.streams``); None means the stream id."""

    TOPIC = "chat-ledger:catalog.ModelConfigClaimed"
    organization_id: UUID
    model_config_id: UUID | None = None


# -- people's data in these events (issue 28, point 1: ``ledger.privacy``, docs/privacy.md): none — an
# organization's configuration (providers, model names), members by id.
PERSONAL: dict[type, dict[str, str]] = {}
_CONFIG = {"config.provider": "a model provider's name", "config.model": "a model's name",
           "config.display_name": "the organization's name for a model"}
NOT_PERSONAL: dict[type, dict[str, str]] = {
    ModelConfigCreated: _CONFIG, ModelConfigUpdated: {**_CONFIG, "changed": "names of the settings changed"},
    ProviderSet: {"provider": "a model provider's name"},
    DeploymentSettingsChanged: {"changed": "names of the settings changed"},
}
