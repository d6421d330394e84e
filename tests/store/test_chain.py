"""Hash chains (``ledger.chain``), on SQLite and PostgreSQL, with the database edited by raw SQL: an edited
payload, a deleted, an inserted and a reordered event are each named by ``events verify`` (exit 1) at the
first event whose chain breaks; the digest and head hashes of ``verify --json``; the stored hash is the one
``ledger.chain.link`` computes; a ledger made before hash chains stays readable, and ``events rehash`` /
``init`` link it without ever rewriting a broken chain."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from ledger.chain import GENESIS, check_stream, link
from ledger.store import open_app
from tests.audit.kit import cli
from tests.catalog.kit import ALICE, ORG, org_with, run
from psycopg import sql

from tests.store.rawdb import RawDB


def _paris(db_url: str) -> tuple[uuid.UUID, uuid.UUID, int]:
    """Two chats; chat ``a``'s version 3 is an assistant step answering "Paris."."""
    app = open_app(db_url)
    try:
        org_with(app)
        a = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="Capital of France?")["chat_id"]
        run(app, type="commit_step", chat_id=a, messages=[{"role": "assistant", "parts": [
            {"type": "text", "text": "Paris."}]}])
        run(app, type="finish_turn", chat_id=a)
        run(app, type="send_message", chat_id=a, text="And of Italy?")
        run(app, type="commit_step", chat_id=a, messages=[{"role": "assistant", "parts": [
            {"type": "text", "text": "Rome."}]}])
        b = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="second")["chat_id"]
        head = app.head()
    finally:
        app.close()
    return uuid.UUID(a), uuid.UUID(b), head


def _version_of(raw: RawDB, stream: uuid.UUID, text: str) -> int:
    (version,) = [v for v, _, s in raw.rows(stream) if text.encode() in s]
    return version


def _verify(db_url: str, code: int) -> dict:
    return json.loads(cli(db_url, "events", "verify", "--json", "--no-projections", code=code).stdout)


def _chain_anomalies(report: dict) -> list[tuple[str, int]]:
    return [(a["stream_id"], a["version"]) for a in report["anomalies"] if a["check"] == "chain"]


def test_the_stored_hash_is_the_chain_of_topic_version_and_payload(db_url):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    prev = GENESIS
    for (version, topic, state), stored in zip(raw.rows(a), raw.hashes(a)):
        prev = link(prev, topic, version, state)
        assert stored == prev
    report = _verify(db_url, 0)
    chain = report["chain"]
    assert chain["streams"] == report["streams"] and chain["broken"] == chain["unhashed"] == 0
    heads = {h["stream_id"]: h for h in chain["heads"]}
    assert heads[str(a)]["hash"] == prev.hex() and heads[str(a)]["version"] == len(raw.rows(a))
    # the digest is the same on every run, and moves with the log
    assert _verify(db_url, 0)["chain"]["digest"] == chain["digest"]
    app = open_app(db_url)
    try:
        run(app, type="send_message", chat_id=str(b), text="more")
    finally:
        app.close()
    assert _verify(db_url, 0)["chain"]["digest"] != chain["digest"]


def test_an_edited_payload_is_named(db_url):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    version = _version_of(raw, a, "Paris.")
    (state,) = [s for v, _, s in raw.rows(a) if v == version]
    raw.set_state(a, version, state.replace(b"Paris.", b"Berlin"))  # still decodes: only the chain tells
    report = _verify(db_url, 1)
    assert [(x["stream_id"], x["version"], x["check"]) for x in report["anomalies"]] == [(str(a), version, "chain")]
    assert "payload" in report["anomalies"][0]["reason"]
    assert report["chain"]["broken"] == 1
    text = cli(db_url, "events", "verify", "--no-projections", code=1).output
    assert f"stream {a} version {version}" in text and "[chain]" in text and "1 broken" in text


def test_a_deleted_event_is_named(db_url):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    version = _version_of(raw, a, "Paris.")
    raw.delete(a, version)
    report = _verify(db_url, 1)
    assert _chain_anomalies(report) == [(str(a), version + 1)]
    assert "deleted" in [x for x in report["anomalies"] if x["check"] == "chain"][0]["reason"]


