"""Inclusion and consistency proofs (issue 27, point 4), made from the ledger and checked offline by
``proof verify`` (no database), on SQLite and PostgreSQL: what holds verifies; a changed entry, another
checkpoint, a forged older checkpoint or a swapped pair does not."""

from __future__ import annotations

import json
from pathlib import Path

from ledger.store import open_app
from tests.audit.kit import cli
from tests.catalog.kit import run
from tests.evidence.test_checkpoint import checkpoint, keys  # noqa: F401 - keys: a fixture
from tests.store.test_chain import _paris


def prove(db_url: str, *args: str, tmp_path: Path, code: int = 0) -> Path:
    out = tmp_path / f"proof-{len(list(tmp_path.iterdir()))}.json"
    cli(db_url, "events", "prove", *args, "-o", str(out), code=code)
    return out


def check(proof: Path, cp: Path, public: Path, code: int) -> dict:
    # offline: the database URL names nothing that exists
    out = cli(f"sqlite:///{proof.parent / 'absent' / 'none.db'}", "proof", "verify", str(proof), "--checkpoint",
              str(cp), "--public-key", str(public), "--json", code=code)
    return json.loads(out.stdout)


def test_an_inclusion_proof_verifies_offline_and_nothing_else_does(db_url, keys, tmp_path):  # noqa: F811
    private, public = keys
    a, b, _ = _paris(db_url)
    cp = checkpoint(db_url, private, tmp_path)
    proof = prove(db_url, str(a), "3", "--checkpoint", str(cp), tmp_path=tmp_path)
    assert check(proof, cp, public, 0)["proves"].startswith(f"stream {a} version 3 is entry")

    doc = json.loads(proof.read_text())
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**doc, "entry": {**doc["entry"], "topic": doc["entry"]["topic"] + "x"}}))
    assert "does not verify" in check(changed, cp, public, 1)["error"]

    app = open_app(db_url)
    try:
        run(app, type="send_message", chat_id=str(b), text="later")
    finally:
        app.close()
    later = checkpoint(db_url, private, tmp_path)
    assert "checkpoint covers" in check(proof, later, public, 1)["error"]  # a proof is for its own checkpoint's size
    # an event after the checkpoint is not in it
    out = cli(db_url, "events", "prove", str(b), "3", "--checkpoint", str(cp), code=1)
    assert "not among" in out.output


def test_a_consistency_proof_shows_the_log_grew_unchanged(db_url, keys, tmp_path):  # noqa: F811
    private, public = keys
    a, b, _ = _paris(db_url)
    old = checkpoint(db_url, private, tmp_path)
    app = open_app(db_url)
    try:
        for text in ("one", "two", "three"):
            run(app, type="send_message", chat_id=str(b), text=text)
    finally:
        app.close()
    new = checkpoint(db_url, private, tmp_path)
    proof = prove(db_url, "--consistency", str(old), str(new), tmp_path=tmp_path)
    assert "extends, unchanged" in check(proof, new, public, 0)["proves"]
    assert "checkpoint covers" not in json.dumps(check(proof, new, public, 0))

    out = cli(db_url, "events", "prove", "--consistency", str(new), str(old), code=1)
    assert "older checkpoint first" in out.output
    # an older checkpoint with another root (a different history), re-signed by someone without the key: refused
    doc = json.loads(proof.read_text())
    doc["old"]["root_hash"] = "00" * 32
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    assert "signature does not verify" in check(forged, new, public, 1)["error"]
