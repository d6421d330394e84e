"""Issue 28, points 3 and 4: erasure by destroying keys, legal holds and retention — on SQLite and PostgreSQL, with
the raw database read directly (the SQLite file and its write-ahead log; every PostgreSQL table of the ledger's
schema as text): after an erasure no table holds the subject's words, the ledger verifies and re-decides, its
views and search answer ``[erased]`` and find nothing, and an export of it imports and verifies. Held targets refuse
(``legal_hold``) and record nothing; retention erases old chats once and skips held ones. By hypothesis: which
users write where, which are held, which are erased — the refusals and the texts match a model."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.sealing import ERASED
from ledger.store import ChatLedgerApp, DatabaseURL, open_app
from ledger.subjectkeys import MASTER_ENV, new_master_key
from tests.audit.kit import cli, json_lines
from tests.catalog.kit import ALICE, BOB, ORG, org_with, refused, run

ALICE_WORDS = ("aliceasks7f3a", "alicetitle2c4d", "modelanswers91c2", "alicequeued5b7e", "aliceargs8d1f")
BOB_WORDS = ("bobwrites55e0", "bobtitle0a9b")


def record(app) -> tuple[str, str]:
    """ALICE's chat (her prompt, the model's answer with a tool call, a queued prompt, her title) with BOB's
    words in it, and BOB's own chat."""
    org_with(app)
    chat = run(app, type="create_chat", organization_id=ORG, owner_id=ALICE, text=ALICE_WORDS[0])["chat_id"]
    run(app, type="commit_step", chat_id=chat, messages=[{"role": "assistant", "parts": [
        {"type": "text", "text": ALICE_WORDS[2]},
        {"type": "tool-call", "tool_call_id": "c1", "tool_name": "execute", "args": {"cmd": ALICE_WORDS[4]}}]}])
    run(app, type="send_message", chat_id=chat, text=ALICE_WORDS[3], busy_behavior="queue")
    run(app, type="send_message", chat_id=chat, text=BOB_WORDS[0], created_by=BOB, busy_behavior="queue")
    run(app, type="set_title", chat_id=chat, title=ALICE_WORDS[1])
    bobs = run(app, type="create_chat", organization_id=ORG, owner_id=BOB, text=BOB_WORDS[0])["chat_id"]
    run(app, type="set_title", chat_id=bobs, title=BOB_WORDS[1])
    return chat, bobs


def raw_text(url: str) -> bytes:
    """Everything the database holds, read around the ledger: the SQLite file with its write-ahead log, or every
    table of the PostgreSQL schema, each row as text."""
    db = DatabaseURL.parse(url)
    if db.backend == "sqlite":
        return b"".join(p.read_bytes() for p in Path(db.path).parent.iterdir() if p.name.startswith(Path(db.path).name))
    import psycopg

    with psycopg.connect(db.psycopg_conninfo()) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (db.schema,))]
        return b"".join(str(row[0]).encode() for t in tables for row in conn.execute(
            f'SELECT t::text FROM "{db.schema}"."{t}" t'))


def found(words, data: bytes) -> list[str]:
    return [w for w in words if w.encode() in data]


def test_an_erased_user_leaves_no_readable_trace_and_the_ledger_still_verifies(db_url, master, tmp_path):
    app = open_app(db_url)
    try:
        chat, bobs = record(app)
    finally:
        app.close()
    cli(db_url, "status")
    assert json_lines(cli(db_url, "search", ALICE_WORDS[0], "--json").output)  # the views and the index hold it
    assert found(ALICE_WORDS, raw_text(db_url))  # (so the check below can see it when it is there)

    result = json.loads(cli(db_url, "erase", ALICE, "--reason", "GDPR Art. 17 request 2026-41", "--json").output)
    assert result["keys_destroyed"] >= 1 and result["streams"] == [chat]

    assert found(ALICE_WORDS, raw_text(db_url)) == []  # in no table, no file, no log
    assert found(BOB_WORDS, raw_text(db_url)) == list(BOB_WORDS)  # (the views of Bob's chat still hold his)
    shown = cli(db_url, "show", chat).output
    assert ERASED in shown and BOB_WORDS[0] in shown and not found(ALICE_WORDS, shown.encode())
    assert ALICE_WORDS[1] not in cli(db_url, "status", chat).output and ERASED in cli(db_url, "status", chat).output
    assert json_lines(cli(db_url, "search", ALICE_WORDS[0], "--json").output) == []
    assert {r["chat_id"] for r in json_lines(cli(db_url, "search", BOB_WORDS[0], "--json").output)} == {chat, bobs}
    for args in (("audit", chat), ("audit", chat, "--html"), ("explain", chat, "--turn", "latest"),
                 ("queue", chat), ("unresolved",)):
        assert not found(ALICE_WORDS, cli(db_url, *args, code=None).output.encode()), args
    assert cli(db_url, "events", "verify", "--decisions").exit_code == 0  # chains, views, decisions re-decided

    # an export of the erased ledger carries its keys as they are: imported (same master key), it verifies and
    # reads the same — Alice's content erased, Bob's intact
    export = tmp_path / "export.jsonl"
    cli(db_url, "events", "export", "-o", str(export))
    assert not found(ALICE_WORDS, export.read_bytes())
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    cli(copy, "events", "import", str(export))
    assert cli(copy, "events", "verify").exit_code == 0
    assert cli(copy, "show", chat).output.replace(copy, db_url) == cli(db_url, "show", chat).output.replace(copy, db_url)