def test_an_inserted_event_is_named(db_url):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    version = _version_of(raw, a, "Paris.")
    raw.insert_copy(a, version + 1, of=version)  # the "Paris." step twice, the second with the first's hash
    report = _verify(db_url, 1)
    assert _chain_anomalies(report) == [(str(a), version + 1)]


def test_an_event_added_without_a_hash_is_named(db_url):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    last = len(raw.rows(a))
    raw.execute("INSERT INTO {t} (originator_id, originator_version, topic, state) SELECT originator_id, ?, topic, "
                "state FROM {t} WHERE originator_id = ? AND originator_version = ?", last + 1, a, last)
    report = _verify(db_url, 1)
    assert _chain_anomalies(report) == [(str(a), last + 1)]


def test_reordered_events_are_named(db_url):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    version = _version_of(raw, a, "Paris.")
    raw.swap(a, version, version + 1)
    report = _verify(db_url, 1)
    assert _chain_anomalies(report) == [(str(a), version)]


def test_a_ledger_made_before_hash_chains_is_read_then_linked(db_url):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    raw.drop_chain_column()
    # readers open it as it is (nothing is created or altered)
    assert cli(db_url, "show", str(a), "--json").exit_code == 0
    report = _verify(db_url, 1)
    (anomaly,) = report["anomalies"]
    assert anomaly["check"] == "chain" and "rehash" in anomaly["reason"]
    assert report["chain"]["unhashed"] == report["streams"]
    # a writer adds the column; events of old streams get no hash until they are linked, new streams do
    app = open_app(db_url)
    try:
        run(app, type="send_message", chat_id=str(b), text="after the upgrade")
        c = uuid.UUID(run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="new")["chat_id"])
    finally:
        app.close()
    assert raw.hashes(b) == [None] * len(raw.rows(b)) and None not in raw.hashes(c)
    out = cli(db_url, "events", "rehash").output
    assert out.startswith(f"linked {report['streams']} streams")
    report = _verify(db_url, 0)
    assert report["chain"]["unhashed"] == 0 and report["ok"]
    assert cli(db_url, "events", "rehash").output.startswith("linked 0 streams")


def test_init_links_an_old_ledger_and_rehash_never_rewrites_a_broken_chain(db_url):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    version = _version_of(raw, a, "Paris.")
    (state,) = [s for v, _, s in raw.rows(a) if v == version]
    raw.set_state(a, version, state.replace(b"Paris.", b"Berlin"))
    broken = raw.hashes(a)
    raw.execute("UPDATE {t} SET chain_hash = NULL WHERE originator_id = ?", b)  # b: as if recorded before chains
    out = cli(db_url, "init").output
    assert "linked 1 streams" in out and "1 streams have a broken chain" in out
    assert raw.hashes(a) == broken  # left as it was: the edit stays visible
    report = _verify(db_url, 1)
    assert _chain_anomalies(report) == [(str(a), version)] and report["chain"]["unhashed"] == 0
    assert "broken chain" in cli(db_url, "events", "rehash", code=1).output


def test_an_export_without_hashes_imports_only_unverified_and_stays_marked(db_url, tmp_path):
    """A version 1 export (no hashes) cannot prove its lines: it is refused, unless --unverified; then its streams
    are recorded, in the import's transaction, as imported without proof, and verify never calls them linked.
    A version 2 line stripped of its hash is refused, naming the line."""
    a, b, head = _paris(db_url)
    lines = cli(db_url, "events", "export").stdout.splitlines()
    header = json.loads(lines[0])
    stripped = [json.dumps({k: v for k, v in json.loads(line).items() if k != "hash"}) for line in lines[1:]]
    copy = db_url.replace("ledger.db", "copy.db") if db_url.startswith("sqlite") else None
    if copy is None:
        pytest.skip("one backend is enough for the file format")
    v2 = tmp_path / "v2-stripped.jsonl"
    v2.write_text("\n".join([lines[0], *stripped]) + "\n")
    assert "error: invalid_export: line 2: " in cli(copy, "events", "import", str(v2), code=1).output
    v1 = tmp_path / "v1.jsonl"
    v1.write_text("\n".join([json.dumps({**header, "version": 1}), *stripped]) + "\n")
    refused = cli(copy, "events", "import", str(v1), code=1).output
    assert "invalid_export: line 1" in refused and "--unverified" in refused
    assert f"imported {len(stripped)} events" in cli(copy, "events", "import", "--unverified", str(v1)).output
    report = _verify(copy, 0)
    assert sorted(report["chain"]["unproven"]) == sorted({json.loads(line)["stream"] for line in stripped})
    text = cli(copy, "events", "verify", "--no-projections").output
    assert "imported without proof" in text and "OK, but" in text
    streams, unproven = report["chain"]["streams"], len(report["chain"]["unproven"])
    assert f"{streams - unproven} of {streams} streams linked" in text and unproven == streams - 1  # (the mark: linked)
    assert report["chain"]["digest"] != _verify(db_url, 0)["chain"]["digest"]  # the mark is in the log


