"""Issue 28, point 2 (the keys): each subject's data keys, wrapped by the master key, on SQLite and PostgreSQL —
made once however many ask at once, the same to every process, unusable under another master key, and after
destruction gone: unreadable through the ledger, and on SQLite not in the database file nor its write-ahead log."""

from __future__ import annotations

import base64
import threading
import uuid
from pathlib import Path

import pytest

from ledger.store import open_app
from ledger.subjectkeys import FIRST_NUMBER, KeyRing, SubjectKeyError, master_key, new_master_key
from tests.conftest import drop_schema

MASTER = base64.b64decode(new_master_key())
CHAT = uuid.uuid4()  # (the scope of a key: the chat whose content it seals)


def test_a_subjects_key_is_made_once_kept_wrapped_and_destroyed(db_url) -> None:
    a, b = open_app(db_url), open_app(db_url)
    try:
        alice, bob = uuid.uuid4(), uuid.uuid4()
        ring = KeyRing(a, MASTER)
        n, key = ring.current(alice, CHAT)
        assert n >= FIRST_NUMBER and len(key) == 32 and ring.current(alice, CHAT) == (n, key)
        assert KeyRing(b, MASTER).current(alice, CHAT) == (n, key) and KeyRing(b, MASTER).get(alice, n) == key
        bn, bobs = ring.current(bob, CHAT)
        assert bn != n  # (numbers are the ledger's: no two keys share one)
        with pytest.raises(SubjectKeyError):
            KeyRing(b, base64.b64decode(new_master_key())).get(alice, n)  # another master key
        epoch = ring.epoch()
        assert [k.number for k in ring.destroy(ring.keys_of(alice))] == [n]
        assert ring.destroy(ring.keys_of(alice)) == [] and ring.epoch() != epoch
        assert ring.get(alice, n) is None and KeyRing(b, MASTER).get(alice, n) is None
        assert ring.get(bob, bn) == bobs  # nobody else's
        again = ring.current(alice, CHAT)  # writing again: a new key, never the old one
        assert again[0] not in (n, bn) and again[1] != key and ring.get(alice, n) is None
    finally:
        a.close()
        b.close()


def test_keys_have_scopes_and_a_restore_never_revives_a_destroyed_key(db_url) -> None:
    """A key per (subject, scope): one chat's keys are destroyed without the subject's others (retention), a
    subject's without anyone else's (erasure); rows exported before a destruction, restored after it, add what
    is missing and leave the destroyed key destroyed."""
    a = open_app(db_url)
    try:
        alice, bob, chat1, chat2 = (uuid.uuid4() for _ in range(4))
        ring = KeyRing(a, MASTER)
        k11, k12, b1 = ring.current(alice, chat1), ring.current(alice, chat2), ring.current(bob, chat1)
        assert len({k11[0], k12[0], b1[0]}) == 3 and ring.current(alice, chat1) == k11
        assert ring.live_scopes() == {chat1, chat2}
        before = ring.rows()
        gone = ring.destroy(ring.keys_in([chat1]))  # chat1's content, every subject's
        assert sorted((k.subject, k.number, k.scope) for k in gone) == sorted([(alice, k11[0], chat1),
                                                                               (bob, b1[0], chat1)])
        assert ring.get(alice, k11[0]) is None and ring.get(bob, b1[0]) is None and ring.get(alice, k12[0]) == k12[1]
        assert ring.live_scopes() == {chat2} and ring.keys_in([chat1], live=False) == sorted(gone)
        assert ring.current(alice, chat1)[0] not in (k11[0], k12[0], b1[0])  # new content there: a new key
        assert ring.restore(before) == 0 and ring.get(alice, k11[0]) is None  # the older rows revive nothing
    finally:
        a.close()


