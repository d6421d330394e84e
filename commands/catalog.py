"""Catalog and deployment commands (docs/commands.md, "Chat commands"): one Struct per command type and their handlers, and
``load_model_facts``, which chat handlers use to read what model resolution needs.

A catalog handler loads the organization's catalog through the application's aggregate cache (a copy
it may record on), the deployment and model config claims when its rule needs them, asks the pure
``ledger.catalog.decide`` for events, records them (with the claim of a new model config id, atomically)
and returns a result built from the state after them and the events recorded. A repeat of a command whose
``idempotency_key`` the stream has recorded returns the first result and records nothing; a command that
changes nothing records nothing (``recorded: 0``).

Results: catalog commands ``{organization_id, version, default_model_config_id, recorded,
default_changes: [{model_config_id, previous_model_config_id, reason}]}`` plus ``model_config_id`` /
``user_id`` / ``provider`` / ``context`` as the command names them; ``set_deployment_settings``
``{version, recorded, settings: {...}}``.
"""

from __future__ import annotations

from typing import Annotated, Any, Iterable
from uuid import UUID, uuid4, uuid5

import msgspec
from eventsourcing.application import Application

from commands.base import Command, emitter, first_result, handles, is_repeat
from commands.uow import UnitOfWork, run
from ledger.catalog import decide as cd
from ledger.catalog import events as cev
from ledger.catalog.aggregate import Deployment, ModelConfigClaim, OrganizationCatalog
from ledger.catalog.resolve import ModelFacts
from ledger.catalog.state import DEPLOYMENT_ID, CatalogState, DeploymentState
from ledger.catalog.values import (
    LIMIT_NAMES, AdminContext, EffortLevel, Limits, ModelConfig, OverrideMode, ReasoningEffort, UserContext,
)
from ledger.streams import locate, refuse_reserved
from ledger.chat.values import MAX_INT64

UNSET: Any = msgspec.UNSET
MODEL_CONFIG_KEY_NAMESPACE = UUID("9d3c1f6e-5a2b-5c8d-9e0f-1a2b3c4d5e6f")


# -- command messages -----------------------------------------------------------------------------------

class AddOrganizationMember(Command, tag="add_organization_member", kw_only=True):
    organization_id: UUID
    user_id: UUID


class RemoveOrganizationMember(Command, tag="remove_organization_member", kw_only=True):
    organization_id: UUID
    user_id: UUID


#: A limit or count of the catalog: at most what a signed 64-bit column stores (the lower bounds, with their
#: own messages, are the rules of ``ledger.catalog.decide``).
Limit = Annotated[int, msgspec.Meta(le=MAX_INT64)]


class CreateModelConfig(Command, tag="create_model_config", kw_only=True):
    """Without ``model_config_id`` the id is derived from the organization and the idempotency key when one
    is given (so a repeat finds the same config), else a fresh uuid4. ``display_name`` defaults to ``model``."""

    organization_id: UUID
    model_config_id: UUID | None = None
    provider: str
    model: str
    display_name: str | None = None
    context_limit: Limit
    compression_threshold: int = 70
    enabled: bool = True
    is_default: bool = False
    reasoning_effort: ReasoningEffort | None = None


class UpdateModelConfig(Command, tag="update_model_config", kw_only=True):
    """Any field of create; a field left out keeps its value (``reasoning_effort: null`` clears it)."""

    organization_id: UUID
    model_config_id: UUID
    provider: str | msgspec.UnsetType = UNSET
    model: str | msgspec.UnsetType = UNSET
    display_name: str | None | msgspec.UnsetType = UNSET
    context_limit: Limit | msgspec.UnsetType = UNSET
    compression_threshold: int | msgspec.UnsetType = UNSET
    enabled: bool | msgspec.UnsetType = UNSET
    is_default: bool | msgspec.UnsetType = UNSET
    reasoning_effort: ReasoningEffort | None | msgspec.UnsetType = UNSET


class DeleteModelConfig(Command, tag="delete_model_config", kw_only=True):
    organization_id: UUID
    model_config_id: UUID


class SetDefaultModelConfig(Command, tag="set_default_model_config", kw_only=True):
    organization_id: UUID
    model_config_id: UUID


class SetProvider(Command, tag="set_provider", kw_only=True):
    organization_id: UUID
    provider: str
    enabled: bool | None = None
    credentials_available: bool | None = None


