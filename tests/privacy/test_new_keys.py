"""A new chat's data key is written in the transaction of the chat's first event (``ledger.sealer``,
``KeyRing.new_key``): a save the database refuses leaves no key behind, and the process that made the key does
not keep it — the same chat saved again is sealed under a key that is stored, and reads back elsewhere. On SQLite
and PostgreSQL, the refusal the database's own (a stream the decision read has moved)."""

from __future__ import annotations

import uuid

import pytest

from ledger.chat.aggregate import Chat
from ledger.recorders import EXPECTED_VERSIONS, DependencyChanged
from ledger.store import open_app
from ledger.subjectkeys import KeyRing
from tests.catalog.kit import ALICE, ORG, org_with, run


def _first_events(url: str, text: str) -> list:
    """The events a ``create_chat`` decides (on a ledger of its own: the same chat can be saved elsewhere)."""
    scratch = open_app(url)
    try:
        org_with(scratch)
        saved: list = []
        real = scratch.save
        scratch.save = lambda *objs, **kw: saved.extend(e for o in objs for e in o.collect_events()) or real(*objs, **kw)
        run(scratch, type="create_chat", organization_id=ORG, owner_id=ALICE, text=text)
        return [e for e in saved if type(e).__module__.startswith("ledger.chat")]
    finally:
        scratch.close()


def test_a_refused_first_save_leaves_no_key_and_keeps_none(db_url, master, tmp_path) -> None:
    scratch_url = (f"sqlite:///{tmp_path / 'scratch.db'}" if db_url.startswith("sqlite")
                   else db_url.replace("schema=t_", "schema=t_s"))
    events = _first_events(scratch_url, "the words of a chat refused once")
    chat = events[0].originator_id
    app, reader = open_app(db_url), open_app(db_url)
    try:
        org_with(app)
        other = uuid.UUID(run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text="x")["chat_id"])
        moved = {other: app.recorder.select_events(other, desc=True, limit=1)[0].originator_version + 1}
        with pytest.raises(DependencyChanged):  # the decision read ``other`` at a version it is not at
            app.save(Chat.start(list(events)), **{EXPECTED_VERSIONS: moved})
        ring = KeyRing(app, app.master_key)
        assert app.stream(chat) == [] and ring.keys_in([chat]) == []  # no key left behind by the refusal
        app.save(Chat.start(list(events)))  # the same chat again: sealed under a key that is stored
        (key,) = ring.keys_in([chat])
        assert key.subject == uuid.UUID(ALICE)
        read = reader.stream(chat)  # (another application: its keys from the database)
        assert [p.text for m in read[0].messages for p in m.parts if hasattr(p, "text")] == [
            "the words of a chat refused once"]
    finally:
        app.close()
        reader.close()
        if not scratch_url.startswith("sqlite"):
            from tests.conftest import drop_schema
            drop_schema(scratch_url)
