"""Value objects of the catalog: model configs, providers, overrides, and how a model was resolved.

All are msgspec Structs so the codec decodes them back to these exact types.
"""

from __future__ import annotations

from typing import Literal
from uuid import UUID

import msgspec

#: reasoning effort scale, lowest first (docs/chatd.md §6.4)
EffortLevel = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
EFFORT_SCALE: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")

AdminContext = Literal["general", "explore", "title_generation", "compaction", "advisor"]
ADMIN_CONTEXTS: tuple[str, ...] = ("general", "explore", "title_generation", "compaction", "advisor")
UserContext = Literal["root", "general", "explore"]
USER_CONTEXTS: tuple[str, ...] = ("root", "general", "explore")
OverrideMode = Literal["chat_default", "model", "deployment_default"]
#: every context a model is resolved for (``resolve_model``)
Context = Literal["root", "general", "explore", "title_generation", "compaction", "advisor"]
CONTEXTS: tuple[str, ...] = ("root", "general", "explore", "title_generation", "compaction", "advisor")

#: how a model was chosen; ``admin_override`` only appears at generation time (``resolve_model``)
Source = Literal["explicit", "personal_override", "org_default", "chat_model", "fallback_default", "admin_override"]
#: why a model that would have been used was not (a fallback)
Reason = Literal["disabled", "missing", "foreign_org", "provider_disabled", "credentials_unavailable"]

#: why the organization's default moved (``DefaultModelConfigChanged.reason``)
DefaultReason = Literal[
    "first_config",                      # the organization had no default; the first live config took it
    "set_default",                       # set_default_model_config, or is_default on create/update
    "default_deleted",                   # the default was deleted
    "default_demoted",                   # update_model_config is_default=false on the default
    "default_disabled",                  # the default was disabled
    "default_provider_disabled",         # the default's provider was disabled
    "default_credentials_unavailable",   # the default's provider lost its credentials
    "usable_config_available",           # the default was unusable and a usable config appeared
]


class ReasoningEffort(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A config's reasoning effort: ``default`` <= ``max`` on the scale; both required."""

    default: EffortLevel
    max: EffortLevel


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A chat model config owned by one organization (its ``organization_id`` is the catalog's)."""

    model_config_id: UUID
    provider: str
    model: str
    display_name: str
    context_limit: int
    compression_threshold: int = 70
    enabled: bool = True
    reasoning_effort: ReasoningEffort | None = None


class ProviderState(msgspec.Struct, frozen=True, kw_only=True):
    """A provider never set is enabled with credentials available."""

    enabled: bool = True
    credentials_available: bool = True


class AdminOverride(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    model_config_id: UUID
    reasoning_effort: EffortLevel | None = None


class UserOverride(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    mode: OverrideMode
    model_config_id: UUID | None = None
    reasoning_effort: EffortLevel | None = None


class ModelResolution(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How the model of a chat, a turn or a promoted prompt was chosen, recorded in the event.

    ``requested_model_config_id`` and ``reason`` are set on a fallback (``source`` ``fallback_default``):
    the model that would have been used (a queued prompt's, the chat's, a personal override's) and why it
    could not be. ``reasoning_effort`` comes from a personal override.
    """

    model_config_id: UUID
    source: Source
    reason: Reason | None = None
    requested_model_config_id: UUID | None = None
    reasoning_effort: EffortLevel | None = None
