"""The org_models view equals the state folded from the catalog streams (and the deployment settings as
of the same point), after random catalog histories caught up incrementally in random batch sizes."""

from __future__ import annotations

import uuid
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from commands.handler import command_from_dict, execute
from ledger.catalog.state import DEPLOYMENT_ID
from ledger.catalog.views import models_view
from ledger.errors import LedgerError
from projections import catch_up
from projections.org_models import OrgModelsView, view_row
from tests.projections.projection_kit import read_build

ORGS = [str(uuid.UUID(int=(0xA << 120) + i)) for i in range(2)]
USERS = [str(uuid.UUID(int=(0xB << 120) + i)) for i in range(3)]
MODELS = [str(uuid.UUID(int=(0xC << 120) + i)) for i in range(4)]

COMMANDS = st.one_of(
    st.builds(lambda o, u: {"type": "add_organization_member", "organization_id": o, "user_id": u},
              st.sampled_from(ORGS), st.sampled_from(USERS)),
    st.builds(lambda o, u: {"type": "remove_organization_member", "organization_id": o, "user_id": u},
              st.sampled_from(ORGS), st.sampled_from(USERS)),
    st.builds(lambda o, m, p, e: {"type": "create_model_config", "organization_id": o, "model_config_id": m,
                                  "provider": p, "model": "x", "context_limit": 1000, "enabled": e},
              st.sampled_from(ORGS), st.sampled_from(MODELS), st.sampled_from(["anthropic", "openai"]), st.booleans()),
    st.builds(lambda o, m, e: {"type": "update_model_config", "organization_id": o, "model_config_id": m, "enabled": e},
              st.sampled_from(ORGS), st.sampled_from(MODELS), st.booleans()),
    st.builds(lambda o, m: {"type": "delete_model_config", "organization_id": o, "model_config_id": m},
              st.sampled_from(ORGS), st.sampled_from(MODELS)),
    st.builds(lambda o, p, e, c: {"type": "set_provider", "organization_id": o, "provider": p, "enabled": e,
                                  "credentials_available": c},
              st.sampled_from(ORGS), st.sampled_from(["anthropic", "openai"]), st.booleans(), st.booleans()),
    st.builds(lambda o, ctx, m: {"type": "set_admin_model_override", "organization_id": o, "context": ctx,
                                 "model_config_id": m},
              st.sampled_from(ORGS), st.sampled_from(["general", "explore", "compaction", "advisor"]),
              st.none() | st.sampled_from(MODELS)),
    st.builds(lambda o, u, m: {"type": "set_user_model_override", "organization_id": o, "user_id": u,
                               "context": "root", "mode": "model", "model_config_id": m},
              st.sampled_from(ORGS), st.sampled_from(USERS), st.sampled_from(MODELS)),
    st.builds(lambda e: {"type": "set_deployment_settings", "personal_model_overrides_enabled": e}, st.booleans()),
)


def expected(app: Any) -> dict[str, list[dict[str, Any]]]:
    """The view's rows computed from the replayed catalog and deployment states."""
    deployment = app.load(DEPLOYMENT_ID)
    dep = deployment.state if deployment is not None else None
    out: dict[str, list[dict[str, Any]]] = {"organizations": [], "users": [], "deployment": []}
    if deployment is not None:
        out["deployment"].append({"id": str(DEPLOYMENT_ID), "version": deployment.version})
    for org in ORGS:
        agg = app.load(uuid.UUID(org))
        if agg is None:
            continue
        s = agg.state
        out["organizations"].append({**view_row(models_view(s.organization_id, s, dep)), "version": s.version,
                                     "updated_at": s.updated_at})
        for user in sorted(set(s.members) | set(s.user_overrides)):
            mine = models_view(s.organization_id, s, dep, user)
            out["users"].append({"organization_id": org, "user_id": str(user),
                                 "personal_overrides": mine["personal_overrides"], "effective": mine["effective"]})
    for table in OrgModelsView.tables:
        out[table.name] = sorted((table.normalize_row(r) for r in out[table.name]), key=table.key_of)
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(commands=st.lists(COMMANDS, min_size=1, max_size=25), checkpoints=st.sets(st.integers(0, 24), max_size=4),
       batch=st.integers(1, 7))
def test_org_models_view_equals_folded_catalogs(app: Any, backend: Any, commands: list[dict[str, Any]],
                                                 checkpoints: set[int], batch: int) -> None:
    name = f"org_models_{uuid.uuid4().hex[:6]}"
    view = type("OrgModelsUnderTest", (OrgModelsView,), {"name": name})(app)
    for i, command in enumerate(commands):
        try:
            execute(app, command_from_dict(command))
        except LedgerError:
            pass
        if i in checkpoints:
            catch_up(app, view, backend, batch_size=batch)
            assert read_build(backend, view) == expected(app)
    catch_up(app, view, backend, batch_size=batch)
    assert read_build(backend, view) == expected(app)