def test_an_erasure_leaves_no_destroyed_key_in_the_process_memory_it_ran_in(db_url, master):
    """The keys a process used stay in its memory (the sealer's, and the AES-GCM objects made of them: their key
    bytes are the cache's keys) until an erasure: then none of the destroyed ones is kept, and what the process
    reads next is erased — on a ledger whose key table was made by this process (its keys read before the table
    had an epoch to compare: such a process once kept them past the erasure, and read the content after it)."""
    from commands.queries import shown_chat
    from ledger import sealing

    app = open_app(db_url)
    try:
        chat, _ = record(app)
        shown = json.dumps(shown_chat(app, uuid.UUID(chat), None, None), default=str)
        assert ALICE_WORDS[0] in shown  # (read: the keys opened)
        sealer = app.mapper.sealer
        alices = {key for (subject, _), key in sealer._keys.items() if subject == uuid.UUID(ALICE) and key}
        assert alices and alices <= set(sealing._ciphers)  # (so the check below can see them when they are there)
        run(app, type="erase_subject", user_id=ALICE, reason="request")
        shown = json.dumps(shown_chat(app, uuid.UUID(chat), None, None), default=str)
        assert ERASED in shown and not found(ALICE_WORDS, shown.encode())
        assert not alices & set(sealing._ciphers)
        assert not alices & {key for key in sealer._keys.values() if key}
        assert not alices & {key for key, _ in sealer._current.values()}
    finally:
        app.close()


def test_a_hold_refuses_erasure_and_retention_and_records_nothing(db_url, master):
    app = open_app(db_url)
    try:
        chat, bobs = record(app)
        for target in (chat, ALICE, ORG):
            run(app, type="set_legal_hold", target=target, hold=True, reason="litigation hold 7")
            err = refused(app, "legal_hold", type="erase_subject", user_id=ALICE, reason="request")
            assert target in err.message
            assert ALICE_WORDS[0] in json.dumps([str(e) for e in app.stream(uuid.UUID(chat))])  # nothing destroyed
            run(app, type="set_legal_hold", target=target, hold=False, reason="released")
        # Bob's content is in Alice's chat: his erasure is refused while her chat is held
        run(app, type="set_legal_hold", target=chat, hold=True, reason="litigation hold 8")
        refused(app, "legal_hold", type="erase_subject", user_id=BOB, reason="request")
        assert run(app, type="set_legal_hold", target=chat, hold=True, reason="again")["recorded"] == 0
    finally:
        app.close()


def test_retention_erases_old_chats_once_and_skips_held_ones(db_url, master):
    app = open_app(db_url)
    try:
        chat, bobs = record(app)
        assert run(app, type="set_retention_policy", organization_id=ORG, content_days=30)["content_days"] == 30
        run(app, type="set_legal_hold", target=bobs, hold=True, reason="keep Bob's chat")
    finally:
        app.close()
    later = (app_now() + timedelta(days=31)).isoformat()
    cli(db_url, "retention", "run", "--now", (app_now() + timedelta(days=29)).isoformat())
    assert found(ALICE_WORDS, raw_text(db_url))  # not yet
    first = json.loads(cli(db_url, "retention", "run", "--now", later, "--json").output)
    assert [e["chat_id"] for e in first["expired"]] == [chat] and [h["chat_id"] for h in first["held"]] == [bobs]
    again = json.loads(cli(db_url, "retention", "run", "--now", later, "--json").output)
    assert again["expired"] == [] and [h["chat_id"] for h in again["held"]] == [bobs]  # idempotent
    data = raw_text(db_url)
    assert found(ALICE_WORDS, data) == [] and BOB_WORDS[1] in data.decode("latin-1")
    assert ERASED in cli(db_url, "show", chat).output and BOB_WORDS[1] in cli(db_url, "show", bobs).output
    assert cli(db_url, "events", "verify").exit_code == 0


def test_erasure_needs_a_sealed_ledger(tmp_path):
    app = open_app(f"sqlite:///{tmp_path / 'plain.db'}")
    try:
        org_with(app)
        refused(app, "not_sealed", type="erase_subject", user_id=ALICE, reason="request")
    finally:
        app.close()


def app_now():
    from commands.uow import utcnow

    return utcnow()


# -- by hypothesis -------------------------------------------------------------------------------------------------

USERS = (ALICE, BOB, "0b000000-0000-4000-8000-0000000000c0")