_events = st.lists(st.tuples(st.sampled_from(["chat-ledger:chat.A", "chat-ledger:chat.Bé", "x"]),
                             st.binary(max_size=40)), min_size=1, max_size=8)


class _N:
    def __init__(self, version: int, topic: str, state: bytes, chain_hash: bytes | None) -> None:
        self.id, self.originator_id, self.originator_version = version, uuid.UUID(int=1), version
        self.topic, self.state, self.chain_hash = topic, state, chain_hash


def _chained(events: list[tuple[str, bytes]]) -> list[_N]:
    out, prev = [], None
    for i, (topic, state) in enumerate(events, start=1):
        prev = link(prev, topic, i, state)
        out.append(_N(i, topic, state, prev))
    return out


@settings(max_examples=200, deadline=None)
@given(_events, st.data())
def test_any_single_change_breaks_the_chain_at_the_changed_event(events, data):
    notes = _chained(events)
    assert check_stream(notes).status == "ok"
    k = data.draw(st.integers(0, len(notes) - 1))
    n = notes[k]
    change = data.draw(st.sampled_from(["state", "topic", "delete", "hash"]))
    if change == "state":
        new = data.draw(st.binary(max_size=40).filter(lambda s: s != n.state))
        notes[k] = _N(n.originator_version, n.topic, new, n.chain_hash)
    elif change == "topic":
        new_topic = data.draw(st.text(max_size=8).filter(lambda t: t != n.topic))
        notes[k] = _N(n.originator_version, new_topic, n.state, n.chain_hash)
    elif change == "hash":
        notes[k] = _N(n.originator_version, n.topic, n.state, bytes(32))
    else:
        if k == len(notes) - 1:
            return  # the last event's deletion shows only against a kept head hash or digest
        del notes[k]
    chk = check_stream(notes)
    assert chk.status == "broken" and chk.broken_at == (k + 2 if change == "delete" else k + 1)


def test_the_audit_page_and_explain_turn_show_the_chain(db_url, tmp_path):
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    out = cli(db_url, "audit", str(a)).output.splitlines()
    assert out[1].startswith(f"chain: ok (head {raw.hashes(a)[-1].hex()[:12]}… at version {len(raw.rows(a))})")
    page = tmp_path / "a.html"
    cli(db_url, "audit", str(a), "--html", str(page))
    assert "chain: ok (head" in page.read_text()
    app = open_app(db_url)
    try:
        turn = str(app.stream(a)[0].turn_id)
    finally:
        app.close()
    data = json.loads(cli(db_url, "explain", str(a), "--turn", turn, "--json").output)
    assert data["chain"]["status"] == "ok" and data["chain"]["head"] == raw.hashes(a)[-1].hex()
    # as of version 2 the chain is shown up to there
    data = json.loads(cli(db_url, "explain", str(a), "--turn", turn, "--at", "2", "--json").output)
    assert (data["chain"]["version"], data["chain"]["head"]) == (2, raw.hashes(a)[1].hex())
    version = _version_of(raw, a, "Paris.")
    (state,) = [s for v, _, s in raw.rows(a) if v == version]
    raw.set_state(a, version, state.replace(b"Paris.", b"Berlin"))
    assert f"chain broken at version {version}:" in cli(db_url, "explain", str(a), "--turn", turn).output
    cli(db_url, "audit", str(a), "--html", str(page))
    assert f"chain broken at version {version}:" in page.read_text()
    assert f"chain broken at version {version}:" in cli(db_url, "audit", str(a)).output


