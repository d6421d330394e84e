"""Signed checkpoints against what a database writer can do (issue 27, points 1–3), on SQLite and PostgreSQL,
through the CLI: a change before a checkpoint fails ``events verify --checkpoint`` and names the entry, even when
the chain hashes were recomputed (``events rehash``); a deleted last event (a valid, shorter chain) and a
truncated log fail too; events recorded after the checkpoint do not; the stored tree follows every insert path;
a checkpoint that was edited, or is checked with another key, is refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ledger.evidence.merkle import nodes_of, root
from ledger.evidence.tree import StoredTree, entry_hash
from ledger.chain import scan
from ledger.store import open_app
from tests.audit.kit import cli
from tests.store.rawdb import RawDB
from tests.store.test_chain import _paris, _version_of


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    out = cli("sqlite:///" + str(tmp_path / "unused.db"), "keys", "create", "auditor", "--dir", str(tmp_path))
    assert "mode 0600" in out.output
    private, public = tmp_path / "auditor.key", tmp_path / "auditor.pub"
    assert private.stat().st_mode & 0o777 == 0o600
    return private, public


def checkpoint(db_url: str, key: Path, tmp_path: Path) -> Path:
    path = tmp_path / f"cp-{uuid.uuid4().hex[:6]}.json"
    cli(db_url, "events", "checkpoint", "--key", str(key), "-o", str(path))
    return path


def verify(db_url: str, cp: Path, public: Path, code: int) -> list[dict]:
    out = cli(db_url, "events", "verify", "--json", "--no-projections", "--checkpoint", str(cp), "--public-key",
              str(public), code=code)
    return [a for a in json.loads(out.stdout)["anomalies"] if a["check"] == "checkpoint"]


def test_a_rewritten_and_relinked_event_is_named_against_the_checkpoint(db_url, keys, tmp_path):
    private, public = keys
    a, b, _ = _paris(db_url)
    cp = checkpoint(db_url, private, tmp_path)
    assert verify(db_url, cp, public, 0) == []
    app = open_app(db_url)
    try:  # more events after the checkpoint change nothing about what it covers
        from tests.catalog.kit import run
        run(app, type="send_message", chat_id=str(b), text="later")
    finally:
        app.close()
    assert verify(db_url, cp, public, 0) == []

    # issue 27's probe: date an event 1926, clear its stream's chain and relink it with the ledger's own rehash
    raw = RawDB(db_url)
    version = _version_of(raw, a, "Paris.")
    (state,) = [s for v, _, s in raw.rows(a) if v == version]
    stamp = raw.json_field_in_db(a, version, "timestamp")
    raw.set_state(a, version, state.replace(stamp.encode(), ("1926" + stamp[4:]).encode()))
    raw.execute("UPDATE {t} SET chain_hash = NULL WHERE originator_id = ?", a)
    cli(db_url, "events", "rehash")
    found = verify(db_url, cp, public, 1)
    assert [(x["stream_id"], x["version"]) for x in found] == [(str(a), version)], found
    assert "changed" in found[0]["reason"]


@pytest.mark.parametrize("change", ["delete the last event of a stream", "truncate the log"])
def test_deletions_fail_against_the_checkpoint(db_url, keys, tmp_path, change):
    private, public = keys
    a, b, _ = _paris(db_url)
    cp = checkpoint(db_url, private, tmp_path)
    raw = RawDB(db_url)
    if change == "truncate the log":
        last = max(v for v, _, _ in raw.rows(b))
        raw.delete(b, last)  # b's chat is the log's last event
        found = verify(db_url, cp, public, 1)
        assert "deleted" in found[0]["reason"], found
    else:
        raw.delete(a, max(v for v, _, _ in raw.rows(a)))  # a valid, shorter chain: the chain check cannot see it
        found = verify(db_url, cp, public, 1)
        assert found and found[0]["check"] == "checkpoint", found


def test_an_edited_checkpoint_or_another_key_is_refused(db_url, keys, tmp_path):
    private, public = keys
    _paris(db_url)
    cp = checkpoint(db_url, private, tmp_path)
    data = json.loads(cp.read_text())
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**data, "log_size": data["log_size"] - 1}))
    assert "signature does not verify" in verify(db_url, forged, public, 1)[0]["reason"]
    cli(db_url, "keys", "create", "other", "--dir", str(tmp_path))
    assert "not by this public key" in verify(db_url, cp, tmp_path / "other.pub", 1)[0]["reason"]


def test_the_stored_tree_is_the_tree_of_the_log_whatever_wrote_it(db_url):
    """Commands, bare saves and an import all reach the tree: it reads the log, not the writers."""
    _paris(db_url)
    app = open_app(db_url)
    try:
        tree = StoredTree(app)
        first = tree.catch_up()
        from eventsourcing.persistence import StoredEvent
        stream = uuid.uuid4()
        app.recorder.insert_events([StoredEvent(stream, 1, "t", b"a bare save")])
        size = tree.catch_up()
        leaves = [entry_hash(n) for n in scan(app, app.head(), by_notification=True)]
        assert size == first + 1 == len(leaves)
        assert tree.root(size) == root(nodes_of(leaves), size)
        assert tree.catch_up() == size  # nothing new: nothing added
    finally:
        app.close()


def test_the_documented_algorithm_alone_verifies_a_checkpoint(keys, tmp_path, monkeypatch):
    """docs/evidence.md's sketch, run as written (its rows read with sqlite3 directly): it accepts the ledger's
    checkpoint, and rejects it once an event is changed."""
    import re
    import sqlite3

    private, public = keys
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    a, _, _ = _paris(url)
    cp = checkpoint(url, private, tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cp.json").write_text(cp.read_text())
    (tmp_path / "auditor.pub").write_bytes(public.read_bytes())
    doc = (Path(__file__).parents[2] / "docs" / "evidence.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", doc, re.S)

    def rows() -> list:
        with sqlite3.connect(db) as conn:
            return [(uuid.UUID(s), v, t, bytes(p)) for s, v, t, p in conn.execute(
                "SELECT originator_id, originator_version, topic, state FROM stored_events ORDER BY rowid LIMIT ?",
                (json.loads(cp.read_text())["log_size"],))]

    exec(code.replace("rows = ...", "rows = ROWS()"), {"ROWS": rows})  # raises if the checkpoint does not hold
    RawDB(url).set_state(a, 1, b"{}")
    with pytest.raises(AssertionError):
        exec(code.replace("rows = ...", "rows = ROWS()"), {"ROWS": rows})


def test_events_rehash_builds_the_tree_of_an_existing_ledger(db_url) -> None:
    from ledger.evidence.tree import StoredTree

    _paris(db_url)
    out = json.loads(cli(db_url, "events", "rehash", "--json").stdout)
    app = open_app(db_url)
    try:
        assert out["merkle_tree_size"] == StoredTree(app).size() == len(app.notifications(0, 10_000)) > 0
    finally:
        app.close()


def test_the_tree_is_extended_over_any_number_of_pages(db_url, monkeypatch) -> None:
    """A log of more pages than the retries allowed to concurrent extenders (100) is caught up whole (a log of a
    million events is 200 pages of 5,000)."""
    import ledger.evidence.tree as tree_module
    from commands.tools.workload import generate

    monkeypatch.setattr(tree_module, "PAGE", 1)
    app = open_app(db_url)
    try:
        generate(app, 150)
        head = len(app.notifications(0, 10_000))
        assert head > 100 and StoredTree(app).catch_up() == head
        assert StoredTree(app).root(head) == root(nodes_of([entry_hash(n) for n in scan(app, app.head(),
                                                                                          by_notification=True)]),
                                                  head)
    finally:
        app.close()