@st.composite
def plans(draw):
    """Each user owns a chat; each writes in some of the others'; then a sequence of holds and erasures."""
    writes = {u: draw(st.sets(st.sampled_from(range(len(USERS))))) for u in USERS}
    ops = draw(st.lists(st.one_of(
        st.tuples(st.just("hold"), st.sampled_from(["user", "chat", "org"]), st.integers(0, len(USERS) - 1),
                  st.booleans()),
        st.tuples(st.just("erase"), st.integers(0, len(USERS) - 1))), max_size=8))
    return writes, ops


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=plans())
def test_erasures_and_holds_follow_the_model(plan, master):
    writes, ops = plan
    app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    try:
        org_with(app, members=USERS)
        chats = [run(app, type="create_chat", organization_id=ORG, owner_id=u, text=f"own-{i}")["chat_id"]
                 for i, u in enumerate(USERS)]
        said: list[tuple[str, str, str]] = []  # (chat, author, text)
        for i, u in enumerate(USERS):
            said.append((chats[i], u, f"own-{i}"))
            for c in sorted(writes[u]):
                text = f"w-{i}-{c}"
                run(app, type="send_message", chat_id=chats[c], text=text, created_by=u, busy_behavior="queue")
                said.append((chats[c], u, text))
        held: set[str] = set()
        erased: set[str] = set()
        for op in ops:
            if op[0] == "hold":
                _, kind, i, on = op
                target = {"user": USERS[i], "chat": chats[i], "org": ORG}[kind]
                run(app, type="set_legal_hold", target=target, hold=on, reason="r")
                (held.add if on else held.discard)(target)
                continue
            user = USERS[op[1]]
            touched = {c for c, a, _ in said if a == user} | {chats[USERS.index(user)]}
            if user in erased:
                touched = set()  # (no live key left: a new erasure touches nothing)
            blocked = user in held or (bool(touched) and ORG in held) or bool(touched & held)
            if blocked:
                refused(app, "legal_hold", type="erase_subject", user_id=user, reason="r")
            else:
                run(app, type="erase_subject", user_id=user, reason="r")
                erased.add(user)
            for c, author, text in said:
                read = " ".join(map(str, app.stream(uuid.UUID(c))))  # every event of the chat, as it reads
                assert (repr(text) in read) == (author not in erased), (c, author, text, erased)
    finally:
        app.close()


def test_an_older_export_keeps_the_erasures_made_since(db_url, master, tmp_path):
    """Point 5: an export made before an erasure, imported with --keep-erasures-of the ledger as it is now, brings
    none of the erased content back (without it, the copy is the ledger as it was: a backup's content)."""
    app = open_app(db_url)
    try:
        chat, _ = record(app)
    finally:
        app.close()
    older = tmp_path / "older.jsonl"
    cli(db_url, "events", "export", "-o", str(older))
    cli(db_url, "erase", ALICE, "--reason", "request")
    kept = f"sqlite:///{tmp_path / 'kept.db'}"
    cli(kept, "events", "import", str(older), "--keep-erasures-of", db_url)
    shown = cli(kept, "show", chat).output
    assert not found(ALICE_WORDS, shown.encode()) and ERASED in shown and BOB_WORDS[0] in shown
    assert found(ALICE_WORDS, raw_text(kept)) == [] and cli(kept, "events", "verify").exit_code == 0
    plain = f"sqlite:///{tmp_path / 'plain.db'}"
    cli(plain, "events", "import", str(older))  # (no erasures kept: the ledger as it was then)
    assert ALICE_WORDS[0] in cli(plain, "show", chat).output


def test_an_unsealed_ledger_is_copied_sealed_and_compared(tmp_path, monkeypatch):
    """Point 6: events encrypt-existing copies a plaintext ledger into a new sealed one, field for field; the
    original is left as it was; then the copy can erase."""
    old = f"sqlite:///{tmp_path / 'old.db'}"
    app = open_app(old)
    try:
        chat, _ = record(app)
    finally:
        app.close()
    before = (tmp_path / "old.db").read_bytes()
    assert found(ALICE_WORDS, before)  # plaintext
    monkeypatch.setenv(MASTER_ENV, new_master_key())
    new = f"sqlite:///{tmp_path / 'new.db'}"
    result = json.loads(cli(old, "events", "encrypt-existing", "--to", new, "--json").output)
    assert result["first_difference"] is None and result["verified"] == result["events"] > 10
    assert (tmp_path / "old.db").read_bytes() == before  # untouched
    assert cli(new, "show", chat).output.replace(new, "") == cli(old, "show", chat).output.replace(old, "")
    assert cli(new, "events", "verify").exit_code == 0
    cli(new, "erase", ALICE, "--reason", "request")
    assert found(ALICE_WORDS, raw_text(new)) == []
    cli(old, "events", "encrypt-existing", "--to", new, code=1)  # (not empty now: refused)