class SetAdminModelOverride(Command, tag="set_admin_model_override", kw_only=True):
    organization_id: UUID
    context: AdminContext
    model_config_id: UUID | None
    reasoning_effort: EffortLevel | None = None


class SetUserModelOverride(Command, tag="set_user_model_override", kw_only=True):
    organization_id: UUID
    user_id: UUID
    context: UserContext
    mode: OverrideMode
    model_config_id: UUID | None = None
    reasoning_effort: EffortLevel | None = None


class SetDeploymentSettings(Command, tag="set_deployment_settings", kw_only=True):
    """``limits`` replaces the deployment's limits as a whole: a limit left out (or 0) is at its default."""

    personal_model_overrides_enabled: bool | None = None
    advisor_enabled: bool | None = None
    advisor_max_uses_per_turn: Limit | None = None
    advisor_max_output_tokens: Limit | None = None
    limits: Limits | None = None


# -- reading the catalog streams ------------------------------------------------------------------------------

def catalog_of(agg: Any) -> CatalogState | None:
    return agg.state if isinstance(agg, OrganizationCatalog) else None


def deployment_of(agg: Any) -> DeploymentState | None:
    return agg.state if isinstance(agg, Deployment) else None


def _reader(source: Any) -> tuple[Any, Any]:
    """(application, read) of an application (its aggregate cache), or of a reader of catalog-type aggregates
    with ``app`` and ``read`` (a unit of work; the streams as of a log position, ``commands.asof.Positioned``)."""
    if isinstance(source, Application):
        return source, lambda aggregate_id: source.load_cached(aggregate_id, copy=False)
    return source.app, source.read


def find_catalog(source: Any, organization_id: UUID) -> CatalogState | None:
    """The organization's catalog (wherever its stream is: ``ledger.streams``), read-only, or None."""
    app, read = _reader(source)
    return catalog_of(locate(app, OrganizationCatalog, organization_id, read)[1])


def find_deployment(source: Any) -> DeploymentState | None:
    app, read = _reader(source)
    return deployment_of(locate(app, Deployment, DEPLOYMENT_ID, read)[1])


def deployment_limits(source: Any) -> Limits:
    """The deployment's limits in force (all defaults on a ledger that never set any)."""
    deployment = find_deployment(source)
    return deployment.limits if deployment is not None else Limits()


def claim_owner(source: Any, model_config_id: UUID) -> UUID | None:
    """The organization a model config id belongs to, from its claim stream; None when unclaimed."""
    app, read = _reader(source)
    claim = locate(app, ModelConfigClaim, model_config_id, read)[1]
    return claim.state.organization_id if claim is not None else None


def owners_of(source: Any, catalog: CatalogState | None, ids: Iterable[UUID | None]) -> dict[UUID, UUID]:
    """The owning organization of each id the catalog does not hold (from its claim stream)."""
    owners: dict[UUID, UUID] = {}
    for cid in ids:
        if cid is None or cid in owners:
            continue
        if catalog is not None and (cid in catalog.configs or cid in catalog.deleted):
            continue
        owner = claim_owner(source, cid)
        if owner is not None:
            owners[cid] = owner
    return owners


def load_model_facts(uow: UnitOfWork, organization_id: UUID, ids: Iterable[UUID | None] = (),
                     deployment: bool = False) -> ModelFacts:
    """What model resolution for a chat of ``organization_id`` needs, read through the aggregate cache
    (no replay, no copy): the catalog, the deployment when asked, and the owners of ``ids`` it lacks.
    Each is a dependency of the decision: the save checks that it is still current (``commands.uow``)."""
    catalog = find_catalog(uow, organization_id)
    dep = find_deployment(uow) if deployment else None
    return ModelFacts(organization_id, catalog, dep, owners_of(uow, catalog, ids))


def _catalog_for_write(uow: UnitOfWork, organization_id: UUID) -> tuple[UUID, OrganizationCatalog | None]:
    """The catalog's stream id and a copy of it to record on (None before its first event)."""
    refuse_reserved("organization_id", organization_id)
    return locate(uow.app, OrganizationCatalog, organization_id, uow.get_cached)


# -- results ---------------------------------------------------------------------------------------------

