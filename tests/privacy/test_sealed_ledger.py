"""Issue 28, point 2, wired: a ledger opened with a master key stores every personal value sealed under its
subject's key, on SQLite and PostgreSQL, and reads it back transparently; the hash chains and the Merkle log cover
what is stored, so destroying one subject's keys leaves the ledger verifying, that subject's content reading
``[erased]`` and everyone else's intact. By hypothesis: a sealed ledger replays to the states a plain one does."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import LedgerError
from ledger.sealing import ERASED
from ledger.store import ChatLedgerApp, open_app
from ledger.subjectkeys import MASTER_ENV, KeyRing, new_master_key
from tests.audit.kit import cli
from tests.catalog.kit import ALICE, BOB, ORG, org_with, run

MARKERS = ("alice-asks-7f3a", "model-says-91c2", "bob-writes-55e0", "title-of-alice-c4d1")


def record(app) -> str:
    org_with(app)
    chat = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text=MARKERS[0])["chat_id"]
    run(app, type="commit_step", chat_id=chat, messages=[{"role": "assistant", "parts": [
        {"type": "text", "text": MARKERS[1]}]}])
    run(app, type="finish_turn", chat_id=chat)
    run(app, type="send_message", chat_id=chat, text=MARKERS[2], created_by=BOB)  # BOB's words in ALICE's chat
    run(app, type="set_title", chat_id=chat, title=MARKERS[3])
    return chat


def stored_payloads(app) -> list[bytes]:
    return [bytes(n.state) for n in app.recorder.select_notifications(start=1, limit=100_000)]


def texts(app, chat: str) -> list[str]:
    """The texts of the chat's messages and its last title, as its events read."""
    events = app.stream(uuid.UUID(chat))
    said = [p.text for e in events for m in getattr(e, "messages", None) or () for p in m.parts if hasattr(p, "text")]
    return said + [[e.title for e in events if hasattr(e, "title")][-1]]


def test_a_sealed_ledger_stores_no_personal_value_and_erasing_one_subject_keeps_it_verifying(db_url, master,
                                                                                             tmp_path, monkeypatch):
    app = open_app(db_url)
    try:
        chat = record(app)
        payloads = stored_payloads(app)
        assert not [m for m in MARKERS for p in payloads if m.encode() in p]  # sealed, every one
        from ledger.sealer import is_sealed

        assert sum(is_sealed(p) for p in payloads) >= 4
        assert texts(app, chat) == [MARKERS[0], MARKERS[1], MARKERS[2], MARKERS[3]]  # read back
    finally:
        app.close()
    cli(db_url, "keys", "create", "k", "--dir", str(tmp_path))
    checkpoint = tmp_path / "cp.json"
    cli(db_url, "events", "checkpoint", "--key", str(tmp_path / "k.key"), "-o", str(checkpoint))

    app = open_app(db_url)
    try:
        ring = KeyRing(app, app.master_key)
        assert len(ring.destroy(ring.keys_of(uuid.UUID(BOB)))) == 1  # (his key in the chat he wrote in)
    finally:
        app.close()
    app = open_app(db_url)  # (a process that never held BOB's key)
    try:
        assert texts(app, chat) == [MARKERS[0], MARKERS[1], ERASED, MARKERS[3]]
        assert stored_payloads(app) == payloads  # not a stored byte changed
    finally:
        app.close()
    report = json.loads(cli(db_url, "events", "verify", "--json", "--no-projections", "--checkpoint", str(checkpoint),
                            "--public-key", str(tmp_path / "k.pub")).stdout)
    assert report["ok"], report["anomalies"][:3]

    monkeypatch.delenv(MASTER_ENV)
    with pytest.raises(LedgerError) as e:
        open_app(db_url)
    assert e.value.code == "master_key_required"


words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz éß\u202e€", min_size=1, max_size=30).filter(str.strip)
scripts = st.lists(st.tuples(st.sampled_from([None, ALICE, BOB]), words), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(scripts, words)
def test_a_sealed_ledger_replays_to_what_a_plain_one_does(script, title) -> None:
    """The same commands in a ledger sealing personal values and in one that does not: every chat state the
    same, event for event; the sealed one's stored payloads hold none of the texts (beyond what is not personal)."""
    import os

    states = []
    for key in (new_master_key(), None):
        if key:
            os.environ[MASTER_ENV] = key
        else:
            os.environ.pop(MASTER_ENV, None)
        try:
            app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
        finally:
            os.environ.pop(MASTER_ENV, None)
        try:
            org_with(app)
            chat = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text=script[0][1],
                       chat_id=str(uuid.UUID(int=99)))["chat_id"]
            for author, text in script[1:]:
                run(app, type="commit_step", chat_id=chat, messages=[{"role": "assistant", "parts": [
                    {"type": "text", "text": text}]}]) if author is None else \
                    run(app, type="send_message", chat_id=chat, text=text, created_by=author, busy_behavior="queue")
            run(app, type="set_title", chat_id=chat, title=title)
            events = app.stream(uuid.UUID(chat))
            states.append([(type(e).__name__, _timeless(vars(e))) for e in events])
            if key:
                assert app.mapper.sealer is not None
        finally:
            app.close()
    assert states[0] == states[1]


