"""A witness (``chat-ledger witness``, issue 27 point 5) against real ``serve`` processes that publish checkpoints
(``serve --checkpoint-key``): two servers of one PostgreSQL ledger are held to one view and their latest
checkpoint then carries the witness's cosignature; a server of a rewritten copy of a SQLite ledger shows a
checkpoint that does not extend what the witness saw — a split view, refused and reported, for good."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from uuid import uuid4

from commands.evidence import check_checkpoint
from ledger.evidence.checkpoint import Checkpoint, check_cosignature, load_public
from ledger.store import open_app
from tests.audit.kit import cli
from tests.service.conftest import ROLES, seed
from tests.service.server import Server, tokens

DEADLINE = 60.0


def witness(tmp_path: Path, token: str, *logs: str, code: int = 0) -> list[dict]:
    """One poll of a real witness process (``--once``): its JSON lines."""
    args = [sys.executable, "-m", "commands.cli.main", "witness", "--public-key", str(tmp_path / "log.pub"),
            "--key", str(tmp_path / "w.key"), "--state", str(tmp_path / "witness.json"), "--once", "--json"]
    for log in logs:
        args += ["--log", log]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CHAT_LEDGER_TOKEN": token})
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return [json.loads(line) for line in done.stdout.splitlines()]


def witness_settled(tmp_path: Path, token: str, *logs: str) -> list[dict]:
    """Polls of a real witness until none of a poll's reports is ``unreachable``; the other reports of every poll,
    in order. The only such report allowed on the way is the log moving between the witness's read of its latest
    checkpoint and its cosignature (a token's first use is an event: the service publishes a newer checkpoint
    within its period), which the witness cosigns on its next poll."""
    deadline, settled = time.monotonic() + DEADLINE, []
    while True:
        reports = witness(tmp_path, token, *logs)
        moved = [r for r in reports if "unreachable" in r]
        settled += [r for r in reports if r not in moved]
        if not moved:
            return settled
        assert all("409 checkpoint_superseded" in r["unreachable"] for r in moved), reports
        assert time.monotonic() < deadline, f"the witness could not cosign within {DEADLINE}s: {reports}"


def latest(client, at_least: int = 0, covering: tuple[str, int] | None = None) -> dict:
    """The server's latest checkpoint once it covers ``at_least`` events and the event ``covering`` (a stream
    and version: its inclusion proof exists), polling the condition."""
    deadline = time.monotonic() + DEADLINE
    while True:
        r = client.get("/v1/checkpoints/latest")
        if r.status_code == 200 and r.json()["log_size"] >= at_least and (covering is None or client.get(
                "/v1/proofs/inclusion", params={"stream": covering[0], "version": covering[1],
                                                "size": r.json()["log_size"]}).status_code == 200):
            return r.json()
        assert time.monotonic() < deadline, f"no checkpoint of {at_least} events within {DEADLINE}s: {r.text}"
        time.sleep(0.05)  # polling the condition above, not standing in for it


def keys(url: str, tmp_path: Path) -> list[str]:
    cli(url, "keys", "create", "log", "--dir", str(tmp_path))
    cli(url, "keys", "create", "w", "--dir", str(tmp_path))
    return ["--checkpoint-key", str(tmp_path / "log.key"), "--checkpoint-every", "0.2",
            "--witness-key", str(tmp_path / "w.pub")]


def test_two_servers_of_one_ledger_publish_once_per_size_and_carry_the_cosignature(pg_url, tmp_path) -> None:
    chat_a, _, _ = seed(pg_url)
    secret = tokens(pg_url, admin=ROLES["admin"], w=ROLES["auditor"])
    publishing = keys(pg_url, tmp_path)
    log_key, w_key = load_public(tmp_path / "log.pub"), load_public(tmp_path / "w.pub")
    with Server(pg_url, *publishing) as one, Server(pg_url, *publishing) as two, \
            one.client(secret["admin"]) as c1, two.client(secret["admin"]) as c2:
        for round_ in range(2):
            for i, c in enumerate((c1, c2) * 3):
                r = c.post("/v1/commands", json={"type": "set_title", "chat_id": chat_a, "title": f"{round_}.{i}"})
                assert r.json()["ok"], r.text
            version = c1.get(f"/v1/chats/{chat_a}").json()["version"]
            covered = latest(c1, covering=(chat_a, version))["log_size"]
            latest(c2, covered)
            reports = witness_settled(tmp_path, secret["w"], one.base, two.base)
            assert all("cosigned" in r or "unchanged" in r for r in reports), reports
            assert any("cosigned" in r for r in reports), reports
            for c in (c1, c2):  # the latest checkpoint, as either server serves it, carries the cosignature
                doc = c.get("/v1/checkpoints/latest").json()
                if doc["cosignatures"]:
                    checkpoint = Checkpoint.from_json(doc)
                    check_cosignature(checkpoint, doc["cosignatures"][0], w_key)
            cosigned = [r.get("cosigned") or r.get("unchanged") for r in reports]
            doc = c1.get(f"/v1/checkpoints/{cosigned[0]}").json()
            check_cosignature(Checkpoint.from_json(doc), doc["cosignatures"][0], w_key)

    app = open_app(pg_url)
    try:  # both servers published: each size once, sizes growing, and each verifies against the log
        from ledger.evidence.published import CHECKPOINTS_ID, CheckpointPublished

        sizes = [e.log_size for e in app.stream(CHECKPOINTS_ID) if isinstance(e, CheckpointPublished)]
        assert len(sizes) >= 2 and sizes == sorted(set(sizes)), sizes
        for e in app.stream(CHECKPOINTS_ID):
            if isinstance(e, CheckpointPublished):
                cp = Checkpoint(e.log_size, e.root_hash, e.time, e.key_id, e.signature)
                assert check_checkpoint(app, cp, log_key) == []
    finally:
        app.close()


def test_a_rewritten_copy_is_a_split_view_the_witness_refuses_for_good(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    chat_a, _, _ = seed(url)
    secret = tokens(url, admin=ROLES["admin"], w=ROLES["auditor"])["w"]
    publishing = keys(url, tmp_path)
    with Server(url, *publishing) as one, one.client(secret) as c:
        first = latest(c)
        reports = witness_settled(tmp_path, secret, one.base)
        assert len(reports) == 1 and reports[0]["cosigned"] >= first["log_size"], reports  # (the latest, then)
        seen = c.get(f"/v1/checkpoints/{reports[0]['cosigned']}").json()
        assert seen["root_hash"] == reports[0]["root_hash"] and len(seen["cosignatures"]) == 1

    # Someone who can write the database rewrites history in a copy: one old event's payload, the chain hashes
    # recomputed, the stored tree dropped (rebuilt from the rewritten log); then more events on top
    copy = tmp_path / "copy.db"
    with sqlite3.connect(tmp_path / "ledger.db") as source, sqlite3.connect(copy) as db:
        source.backup(db)
        rowid, state = db.execute("SELECT rowid, state FROM stored_events WHERE originator_id = ? AND "
                                  "originator_version = 1", (chat_a.replace("-", ""),)).fetchone()
        db.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (bytes(state) + b" ", rowid))  # (still JSON)
        db.execute("UPDATE stored_events SET chain_hash = NULL WHERE originator_id = ?", (chat_a.replace("-", ""),))
        db.execute("DROP TABLE merkle_nodes")
        db.execute("DROP TABLE merkle_leaves")
    copy_url = f"sqlite:///{copy}"
    cli(copy_url, "events", "rehash")
    tokens(copy_url, more={"user": uuid4(), "deployment_admin": True})
    with Server(copy_url, *publishing) as two, two.client(secret) as c:
        forged = latest(c, seen["log_size"] + 1)
        reports = witness(tmp_path, secret, two.base, code=2)
        assert len(reports) == 1 and reports[0]["refused"], reports
        import re

        shown = re.match(r"split view: the log of (\d+) events .* does not extend the log of (\d+) events",
                         reports[0]["split_view"])
        assert shown is not None, reports  # (the server may have published a newer one since `forged`)
        assert int(shown.group(1)) >= forged["log_size"] and int(shown.group(2)) == seen["log_size"]
        assert c.get("/v1/checkpoints/latest").json()["cosignatures"] == []  # not cosigned
        # for good: asked again (the same log, or the true one), it refuses without cosigning anything
        again = witness(tmp_path, secret, two.base, code=2)
        assert again[0]["refused"] and again[0]["split_view"] == reports[0]["split_view"]
    state = json.loads((tmp_path / "witness.json").read_text())
    assert state["split_view"]["log"] == two.base and state["seen"]["log_size"] == seen["log_size"]


# -- the judgment, pure -----------------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ledger.evidence.merkle import consistency_proof, leaf_hash, nodes_of, root  # noqa: E402
from ledger.evidence.witness import split_view  # noqa: E402


def _checkpoint(leaves: list[bytes], size: int) -> Checkpoint:
    return Checkpoint(size, root(nodes_of(leaves), size).hex(), f"t{size}", "k", "s")


def _proof(leaves: list[bytes], old: int, new: int) -> list[bytes]:
    return consistency_proof(nodes_of(leaves), old, new)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=4), min_size=2, max_size=40), st.data())
def test_a_witness_accepts_exactly_the_logs_that_extend_what_it_saw(entries, data) -> None:
    leaves = [leaf_hash(e) for e in entries]
    n = len(leaves)
    old = data.draw(st.integers(1, n))
    new = data.draw(st.integers(old, n))
    seen, shown = _checkpoint(leaves, old), _checkpoint(leaves, new)
    proof = _proof(leaves, old, new) if old != new else None
    assert split_view(seen, shown, proof) is None
    assert split_view(shown, seen, proof) is None  # a server showing an older checkpoint of the same log
    # the log rewritten at one entry before what the witness saw: refused, whatever proof the log gives
    changed = list(leaves)
    at = data.draw(st.integers(0, old - 1))
    changed[at] = leaf_hash(b"rewritten" + entries[at])
    forged = _checkpoint(changed, new)
    reason = split_view(seen, forged, _proof(changed, old, new) if old != new else None)
    assert reason is not None and reason.startswith("split view")
    if old == new:
        assert "two checkpoints of" in reason
