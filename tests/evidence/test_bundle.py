"""The evidence to take away (issue 27, point 6): ``audit CHAT --bundle DIR`` writes the chat's page, its events as
stored, an inclusion proof of each and the checkpoint; ``proof verify --bundle DIR --public-key FILE`` checks the
lot offline, and fails, naming the event, on any change to it. The audit page shows the checkpoint covering the
chat and links each covered event's proof — in the bundle (files beside it) and on the service (the proof route),
both followed in Chromium."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from tests.audit.kit import cli
from tests.audit.test_audit_page_browser import CHROMIUM, browser
from tests.evidence.test_checkpoint import keys  # noqa: F401 - a fixture
from tests.service.conftest import world  # noqa: F401 - a fixture
from tests.store.test_chain import _paris


def verify(bundle: Path, public: Path, code: int) -> dict:
    # offline: the database URL names nothing that exists
    out = cli(f"sqlite:///{bundle.parent / 'absent' / 'none.db'}", "proof", "verify", "--bundle", str(bundle),
              "--public-key", str(public), "--json", code=code)
    return json.loads(out.stdout)


def edited(bundle: Path, tmp_path: Path, name: str, change) -> Path:
    """A copy of the bundle with ``change(copy)`` applied."""
    copy = tmp_path / name
    shutil.copytree(bundle, copy)
    change(copy)
    return copy


def _lines(b: Path) -> list[dict]:
    return [json.loads(x) for x in (b / "events.jsonl").read_text().splitlines()]


def _write(b: Path, lines: list[dict]) -> None:
    (b / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_bundle_verifies_offline_and_any_change_fails(db_url, keys, tmp_path) -> None:  # noqa: F811
    private, public = keys
    a, _, _ = _paris(db_url)
    bundle = tmp_path / "bundle"
    out = cli(db_url, "audit", str(a), "--bundle", str(bundle), "--key", str(private)).output
    assert "versions 1-5" in out
    assert verify(bundle, public, 0)["proves"].startswith(f"stream {a}: versions 1 to 5")
    page = (bundle / "page.html").read_text()
    assert "Evidence" in page and page.count('class="proof" href="proofs/v') == 5
    assert json.loads((bundle / "checkpoint.json").read_text())["log_size"] >= 5

    def payload(b: Path) -> None:  # one byte more in an event's stored payload, its proof left as it was
        lines = _lines(b)
        lines[2]["payload"] = base64.b64encode(base64.b64decode(lines[2]["payload"]) + b" ").decode()
        _write(b, lines)

    def payload_and_proof(b: Path) -> None:  # ... and in its proof too
        payload(b)
        proof = json.loads((b / "proofs" / "v3.json").read_text())
        proof["entry"]["payload"] = _lines(b)[2]["payload"]
        (b / "proofs" / "v3.json").write_text(json.dumps(proof))

    def dropped(b: Path) -> None:  # an event taken out
        _write(b, [x for x in _lines(b) if x["version"] != 2])

    def swapped(b: Path) -> None:
        lines = _lines(b)
        lines[1], lines[2] = lines[2], lines[1]
        _write(b, lines)

    def other_key(b: Path) -> None:
        cp = json.loads((b / "checkpoint.json").read_text())
        (b / "checkpoint.json").write_text(json.dumps({**cp, "root_hash": "00" * 32}))

    for name, change, says in (
            ("payload", payload, "event 3 of events.jsonl differs from the entry its proof v3.json proves"),
            ("both", payload_and_proof, "event 3 of events.jsonl (version 3): the inclusion proof does not verify"),
            ("dropped", dropped, "event 2 of events.jsonl is not version 2"),
            ("swapped", swapped, "event 2 of events.jsonl is not version 2"),
            ("checkpoint", other_key, "signature does not verify")):
        result = verify(edited(bundle, tmp_path, name, change), public, 1)
        assert says in result["error"], (name, result)


def test_a_bundle_needs_a_checkpoint_and_covers_what_it_covers(db_url, keys, tmp_path) -> None:  # noqa: F811
    private, public = keys
    a, _, _ = _paris(db_url)
    done = cli(db_url, "audit", str(a), "--bundle", str(tmp_path / "none"), code=1)
    assert "no checkpoint was published yet" in done.output and "--key FILE" in done.output
    cp = tmp_path / "cp.json"
    cli(db_url, "events", "checkpoint", "--key", str(private), "-o", str(cp))
    from ledger.store import open_app
    from tests.catalog.kit import run

    app = open_app(db_url)
    try:
        run(app, type="send_message", chat_id=str(a), text="And of Spain?")  # after the checkpoint
    finally:
        app.close()
    out = cli(db_url, "audit", str(a), "--bundle", str(tmp_path / "b"), "--checkpoint", str(cp)).output
    assert "versions 1-5" in out and "1 later events are not covered yet" in out
    assert verify(tmp_path / "b", public, 0)["ok"]
    assert "Spain" not in (tmp_path / "b" / "page.html").read_text()  # the page of the chat as the proofs cover it
    usage = cli(db_url, "audit", str(a), "--bundle", str(tmp_path / "c"), "--html", "x.html", code=2)
    assert "give it alone" in usage.output


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_pages_link_each_events_proof_in_chromium(world, keys, tmp_path) -> None:  # noqa: F811
    """The bundle's page (file://) and the service's chat page (signed in): the evidence is shown, and following
    a proof link gives the proof — a file beside the page, or the proof route's JSON — that verifies."""
    from ledger.evidence.merkle import leaf_hash, verify_inclusion
    from ledger.evidence.tree import entry_bytes
    from uuid import UUID

    sync_playwright = browser()
    private, public = keys
    bundle = tmp_path / "bundle"
    cli(world.server.url, "audit", world.chat_a, "--bundle", str(bundle), "--key", str(private))
    base = world.server.base
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = b.new_page()
            page.goto((bundle / "page.html").as_uri())
            assert "Evidence" in page.inner_text(".evidence")
            links = page.eval_on_selector_all("a.proof", "els => els.map(e => e.href)")
            page.click("a.proof >> nth=1")
            page.wait_for_url("**/proofs/v2.json")
            from_file = json.loads(page.inner_text("body"))

            page.goto(f"{base}/ui/login?next=/ui/chats/{world.chat_a}")
            page.fill("input[name=token]", world.secrets["alice"])
            page.click("button[type=submit]")
            page.wait_for_url(f"**/ui/chats/{world.chat_a}")
            shown = page.inner_text(".evidence")
            served_links = page.eval_on_selector_all("a.proof", "els => els.map(e => e.getAttribute('href'))")
            page.click("a.proof >> nth=1")
            page.wait_for_url("**/v1/proofs/inclusion?**")
            served = json.loads(page.inner_text("body"))
        finally:
            b.close()
    assert len(links) == len(list((bundle / "proofs").iterdir())) and from_file["entry"]["version"] == 2
    assert f"of the log of {world.tree_size} events" in shown
    assert served_links and all(f"size={world.tree_size}" in h for h in served_links)
    e = served["entry"]
    assert e["version"] == 2 and e["stream_id"] == world.chat_a
    leaf = leaf_hash(entry_bytes(UUID(e["stream_id"]), 2, e["topic"], base64.b64decode(e["payload"])))
    assert verify_inclusion(leaf, served["leaf_index"], world.tree_size,
                            [bytes.fromhex(h) for h in served["audit_path"]], bytes.fromhex(served["root_hash"]))
