"""The ``org_models`` view (docs/commands.md, "CLI" ``models``): one row per organization, and one per (organization,
user) member or user with personal overrides, with what that user gets in each context.

Rows are ``ledger.catalog.views`` of the folded catalog state and the deployment settings *as of the
same point in the log*: the deployment's stream version is kept in the ``deployment`` table, so the
view never reads settings from the future, and a change of the deployment settings rewrites every
organization's rows (the effective models depend on them).
"""

from __future__ import annotations

from typing import Any, Iterable
from uuid import UUID

from ledger.catalog import events as cev
from ledger.catalog.evolve import evolve_catalog, evolve_deployment
from ledger.catalog.aggregate import OrganizationCatalog
from ledger.catalog.state import DEFAULT_DEPLOYMENT, CatalogState
from ledger.streams import locate
from ledger.catalog.views import models_view
from projections.engine import BIGINT, BOOLEAN, JSON, TEXT, TIMESTAMP, Column, Delete, Projection, RowOp, Rows, Table, Upsert
from projections.folding import StreamFold

ORG_MODEL_TOPICS = tuple(sorted(
    cls.TOPIC for cls in vars(cev).values()
    if isinstance(cls, type) and issubclass(cls, (cev.CatalogEvent, cev.DeploymentEvent)) and cls.__dict__.get("TOPIC")))


class OrgModelsView(Projection):
    name = "org_models"
    version = 1
    # Log order: an organization's rows depend on the deployment stream as of the same log position (and a
    # deployment change rewrites every organization's rows), so they are not a function of one stream.
    streamwise = False
    topics = ORG_MODEL_TOPICS
    tables = [
        Table("organizations", [
            Column("organization_id", TEXT), Column("default_model_config_id", TEXT), Column("configs", JSON, False),
            Column("admin_overrides", JSON, False), Column("members", JSON, False), Column("providers", JSON, False),
            Column("personal_model_overrides_enabled", BOOLEAN, False), Column("version", BIGINT, False),
            Column("updated_at", TIMESTAMP),
        ], primary_key=["organization_id"]),
        Table("users", [
            Column("organization_id", TEXT), Column("user_id", TEXT), Column("personal_overrides", JSON, False),
            Column("effective", JSON, False),
        ], primary_key=["organization_id", "user_id"]),
        Table("deployment", [Column("id", TEXT), Column("version", BIGINT, False)], primary_key=["id"]),
    ]

    def __init__(self, app: Any) -> None:
        self.app = app
        self.catalogs = StreamFold(app, evolve_catalog, cev.CatalogStarted)
        self.deployments = StreamFold(app, evolve_deployment, cev.DeploymentStarted)

    def prepare(self, events: Any) -> None:
        self.catalogs.prefetch([e for e in events if isinstance(e, cev.CatalogEvent)])
        self.deployments.prefetch([e for e in events if isinstance(e, cev.DeploymentEvent)])

    def apply(self, event: Any, rows: Rows) -> Iterable[RowOp]:
        if isinstance(event, cev.DeploymentEvent):
            deployment = self.deployments.after(event, self.deployments.before(event))
            # the row names the deployment's stream (DEPLOYMENT_ID unless that id was squatted: ledger.streams)
            ops: list[RowOp] = [Upsert("deployment", {"id": str(event.originator_id),
                                                      "version": event.originator_version})]
            for org in rows.select("organizations"):
                stream_id, _ = locate(self.app, OrganizationCatalog, UUID(org["organization_id"]), self.app.load)
                catalog = self.app.load(stream_id, version=org["version"])
                ops.extend(self._rows(catalog.state, deployment, rows))
            return ops
        before = self.catalogs.before(event)
        catalog = self.catalogs.after(event, before)
        return self._rows(catalog, self._deployment(rows), rows)

    def _deployment(self, rows: Rows) -> Any:
        found = rows.select("deployment")
        if not found:
            return DEFAULT_DEPLOYMENT
        row = found[0]
        agg = self.app.load(UUID(row["id"]), version=row["version"])
        return agg.state if agg is not None else DEFAULT_DEPLOYMENT

    def _rows(self, catalog: CatalogState, deployment: Any, rows: Rows) -> list[RowOp]:
        org = catalog.organization_id
        view = models_view(org, catalog, deployment)
        ops: list[RowOp] = [Upsert("organizations", {**view_row(view), "version": catalog.version,
                                                     "updated_at": catalog.updated_at})]
        users = set(catalog.members) | set(catalog.user_overrides)
        for old in rows.select("users", {"organization_id": str(org)}):
            if UUID(old["user_id"]) not in users:
                ops.append(Delete("users", (old["organization_id"], old["user_id"])))
        for user in sorted(users):
            mine = models_view(org, catalog, deployment, user)
            ops.append(Upsert("users", {"organization_id": str(org), "user_id": str(user),
                                        "personal_overrides": mine["personal_overrides"],
                                        "effective": mine["effective"]}))
        return ops


def view_row(view: dict[str, Any]) -> dict[str, Any]:
    return {k: view[k] for k in ("organization_id", "default_model_config_id", "configs", "admin_overrides",
                                 "members", "providers", "personal_model_overrides_enabled")}


def org_model_projections(app: Any) -> list[Projection]:
    return [OrgModelsView(app)]