def catalog_result(state: CatalogState, events: list[Any]) -> dict[str, Any]:
    changes = [
        {"model_config_id": str(e.model_config_id) if e.model_config_id else None,
         "previous_model_config_id": str(e.previous_model_config_id) if e.previous_model_config_id else None,
         "reason": e.reason}
        for e in events if isinstance(e, cev.DefaultModelConfigChanged)
    ]
    return {
        "organization_id": str(state.organization_id),
        "version": state.version,
        "default_model_config_id": str(state.default_model_config_id) if state.default_model_config_id else None,
        "recorded": len(events),
        "default_changes": changes,
    }


def _empty_result(organization_id: UUID) -> dict[str, Any]:
    return {"organization_id": str(organization_id), "version": 0, "default_model_config_id": None,
            "recorded": 0, "default_changes": []}


def on_catalog(app: Any, cmd: Any, decide: Any, extra: dict[str, Any] | None = None,
               prepare: Any = None) -> dict[str, Any]:
    """Run ``decide(state, em, work_context)`` on the organization's catalog and record what it returns.

    ``prepare(uow, state)`` reads further facts (claims, the deployment) and returns what ``decide`` gets as
    its third argument; ``extra`` fields are added to the result.
    """
    org = cmd.organization_id

    def work(uow: UnitOfWork) -> dict[str, Any]:
        stream_id, agg = _catalog_for_write(uow, org)
        state = agg.state if agg is not None else None
        if is_repeat(agg, cmd):
            result = first_result(app, agg, cmd, catalog_result)
        else:
            em = emitter(cmd, stream_id, agg.version if agg is not None else 0, uow.now)
            context = prepare(uow, state) if prepare is not None else None
            events = decide(state, em, context)
            if not events:
                result = catalog_result(state, []) if state is not None else _empty_result(org)
            else:
                if agg is None:
                    agg = uow.create(OrganizationCatalog, events)
                else:
                    uow.record(agg, events)
                for e in events:
                    if isinstance(e, cev.ModelConfigCreated):
                        # The id's claim, in the same transaction: ids are unique across organizations,
                        # and a chat of another organization naming it is told it is foreign.
                        cid = e.config.model_config_id
                        claim_id, _ = locate(app, ModelConfigClaim, cid, uow.read)
                        claim = emitter(cmd, claim_id, 0, uow.now)
                        claim.emit(cev.ModelConfigClaimed, originator_topic=ModelConfigClaim.TOPIC,
                                   organization_id=org, model_config_id=cid if claim_id != cid else None)
                        uow.create(ModelConfigClaim, claim.events)
                result = catalog_result(agg.state, events)
        result.update(extra or {})
        return result

    return run(app, work)


_TOPIC = OrganizationCatalog.TOPIC


# -- handlers ----------------------------------------------------------------------------------------------

@handles(AddOrganizationMember)
def add_organization_member(app: Any, cmd: AddOrganizationMember) -> dict[str, Any]:
    return on_catalog(app, cmd, lambda s, em, _: cd.add_member(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, user_id=cmd.user_id),
        {"user_id": str(cmd.user_id)})


@handles(RemoveOrganizationMember)
def remove_organization_member(app: Any, cmd: RemoveOrganizationMember) -> dict[str, Any]:
    return on_catalog(app, cmd, lambda s, em, _: cd.remove_member(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, user_id=cmd.user_id),
        {"user_id": str(cmd.user_id)})


@handles(CreateModelConfig)
def create_model_config(app: Any, cmd: CreateModelConfig) -> dict[str, Any]:
    if cmd.model_config_id is not None:
        cid = cmd.model_config_id
    elif cmd.idempotency_key is not None:
        cid = uuid5(MODEL_CONFIG_KEY_NAMESPACE, f"{cmd.organization_id}/{cmd.idempotency_key}")
    else:
        cid = uuid4()
    refuse_reserved("model_config_id", cid)
    config = ModelConfig(
        model_config_id=cid, provider=cmd.provider, model=cmd.model,
        display_name=cmd.display_name if cmd.display_name is not None else cmd.model,
        context_limit=cmd.context_limit, compression_threshold=cmd.compression_threshold, enabled=cmd.enabled,
        reasoning_effort=cmd.reasoning_effort)

    def claimed_by(uow: UnitOfWork, state: CatalogState | None) -> UUID | None:
        return claim_owner(uow, cid)

    return on_catalog(app, cmd, lambda s, em, owner: cd.create_model_config(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, config=config, is_default=cmd.is_default,
        claimed_by=owner), {"model_config_id": str(cid)}, prepare=claimed_by)


