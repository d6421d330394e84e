"""Helpers for catalog tests: run commands, expect refusals, read the catalog."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from commands.handler import command_from_dict, execute
from ledger.catalog.aggregate import OrganizationCatalog
from ledger.errors import LedgerError

ORG = "0a000000-0000-4000-8000-000000000001"
ORG2 = "0a000000-0000-4000-8000-000000000002"
ALICE = "0b000000-0000-4000-8000-0000000000a1"
BOB = "0b000000-0000-4000-8000-0000000000b0"
M1 = "0c000000-0000-4000-8000-000000000001"
M2 = "0c000000-0000-4000-8000-000000000002"
M3 = "0c000000-0000-4000-8000-000000000003"
FOREIGN = "0c000000-0000-4000-8000-0000000000f0"
W = {"worker_id": str(uuid.UUID(int=1)), "runner_id": str(uuid.UUID(int=2))}


def run(app: Any, **command: Any) -> dict[str, Any]:
    return execute(app, command_from_dict(command))


def refused(app: Any, code: str, message: str | None = None, **command: Any) -> LedgerError:
    """Run a command that must be refused with ``code`` (and ``message``) and record nothing."""
    before = app.head()
    with pytest.raises(LedgerError) as err:
        run(app, **command)
    assert err.value.code == code, (err.value.code, err.value.message)
    if message is not None:
        assert err.value.message == message
    assert app.head() == before, "a refused command recorded something"
    return err.value


def catalog(app: Any, org: str = ORG) -> Any:
    agg = app.load(uuid.UUID(org))
    assert isinstance(agg, OrganizationCatalog)
    return agg.state


def config(app: Any, org: str = ORG, model_config_id: str | None = None, provider: str = "anthropic",
           **kw: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"type": "create_model_config", "organization_id": org, "provider": provider,
                              "model": "claude", "context_limit": 200_000}
    if model_config_id:
        fields["model_config_id"] = model_config_id
    fields.update(kw)
    return run(app, **fields)


def org_with(app: Any, org: str = ORG, members: tuple[str, ...] = (ALICE, BOB), configs: tuple[str, ...] = (M1, M2),
             providers: tuple[str, ...] = ("anthropic", "openai")) -> None:
    """An organization with members and configs (the first the default), config i on provider i % 2."""
    for m in members:
        run(app, type="add_organization_member", organization_id=org, user_id=m)
    for i, c in enumerate(configs):
        config(app, org, c, provider=providers[i % len(providers)], model=f"model-{i}",
               context_limit=100_000 * (i + 1))


def chat(app: Any, org: str = ORG, owner: str = ALICE, **kw: Any) -> dict[str, Any]:
    return run(app, type="create_chat", organization_id=org, owner_id=owner, text="hi", **kw)


def default_of(app: Any, org: str = ORG) -> str | None:
    d = catalog(app, org).default_model_config_id
    return str(d) if d else None
