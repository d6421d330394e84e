"""The ``models`` read shape (docs/commands.md, "CLI"), computed from catalog (and deployment) state by a pure function,
so a projection can materialize the same rows from the same state."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ledger.catalog.resolve import ChatModelFacts, ModelFacts, resolve_model, root_choice
from ledger.catalog.state import DEFAULT_DEPLOYMENT, CatalogState, DeploymentState
from ledger.catalog.values import ADMIN_CONTEXTS, CONTEXTS, USER_CONTEXTS
from ledger.errors import LedgerError


def _s(v: Any) -> Any:
    return str(v) if isinstance(v, UUID) else v


def _effort(e: Any) -> Any:
    return {"default": e.default, "max": e.max} if e is not None else None


def config_rows(catalog: CatalogState) -> list[dict[str, Any]]:
    """Live configs in creation order."""
    return [
        {
            "model_config_id": str(c.model_config_id),
            "provider": c.provider,
            "model": c.model,
            "display_name": c.display_name,
            "enabled": c.enabled,
            "usable": catalog.usable(c.model_config_id),
            "is_default": catalog.default_model_config_id == c.model_config_id,
            "context_limit": c.context_limit,
            "compression_threshold": c.compression_threshold,
            "reasoning_effort": _effort(c.reasoning_effort),
            "unusable_reason": catalog.problem(c.model_config_id),
        }
        for c in catalog.configs.values()
    ]


def effective_models(catalog: CatalogState, deployment: DeploymentState, user: UUID) -> dict[str, Any]:
    """context -> the model ``user`` gets in this organization for a new root chat and for its subagents,
    title generation, compaction and advisor: ``{model_config_id, source, reason}`` (all null with
    ``error`` when the organization has no usable model, or for a context that fails hard: an unusable
    ``title_generation`` override, ``model_override_unusable``)."""
    facts = ModelFacts(catalog.organization_id, catalog, deployment)
    out: dict[str, Any] = {}
    try:
        root = root_choice(facts, user)
    except LedgerError as e:
        return {c: {"model_config_id": None, "source": None, "reason": None, "error": e.code} for c in CONTEXTS}
    out["root"] = {"model_config_id": str(root.model_config_id), "source": root.source, "reason": root.reason}
    chat = ChatModelFacts(organization_id=catalog.organization_id, owner_id=user,
                          model_config_id=root.model_config_id)
    for context in CONTEXTS[1:]:
        try:
            r = resolve_model(context, chat, catalog, deployment, user)  # type: ignore[arg-type]
        except LedgerError as e:  # a context that fails hard (an unusable title_generation override)
            out[context] = {"model_config_id": None, "source": None, "reason": None, "error": e.code}
            continue
        out[context] = {"model_config_id": str(r.model_config_id), "source": r.source, "reason": r.reason}
    return out


def models_view(organization_id: UUID, catalog: CatalogState | None, deployment: DeploymentState | None = None,
                user: UUID | None = None) -> dict[str, Any]:
    """docs/commands.md, "CLI" ``models``: ``organization_id, default_model_config_id, configs, admin_overrides
    (context -> {model_config_id, usable, reasoning_effort}), members``, plus ``providers`` and
    ``personal_model_overrides_enabled``; with ``user``: ``personal_overrides`` (context -> {mode,
    model_config_id, reasoning_effort, usable}) and ``effective`` (context -> {model_config_id, source,
    reason})."""
    deployment = deployment if deployment is not None else DEFAULT_DEPLOYMENT
    catalog = catalog if catalog is not None else CatalogState(organization_id=organization_id)
    view: dict[str, Any] = {
        "organization_id": str(organization_id),
        "default_model_config_id": _s(catalog.default_model_config_id),
        "configs": config_rows(catalog),
        "admin_overrides": {
            ctx: {"model_config_id": str(o.model_config_id), "usable": catalog.usable(o.model_config_id),
                  "reasoning_effort": o.reasoning_effort}
            for ctx in ADMIN_CONTEXTS if (o := catalog.admin_overrides.get(ctx)) is not None
        },
        "members": sorted(str(m) for m in catalog.members),
        "providers": {name: {"enabled": p.enabled, "credentials_available": p.credentials_available}
                      for name, p in sorted(catalog.providers.items())},
        "personal_model_overrides_enabled": deployment.personal_model_overrides_enabled,
    }
    if user is not None:
        mine = catalog.user_overrides.get(user, {})
        view["personal_overrides"] = {
            ctx: {"mode": o.mode, "model_config_id": _s(o.model_config_id), "reasoning_effort": o.reasoning_effort,
                  "usable": o.mode == "model" and catalog.usable(o.model_config_id)}
            for ctx in USER_CONTEXTS if (o := mine.get(ctx)) is not None
        }
        view["effective"] = effective_models(catalog, deployment, user)
    return view