def test_verify_names_corrupt_rows_and_never_crashes(db_url):
    """A payload written as text (SQLite keeps what it is given), one that does not decode, and a version gap:
    verify names each stream and version and what is wrong, and exits 1 — it does not fail itself."""
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    if raw.backend == "sqlite":
        con = raw._sqlite()
        con.execute("UPDATE stored_events SET state = 'now text' WHERE originator_id IN (?, ?) AND "
                    "originator_version = 2", (a.hex, str(a)))
        con.commit()
        con.close()
        wrong = "stored as text"
    else:
        with raw._pg() as conn:
            conn.execute(sql.SQL("UPDATE {} SET state = %s WHERE originator_id = %s AND originator_version = 2").format(
                sql.Identifier(raw.db.schema, "chatledger_events")), (b"\x00garbage", a))
        wrong = ""
    report = _verify(db_url, 1)
    decode = [x for x in report["anomalies"] if x["check"] == "decode"]
    assert [(x["stream_id"], x["version"]) for x in decode] == [(str(a), 2)] and wrong in decode[0]["reason"]
    text = cli(db_url, "events", "verify", code=1).output
    assert f"stream {a} version 2" in text and "FAILED" in text and "internal_error" not in text


def test_verify_reports_a_time_going_backwards_even_after_a_rehash(db_url):
    """Issue 23's probe: date version 2 of a stream a hundred years back, clear the chain and rehash it (what a
    database writer can do): the chain is whole again, but verify names the version whose time goes backwards."""
    a, b, head = _paris(db_url)
    raw = RawDB(db_url)
    (state,) = [s for v, _, s in raw.rows(a) if v == 2]
    stamp = raw.json_field_in_db(a, 2, "timestamp")
    assert stamp[:2] == "20", stamp
    raw.set_state(a, 2, state.replace(stamp.encode(), ("1926" + stamp[4:]).encode()))
    assert raw.execute("UPDATE {t} SET chain_hash = NULL WHERE originator_id = ?", a) == 5
    cli(db_url, "events", "rehash")  # the chain is linked again over the changed row
    report = _verify(db_url, 1)
    assert not _chain_anomalies(report)  # the chain alone cannot tell (issue 27's evidence can)
    times = [x for x in report["anomalies"] if x["check"] == "time"]
    assert [(x["stream_id"], x["version"]) for x in times] == [(str(a), 2)], report["anomalies"]
    assert "1926" in times[0]["reason"] and "backwards" in times[0]["reason"]
    assert "FAILED" in cli(db_url, "events", "verify", code=1).output


def test_a_kept_digest_proves_the_log_up_to_its_head_and_a_shorter_log_fails(db_url):
    """``events verify --upto N --expect-digest HEX``: what a restore drill runs against a digest kept before the
    backup. The log grows after the digest and still proves it; a log whose last kept events were deleted, or
    that ends before N, fails and says why."""
    a, _, _ = _paris(db_url)
    kept = json.loads(cli(db_url, "events", "verify", "--json", "--no-projections").stdout)
    head, digest = kept["head"], kept["chain"]["digest"]
    app = open_app(db_url)
    try:
        run(app, type="send_message", chat_id=str(a), text="And of Spain?")
    finally:
        app.close()
    later = json.loads(cli(db_url, "events", "verify", "--json").stdout)
    assert later["head"] > head and later["chain"]["digest"] != digest
    upto = json.loads(cli(db_url, "events", "verify", "--json", "--upto", str(head), "--expect-digest", digest).stdout)
    assert upto["ok"] and upto["head"] == head and upto["chain"]["digest"] == digest
    assert upto["projections"] == []  # a view is at its own position: not compared at another head

    too_far = json.loads(cli(db_url, "events", "verify", "--json", "--upto", str(later["head"] + 5), code=1).stdout)
    assert [x["check"] for x in too_far["anomalies"]] == ["log"]
    assert "events are missing" in too_far["anomalies"][0]["reason"]

    raw = RawDB(db_url)
    raw.delete(a, max(v for v, _, _ in raw.rows(a) if v <= _version_of(raw, a, "Rome.")))  # the kept head of chat a
    out = cli(db_url, "events", "verify", "--upto", str(head), "--expect-digest", digest, code=1).stdout
    assert "[digest]" in out and digest in out and "FAILED" in out
