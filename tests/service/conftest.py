"""A served ledger with two organizations, chats, and a token per role (``world``), on SQLite and
PostgreSQL (``db_url``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import pytest

from ledger.store import open_app
from tests.audit.kit import scenario
from tests.catalog.kit import ALICE, BOB, ORG, ORG2, chat, org_with
from tests.service.server import Server, tokens

CAROL = "0b000000-0000-4000-8000-0000000000c0"
ADMIN = "0b000000-0000-4000-8000-0000000000ad"
AUDITOR = "0b000000-0000-4000-8000-0000000000a0"
DEPLOYER = "0b000000-0000-4000-8000-0000000000de"
M3 = "0c000000-0000-4000-8000-000000000003"

ROLES = {
    "alice": {"user": ALICE, "org": ORG, "role": "member"},  # owns chat A
    "bob": {"user": BOB, "org": ORG, "role": "member"},  # owns chat B in the same organization
    "admin": {"user": ADMIN, "org": ORG, "role": "admin"},
    "auditor": {"user": AUDITOR, "org": ORG, "role": "auditor"},
    "carol": {"user": CAROL, "org": ORG2, "role": "member"},  # another organization
    "deployer": {"user": DEPLOYER, "deployment_admin": True},
}


@dataclass
class World:
    server: Server
    secrets: dict[str, str]
    chat_a: str  # ALICE's, in ORG (the audit scenario: tool calls c1..c3, a queued prompt)
    chat_b: str  # BOB's, in ORG
    chat_c: str  # CAROL's, in ORG2
    tree_size: int = 0  # events in the stored Merkle tree and its published checkpoint (before the server started)

    def client(self, who: str | None, **kw: Any) -> Any:
        return self.server.client(self.secrets.get(who) if who else None, **kw)


def seed(url: str) -> tuple[str, str, str]:
    app = open_app(url)
    try:
        chat_a = scenario(app)
        chat_b = chat(app, owner=BOB)["chat_id"]
        org_with(app, ORG2, members=(CAROL,), configs=(M3,))
        chat_c = chat(app, org=ORG2, owner=CAROL)["chat_id"]
    finally:
        app.close()
    return chat_a, chat_b, chat_c


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    chats = seed(db_url)
    secrets = tokens(db_url, **ROLES)
    app = open_app(db_url)
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from commands.evidence import publish_checkpoint

        # a published checkpoint (as serve --checkpoint-key records one), which builds the tree first
        checkpoint = publish_checkpoint(app, Ed25519PrivateKey.generate())
        assert checkpoint is not None
        size = checkpoint.log_size
    finally:
        app.close()
    with Server(db_url) as server:
        yield World(server, secrets, *chats, tree_size=size)
