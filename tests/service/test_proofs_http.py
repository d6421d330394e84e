"""``GET /v1/proofs/inclusion`` and ``/v1/proofs/consistency`` (issue 27, point 4), on both backends, through a
real server: the proofs verify with RFC 9162's algorithms against the roots a signed checkpoint holds; an inclusion
proof is scoped like every read of its stream."""

from __future__ import annotations

import base64
import json
from uuid import UUID

from ledger.evidence.merkle import leaf_hash, verify_consistency, verify_inclusion
from ledger.evidence.tree import entry_bytes
from tests.audit.kit import cli
from tests.service.conftest import ROLES, World, seed
from tests.service.server import Server, tokens


def test_proofs_over_http_verify_against_a_checkpoint_and_are_scoped(db_url, tmp_path) -> None:
    chats = seed(db_url)
    secrets = tokens(db_url, **ROLES)
    cli(db_url, "keys", "create", "k", "--dir", str(tmp_path))
    cp = json.loads(cli(db_url, "events", "checkpoint", "--key", str(tmp_path / "k.key")).stdout)
    size, root = cp["log_size"], bytes.fromhex(cp["root_hash"])
    with Server(db_url) as server:
        check(World(server, secrets, *chats), size, root)


def check(world: World, size: int, root: bytes) -> None:
    with world.client("alice") as alice, world.client("bob") as bob, world.client("carol") as carol:
        r = alice.get("/v1/proofs/inclusion", params={"stream": world.chat_a, "version": 2, "size": size})
        assert r.status_code == 200, r.text
        doc = r.json()
        assert bytes.fromhex(doc["root_hash"]) == root
        e = doc["entry"]
        leaf = leaf_hash(entry_bytes(UUID(e["stream_id"]), e["version"], e["topic"], base64.b64decode(e["payload"])))
        assert verify_inclusion(leaf, doc["leaf_index"], size, [bytes.fromhex(h) for h in doc["audit_path"]], root)

        for who, client in (("bob", bob), ("carol", carol)):  # not theirs to read
            r = client.get("/v1/proofs/inclusion", params={"stream": world.chat_a, "version": 2, "size": size})
            assert r.status_code == 403, (who, r.text)
        r = alice.get("/v1/proofs/inclusion", params={"stream": world.chat_a, "version": 999, "size": size})
        assert r.status_code == 404 and r.json()["error"]["code"] == "version_not_found", r.text

        r = bob.get("/v1/proofs/consistency", params={"from": 3, "to": size})
        assert r.status_code == 200, r.text
        c = r.json()
        assert bytes.fromhex(c["new_root_hash"]) == root
        assert verify_consistency(3, size, [bytes.fromhex(h) for h in c["proof"]], bytes.fromhex(c["old_root_hash"]),
                                  root)
        r = bob.get("/v1/proofs/consistency", params={"from": 3, "to": size + 10_000})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
