"""Generation settings from the model catalog and the deployment (a pure function).

``generation_settings(chat, catalog, deployment)`` assembles the ``GenerationSettings`` the decision
procedure (``ledger.policy.generation.next_action``) runs with for one chat, the way chatd prepares a
generation:

* the chat's model is resolved for the ``root`` (generation) context with ``resolve_model`` — the chat's
  stored model when usable, else the organization's usable default (``fallback_default``): its
  ``compression_threshold`` is the compaction threshold and its ``context_limit`` the context limit;
* the ``compaction`` context gives the trigger's limit: the smaller of the chat model's and the admin
  compaction override's (``compaction_context_limit``);
* the advisor: enabled by the deployment (``advisor_enabled``), usable when a model resolves for the
  ``advisor`` context, capped at ``advisor_max_uses_per_turn``.

When no model resolves (no catalog, or no usable model in the organization) the settings fall back to
the defaults (threshold 70%, the context limit the latest message recorded, advisor not usable) and
``source`` says ``defaults`` with the reason. ``next-action`` and the simulator both call this, so what
the CLI says a runner should do is what the simulator did.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence
from uuid import UUID

import msgspec

from ledger.catalog.resolve import ChatModelFacts, ResolvedModel, resolve_model
from ledger.catalog.state import DEFAULT_DEPLOYMENT, CatalogState, DeploymentState
from ledger.chat.state import ChatState
from ledger.chat.values import AttemptSettings, RecordedModel
from ledger.errors import LedgerError
from ledger.policy.generation import DEFAULT_THRESHOLD_PERCENT, GenerationSettings, NextAction
from ledger.policy.tools import AdvisorSettings, offered_tools


class SettingsReport(msgspec.Struct, frozen=True, kw_only=True):
    """The settings and where they came from (``source``: ``catalog`` or ``defaults``)."""

    settings: GenerationSettings
    source: str
    note: str | None = None
    model: dict[str, Any] | None = None
    compaction_model: dict[str, Any] | None = None
    advisor_model: dict[str, Any] | None = None
    context_limit_source: str = "catalog"
    #: the generation model as an attempt records it (with its provider and model name); None: defaults
    recorded_model: RecordedModel | None = None


def latest_context_limit(state: ChatState) -> int | None:
    """The context limit recorded on the latest non-deleted message that has one."""
    for m in reversed(state.messages):
        if not m.deleted and m.context_limit:
            return m.context_limit
    return None


def _resolved(r: ResolvedModel) -> dict[str, Any]:
    return {"model_config_id": str(r.model_config_id), "source": r.source, "reason": r.reason,
            "context_limit": r.context_limit}


def _try(context: str, chat: ChatModelFacts, catalog: CatalogState | None, deployment: DeploymentState,
         owners: Mapping[UUID, UUID] | None) -> ResolvedModel | LedgerError:
    try:
        return resolve_model(context, chat, catalog, deployment, owners=owners)  # type: ignore[arg-type]
    except LedgerError as e:
        return e


def generation_settings(chat: ChatState, catalog: CatalogState | None, deployment: DeploymentState | None,
                        *, stop_after_tools: Sequence[str] = (), max_steps: int | None = None,
                        owners: Mapping[UUID, UUID] | None = None) -> SettingsReport:
    """The generation settings of ``chat`` given its organization's catalog and the deployment (its limits:
    steps per turn unless ``max_steps`` overrides it, generation retries, tool output bytes)."""
    deployment = deployment if deployment is not None else DEFAULT_DEPLOYMENT
    limits = deployment.limits
    max_steps = max_steps if max_steps is not None else limits.effective("max_steps_per_turn")
    bounds = {"max_generation_retries": limits.effective("max_generation_retries"),
              "max_tool_output_bytes": limits.effective("max_tool_output_bytes")}
    if catalog is not None and catalog.organization_id != chat.organization_id:
        catalog = None
    facts = ChatModelFacts(organization_id=chat.organization_id, owner_id=chat.owner_id,
                           model_config_id=chat.model_config_id)
    root = _try("root", facts, catalog, deployment, owners) if catalog is not None else None
    if not isinstance(root, ResolvedModel):
        recorded = latest_context_limit(chat)
        why = "no catalog for the chat's organization" if root is None else f"{root.code}: {root.message}"
        return SettingsReport(
            settings=GenerationSettings(
                stop_after_tools=list(stop_after_tools), max_steps=max_steps, **bounds,
                threshold_percent=DEFAULT_THRESHOLD_PERCENT, context_limit=recorded or 0,
                advisor=AdvisorSettings(enabled=deployment.advisor_enabled, model_usable=False,
                                        max_uses_per_turn=deployment.advisor_max_uses_per_turn)),
            source="defaults",
            note=f"no model resolves ({why}): threshold 70%, context limit from the latest message",
            context_limit_source="latest_message" if recorded else "none",
        )
    assert catalog is not None
    config = catalog.configs[root.model_config_id]
    compaction = _try("compaction", facts, catalog, deployment, owners)
    advisor = _try("advisor", facts, catalog, deployment, owners)
    compaction_limit = compaction.context_limit if isinstance(compaction, ResolvedModel) else root.context_limit
    settings = GenerationSettings(
        stop_after_tools=list(stop_after_tools), max_steps=max_steps, **bounds,
        threshold_percent=config.compression_threshold, context_limit=root.context_limit,
        compaction_context_limit=compaction_limit,
        advisor=AdvisorSettings(enabled=deployment.advisor_enabled,
                                model_usable=isinstance(advisor, ResolvedModel),
                                max_uses_per_turn=deployment.advisor_max_uses_per_turn),
    )
    return SettingsReport(
        settings=settings, source="catalog", model=_resolved(root),
        compaction_model=_resolved(compaction) if isinstance(compaction, ResolvedModel) else None,
        advisor_model=_resolved(advisor) if isinstance(advisor, ResolvedModel) else None,
        recorded_model=RecordedModel(model_config_id=root.model_config_id, provider=config.provider,
                                     model=config.model, source=root.source, reason=root.reason,
                                     requested_model_config_id=root.requested_model_config_id),
    )


def attempt_settings(chat: ChatState, settings: GenerationSettings, model: RecordedModel | None,
                     decision: NextAction, source: str = "ledger") -> AttemptSettings:
    """What a generation attempt on ``chat`` runs with: the settings, the model they came from
    (``SettingsReport.recorded_model``) and the decision made with them (``record_generation_attempt``
    records it; ``events verify --decisions`` re-derives it)."""
    s = settings
    advisor = decision.advisor
    return AttemptSettings(
        source=source, action=decision.action, model=model,  # type: ignore[arg-type]
        context_limit=s.context_limit, compaction_threshold=s.threshold_percent,
        compaction_trigger_limit=decision.compaction.context_limit,
        advisor_eligible=advisor.eligible, advisor_reason=advisor.reason,
        advisor_remaining_uses=advisor.remaining_uses, tools=offered_tools(chat, decision.exclusive_tools,
                                                                           advisor.tool_offered),
        max_steps_per_turn=s.max_steps, max_generation_retries=s.max_generation_retries,
        max_tool_output_bytes=s.max_tool_output_bytes,
    )