def _timeless(value):
    """``value`` as plain data with every time left out (each ledger recorded at its own clock)."""
    import datetime

    import msgspec

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if not isinstance(x, datetime.datetime) and k != "timestamp"}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(msgspec.to_builtins(value, builtin_types=(datetime.datetime,)))


def test_a_payload_sealed_place_by_place_is_not_taken_for_one_sealed_whole() -> None:
    """Reading a stored payload's envelopes (``sealed_header``) gives the fast path only one envelope sealed
    whole: not an envelope of values, not several, and never a plain payload."""
    import msgspec

    from ledger.sealer import is_sealed, sealed_header
    from ledger.sealing import Envelope

    def stored(*envelopes: Envelope) -> bytes:
        return msgspec.msgpack.encode({"sealed": msgspec.to_builtins(list(envelopes), builtin_types=(bytes,)),
                                       "limits": {"x": [[1, True]], "y": 2}})

    one = Envelope(uuid.UUID(int=1), 1, [["title"]], b"n" * 12, b"box", False)
    whole = Envelope(uuid.UUID(int=1), 1, [["title"]], b"n" * 12, b"box", True)
    assert is_sealed(stored(one)) and not is_sealed(msgspec.json.encode({"title": "t"}))
    assert not is_sealed(msgspec.msgpack.encode({"title": "t"}))
    assert sealed_header(stored(one)) is None
    assert sealed_header(stored(one, msgspec.structs.replace(one, subject=uuid.UUID(int=2)))) is None
    header = sealed_header(stored(whole))
    assert header is not None and (header.subject, header.key, header.nonce, header.box) == (
        str(whole.subject), 1, whole.nonce, whole.box)
    assert bytes(header.places) == msgspec.msgpack.encode(whole.places)  # (what the box's associated data covers)


def test_a_ledger_sealed_in_the_earlier_layout_reads_erases_and_verifies(db_url, master, monkeypatch) -> None:
    """Sealed payloads written before 2026-12-04 kept their ids and times as text and their box in the ledger's
    JSON (the layout now: 16-byte ids, msgpack times and box). Both layouts read: whose a stream is from its
    first event, the content, the tombstones after an erasure, and the chains."""
    import msgspec

    import ledger.sealer as sealer_module
    from commands.protection import chat_organization
    from ledger.sealer import Sealer

    sealed_now = Sealer.seal
    with monkeypatch.context() as earlier:
        earlier.setattr(sealer_module, "_AS_THEY_ARE", ())
        earlier.setattr(Sealer, "seal", lambda self, event, state, topic, plain: sealed_now(
            self, event, state, topic, lambda: msgspec.json.encode(state)))
        app = open_app(db_url)
        try:
            chat = record(app)
            payloads = stored_payloads(app)
        finally:
            app.close()
    from ledger.sealer import is_sealed

    assert [p for p in payloads if is_sealed(p) and ORG.encode() in p]  # (ids as text: the earlier layout)
    app = open_app(db_url)
    try:
        assert texts(app, chat) == [MARKERS[0], MARKERS[1], MARKERS[2], MARKERS[3]]
        assert chat_organization(app, uuid.UUID(chat)) == uuid.UUID(ORG)
        assert app.mapper.sealer.owner_of(uuid.UUID(chat)) == uuid.UUID(ALICE)
        ring = KeyRing(app, app.master_key)
        assert len(ring.destroy(ring.keys_of(uuid.UUID(BOB)))) == 1
    finally:
        app.close()
    app = open_app(db_url)
    try:
        assert texts(app, chat) == [MARKERS[0], MARKERS[1], ERASED, MARKERS[3]]
        assert stored_payloads(app) == payloads
    finally:
        app.close()
    assert cli(db_url, "events", "verify", "--no-projections").exit_code == 0
