"""8 concurrent writers (4 threads sharing one application, 4 processes with their own) on 3 overlapping
chats, with the chat views caught up by a 9th thread meanwhile: no event lost or duplicated, every command
applied exactly once or refused with a clear error (and then absent), the views equal a rebuild."""

from __future__ import annotations

import multiprocessing as mp
import threading
import uuid
from typing import Any

from commands.handler import command_from_dict, execute
from ledger.errors import LedgerError
from ledger.store import open_app
from projections import catch_up, open_backend
from projections.chats import ChatViews
from tests.chat.helpers import ORG, OWNER, setup_org
from tests.reliability.kit import assert_streams_contiguous, assert_views_equal_rebuild, markers

COMMANDS = 12  # per writer
#: the only refusal a writer may meet here: its command lost every optimistic-concurrency retry
ALLOWED_REFUSALS = {"conflict"}


def writer_commands(writer: int, chat_ids: list[str]) -> list[dict[str, Any]]:
    """Commands valid in R0 that leave the chat in R0, each carrying its own marker ``m<w>x<i>``; every
    third one has an idempotency key and is sent twice (the repeat must record nothing)."""
    out = []
    for i in range(COMMANDS):
        mark, chat_id = f"m{writer}x{i}", chat_ids[(writer + i) % len(chat_ids)]
        if i % 2:
            cmd = {"type": "set_title", "chat_id": chat_id, "title": f"title {mark}"}
        else:
            cmd = {"type": "commit_step", "chat_id": chat_id,
                   "messages": [{"role": "assistant", "parts": [{"type": "text", "text": f"step {mark}"}]}]}
        if i % 3 == 0:
            cmd["idempotency_key"] = f"key-{mark}"
        out.append(cmd)
    return out


def run_writer(app: Any, writer: int, chat_ids: list[str]) -> list[tuple[str, str, Any]]:
    """(marker, "ok" | error code, detail) per command (repeats included)."""
    log = []
    for cmd in writer_commands(writer, chat_ids):
        text = cmd.get("title") or cmd["messages"][0]["parts"][0]["text"]
        mark = text.split()[-1]
        for _ in range(2 if "idempotency_key" in cmd else 1):
            try:
                result = execute(app, command_from_dict(cmd))
                log.append((mark, "ok", result["version"]))
            except LedgerError as e:
                log.append((mark, e.code, e.message))
            except Exception as e:  # noqa: BLE001 - a traceback is the failure this test looks for
                log.append((mark, "UNEXPECTED", f"{type(e).__name__}: {e}"))
    return log


def process_writer(url: str, writer: int, chat_ids: list[str], out: Any) -> None:
    app = open_app(url)
    try:
        out.put((writer, run_writer(app, writer, chat_ids)))
    finally:
        app.close()


def test_eight_writers_on_overlapping_chats(db_url: str, app: Any) -> None:
    setup_org(app)
    chat_ids = [execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                                "text": f"chat {i}"}))["chat_id"] for i in range(3)]
    ctx = mp.get_context("spawn")  # a fresh interpreter: nothing of this process's connections is shared
    queue = ctx.Queue()
    procs = [ctx.Process(target=process_writer, args=(db_url, w, chat_ids, queue)) for w in range(4, 8)]
    for p in procs:
        p.start()
    logs: dict[int, list[tuple[str, str, Any]]] = {}
    stop = threading.Event()

    def thread_writer(w: int) -> None:
        logs[w] = run_writer(app, w, chat_ids)

    def views_follower() -> None:  # catches the views up while the writers write
        # Its own application: on SQLite, sharing the writers' one deadlocks until a timeout
        # (see test_sqlite_shared_app_deadlock.py).
        reader = open_app(db_url)
        try:
            with open_backend(db_url) as backend:
                while not stop.is_set():
                    catch_up(reader, ChatViews(reader), backend, batch_size=7)
        finally:
            reader.close()

    threads = [threading.Thread(target=thread_writer, args=(w,)) for w in range(4)]
    follower = threading.Thread(target=views_follower)
    follower.start()
    for t in threads:
        t.start()
    for _ in procs:
        w, log = queue.get(timeout=120)
        logs[w] = log
    for t in threads:
        t.join(timeout=120)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    stop.set()
    follower.join(timeout=60)
    assert sorted(logs) == list(range(8))

    unexpected = [entry for log in logs.values() for entry in log if entry[1] not in {"ok", *ALLOWED_REFUSALS}]
    assert unexpected == []
    found = markers(app)
    applied = 0
    for w, log in logs.items():
        by_mark: dict[str, list[str]] = {}
        for mark, outcome, _ in log:
            by_mark.setdefault(mark, []).append(outcome)
        for mark, outcomes in by_mark.items():
            if "ok" in outcomes:
                applied += 1
                assert found[mark] == 1, f"{mark} applied but recorded {found[mark]} times"
            else:  # refused every time: nothing of it is recorded
                assert found[mark] == 0, f"{mark} refused ({outcomes}) but recorded"
        # an idempotent repeat returns the first result: the same stream version
        for mark in {m for m, o, _ in log if log.count((m, o, _)) == 2 and o == "ok"}:
            versions = [v for m, o, v in log if m == mark]
            assert len(set(versions)) == 1
    assert applied >= 8 * COMMANDS * 0.9, f"only {applied} of {8 * COMMANDS} commands applied"
    assert set(found) <= {f"m{w}x{i}" for w in range(8) for i in range(COMMANDS)}

    # no event lost or duplicated: each chat's stream is 1..n, holding its creation events plus one
    # event per applied command on it
    lengths = assert_streams_contiguous(app)
    per_chat = {c: 0 for c in chat_ids}
    for w in range(8):
        for i, cmd in enumerate(writer_commands(w, chat_ids)):
            if found[f"m{w}x{i}"]:
                per_chat[cmd["chat_id"]] += 1
    created = app.load(uuid.UUID(chat_ids[0])).version - sum(
        1 for w in range(8) for i, cmd in enumerate(writer_commands(w, chat_ids))
        if cmd["chat_id"] == chat_ids[0] and found[f"m{w}x{i}"])
    for c in chat_ids:
        assert lengths[uuid.UUID(c)] == created + per_chat[c]

    views = assert_views_equal_rebuild(app, db_url)
    status = {r["chat_id"]: r for r in views["chat_status"]}
    for c in chat_ids:
        assert status[c]["version"] == created + per_chat[c]