@handles(UpdateModelConfig)
def update_model_config(app: Any, cmd: UpdateModelConfig) -> dict[str, Any]:
    changes = {f: getattr(cmd, f) for f in cd.CONFIG_FIELDS}
    is_default = None if cmd.is_default is UNSET else cmd.is_default
    return on_catalog(app, cmd, lambda s, em, _: cd.update_model_config(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, model_config_id=cmd.model_config_id,
        changes=changes, is_default=is_default), {"model_config_id": str(cmd.model_config_id)})


@handles(DeleteModelConfig)
def delete_model_config(app: Any, cmd: DeleteModelConfig) -> dict[str, Any]:
    return on_catalog(app, cmd, lambda s, em, _: cd.delete_model_config(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, model_config_id=cmd.model_config_id),
        {"model_config_id": str(cmd.model_config_id)})


@handles(SetDefaultModelConfig)
def set_default_model_config(app: Any, cmd: SetDefaultModelConfig) -> dict[str, Any]:
    return on_catalog(app, cmd, lambda s, em, _: cd.set_default_model_config(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, model_config_id=cmd.model_config_id),
        {"model_config_id": str(cmd.model_config_id)})


@handles(SetProvider)
def set_provider(app: Any, cmd: SetProvider) -> dict[str, Any]:
    return on_catalog(app, cmd, lambda s, em, _: cd.set_provider(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, provider=cmd.provider, enabled=cmd.enabled,
        credentials_available=cmd.credentials_available), {"provider": cmd.provider})


def _facts(cmd: Any, deployment: bool = False) -> Any:
    def prepare(uow: UnitOfWork, state: CatalogState | None) -> ModelFacts:
        dep = find_deployment(uow) if deployment else None
        return ModelFacts(cmd.organization_id, state, dep, owners_of(uow, state, [cmd.model_config_id]))
    return prepare


@handles(SetAdminModelOverride)
def set_admin_model_override(app: Any, cmd: SetAdminModelOverride) -> dict[str, Any]:
    return on_catalog(app, cmd, lambda s, em, facts: cd.set_admin_model_override(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, context=cmd.context,
        model_config_id=cmd.model_config_id, reasoning_effort=cmd.reasoning_effort, facts=facts),
        {"context": cmd.context}, prepare=_facts(cmd))


@handles(SetUserModelOverride)
def set_user_model_override(app: Any, cmd: SetUserModelOverride) -> dict[str, Any]:
    return on_catalog(app, cmd, lambda s, em, facts: cd.set_user_model_override(
        s, em, organization_id=cmd.organization_id, topic=_TOPIC, user_id=cmd.user_id, context=cmd.context,
        mode=cmd.mode, model_config_id=cmd.model_config_id, reasoning_effort=cmd.reasoning_effort, facts=facts),
        {"user_id": str(cmd.user_id), "context": cmd.context}, prepare=_facts(cmd, deployment=True))


def deployment_settings(state: DeploymentState) -> dict[str, Any]:
    """The settings as the result shows them; ``limits``: every limit's value in force."""
    out = {k: getattr(state, k) for k in cd.DEPLOYMENT_SETTINGS}
    out["limits"] = state.limits.used(*LIMIT_NAMES)
    return out


def deployment_result(state: DeploymentState | None, events: list[Any]) -> dict[str, Any]:
    state = state if state is not None else DeploymentState()
    return {"version": state.version, "recorded": len(events), "settings": deployment_settings(state)}


@handles(SetDeploymentSettings)
def set_deployment_settings(app: Any, cmd: SetDeploymentSettings) -> dict[str, Any]:
    settings = {k: getattr(cmd, k) for k in cd.DEPLOYMENT_SETTINGS}

    def work(uow: UnitOfWork) -> dict[str, Any]:
        stream_id, agg = locate(app, Deployment, DEPLOYMENT_ID, uow.get_cached)
        state = agg.state if agg is not None else None
        if is_repeat(agg, cmd):
            return first_result(app, agg, cmd, deployment_result)
        em = emitter(cmd, stream_id, agg.version if agg is not None else 0, uow.now)
        events = cd.set_deployment_settings(state, em, topic=Deployment.TOPIC, settings=settings)
        if events:
            if agg is None:
                agg = uow.create(Deployment, events)
            else:
                uow.record(agg, events)
        return deployment_result(agg.state if agg is not None else None, events)

    return run(app, work)