def test_a_restore_moves_the_allocator_past_the_numbers_it_brings(db_url, tmp_path) -> None:
    """Keys restored from another ledger (an import) keep their numbers; the numbers handed out after are
    above them, so no later key of the same person takes a number that person's restored key has."""
    other_url = (f"sqlite:///{tmp_path / 'other.db'}" if db_url.startswith("sqlite")
                 else db_url.replace("schema=t_", "schema=t_o"))
    a, other = open_app(db_url), open_app(other_url)
    try:
        alice = uuid.uuid4()
        theirs = KeyRing(other, MASTER)
        for _ in range(3 * KeyRing.BLOCK):  # (their allocator runs ahead of this one)
            theirs.number()
        brought = theirs.current(alice, uuid.uuid4())
        ring = KeyRing(a, MASTER)
        ring.current(uuid.uuid4(), CHAT)  # (this process holds a block of numbers below the restored one)
        assert ring.restore(theirs.rows()) == 1 and ring.get(alice, brought[0]) == brought[1]
        assert all(ring.current(alice, uuid.uuid4())[0] > brought[0] for _ in range(3))
    finally:
        a.close()
        other.close()
        if not other_url.startswith("sqlite"):
            drop_schema(other_url)


def test_many_asking_at_once_get_one_key(db_url) -> None:
    apps = [open_app(db_url) for _ in range(4)]
    try:
        subject, got = uuid.uuid4(), []  # (the first use makes the table too: they race for that as well)
        threads = [threading.Thread(target=lambda app=app: got.append(KeyRing(app, MASTER).current(subject, CHAT)))
                   for app in apps]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 4 and len(set(got)) == 1
    finally:
        for app in apps:
            app.close()


def test_one_subjects_keys_made_at_once_in_several_chats_get_numbers_of_their_own(db_url) -> None:
    """Processes making the same person's keys for different chats at once read the same last number and
    try the same next one: one insert wins each number, the others read again and take the next (a key
    handed out under a number another key holds would seal content that opens under neither)."""
    apps = [open_app(db_url) for _ in range(4)]
    try:
        KeyRing(apps[0], MASTER).ensure()
        rings = [KeyRing(app, MASTER) for app in apps]
        for _ in range(8):  # (a race each time: together they meet the lost insert every run)
            subject, scopes, got = uuid.uuid4(), [uuid.uuid4() for _ in apps], {}
            start = threading.Barrier(len(apps))

            def make(ring, scope, subject=subject, got=got, start=start) -> None:
                start.wait()
                got[scope] = ring.current(subject, scope)

            threads = [threading.Thread(target=make, args=(ring, scope)) for ring, scope in zip(rings, scopes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len({number for number, _ in got.values()}) == len(scopes)  # a number each
            for scope, (number, key) in got.items():
                assert rings[0].get(subject, number) == key and rings[0].current(subject, scope) == (number, key)
            assert [k.scope for k in rings[0].keys_of(subject)] == sorted(got, key=lambda s: got[s][0])
    finally:
        for app in apps:
            app.close()


def test_a_destroyed_key_leaves_no_trace_in_the_sqlite_files(tmp_path: Path) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    app = open_app(url)
    try:
        subject = uuid.uuid4()
        ring = KeyRing(app, MASTER)
        ring.current(subject, CHAT)
        with sqlite3.connect(tmp_path / "ledger.db") as db:
            (wrapped,) = db.execute("SELECT wrapped FROM subject_keys").fetchone()
        files = lambda: b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("ledger.db"))  # noqa: E731
        assert bytes(wrapped) in files()  # (the check can see it while it is there)
        ring.destroy(ring.keys_of(subject))
        assert bytes(wrapped) not in files()
    finally:
        app.close()


def test_the_master_key_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    key = new_master_key()
    assert master_key({}) is None
    assert master_key({"CHAT_LEDGER_MASTER_KEY": key}) == base64.b64decode(key)
    (tmp_path / "master").write_text(key + "\n")
    assert master_key({"CHAT_LEDGER_MASTER_KEY_FILE": str(tmp_path / "master")}) == base64.b64decode(key)
    for bad in ("not base64!", base64.b64encode(b"short").decode()):
        with pytest.raises(SubjectKeyError):
            master_key({"CHAT_LEDGER_MASTER_KEY": bad})
    with pytest.raises(SubjectKeyError):
        master_key({"CHAT_LEDGER_MASTER_KEY_FILE": str(tmp_path / "absent")})
