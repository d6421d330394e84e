"""The eventsourcing adapters of the catalog streams.

``CACHED`` marks the types the application keeps in its repository cache (ledger/store.py): they are read
on hot paths (model resolution) and change rarely, and the cache fast-forwards them on every read so a
cached catalog is exactly current.
"""

from __future__ import annotations

from typing import ClassVar

from ledger.base import DeciderAggregate
from ledger.catalog.events import CATALOG_TOPIC, CLAIM_TOPIC, DEPLOYMENT_TOPIC
from ledger.catalog.evolve import evolve_catalog, evolve_claim, evolve_deployment
from ledger.catalog.state import CatalogState, ClaimState, DeploymentState


class OrganizationCatalog(DeciderAggregate):
    """One stream per organization (stream id = the organization id)."""

    TOPIC: ClassVar[str] = CATALOG_TOPIC
    CACHED: ClassVar[bool] = True
    state: CatalogState
    evolve = staticmethod(evolve_catalog)


class Deployment(DeciderAggregate):
    """The singleton stream of deployment-wide settings (stream id ``DEPLOYMENT_ID``)."""

    TOPIC: ClassVar[str] = DEPLOYMENT_TOPIC
    CACHED: ClassVar[bool] = True
    state: DeploymentState
    evolve = staticmethod(evolve_deployment)


class ModelConfigClaim(DeciderAggregate):
    """One stream per model config id: the organization that owns it."""

    TOPIC: ClassVar[str] = CLAIM_TOPIC
    CACHED: ClassVar[bool] = True
    state: ClaimState
    evolve = staticmethod(evolve_claim)
