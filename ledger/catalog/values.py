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


class Limits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """The deployment's limits (``set_deployment_settings.limits``). 0 (or absent) means the default
    (``DEFAULT_LIMITS``: chatd's where chatd has a constant). ``effective(name)`` is the value in force."""

    max_queued_messages_per_chat: int = 0
    max_steps_per_turn: int = 0
    max_generation_retries: int = 0
    max_dynamic_tools_per_chat: int = 0
    max_attachments_per_chat: int = 0
    max_prompt_bytes: int = 0
    max_tool_output_bytes: int = 0

    def effective(self, name: str) -> int:
        return getattr(self, name) or DEFAULT_LIMITS[name]

    def used(self, *names: str) -> dict[str, int]:
        """The values in force of ``names``, as a decision records them."""
        return {n: self.effective(n) for n in names}


#: the value of each limit left at 0. chatd's constants: the queue (``MaxQueueSize`` 20), generation retries
#: (``chatretry.MaxAttempts`` 25), dynamic tools (250); the ledger's own, where chatd keeps no constant the
#: ledger could read (docs/commands.md, "Limits"): steps per turn (the generation decision's 1200), attachments
#: per chat (20), a prompt's text (256 KiB), a tool result (1 MiB, encoded as JSON)
DEFAULT_LIMITS: dict[str, int] = {
    "max_queued_messages_per_chat": 20,
    "max_steps_per_turn": 1200,
    "max_generation_retries": 25,
    "max_dynamic_tools_per_chat": 250,
    "max_attachments_per_chat": 20,
    "max_prompt_bytes": 256 * 1024,
    "max_tool_output_bytes": 1024 * 1024,
}
LIMIT_NAMES = tuple(DEFAULT_LIMITS)
