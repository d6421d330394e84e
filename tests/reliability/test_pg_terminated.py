"""The PostgreSQL connections terminated (``pg_terminate_backend``) while commands run and while the views
are followed: commands either succeed or are refused with a clear error, nothing is half-written (a child
chat and its parent's ChildChatCreated are saved in one transaction: both or neither), and the follower
resumes and ends equal to a rebuild. Only this test's connections are terminated (the server is shared):
those whose last query named this test's schema, and the follower's LISTEN connection."""

from __future__ import annotations

import threading
import time
import uuid

from commands.handler import command_from_dict, execute
from ledger.chat import events as ev
from ledger.errors import LedgerError
from ledger.store import open_app
from projections import Follower, open_backend
from projections.chats import ChatViews
from tests.chat.helpers import ORG, OWNER, setup_org
from tests.reliability.kit import (
    all_events, assert_streams_contiguous, assert_views_equal_rebuild, markers, schema_backends, terminate, wait_for,
)

#: refusals that record nothing (a connection terminated after the server committed is read back by the unit
#: of work: the command then reports its result, never ``chat_already_exists`` for its own chat)
CLEAR = {"database_unavailable", "conflict"}


def test_commands_while_connections_are_terminated(pg_url: str) -> None:
    app = open_app(pg_url)
    try:
        setup_org(app)
        parent = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                                 "text": "parent"}))["chat_id"]
        outcomes: list[tuple[str, str, str]] = []
        done = threading.Event()
        kills = [0]

        def commands() -> None:
            # at least 24 commands, and on until connections were terminated under them (a create decided
            # from memory makes one round trip: 24 of them can end before the first termination)
            try:
                i = -1
                while (i := i + 1) < 24 or (kills[0] < 3 and i < 2000):
                    mark = f"m0x{i}"
                    try:
                        r = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG,
                                                            "owner_id": OWNER, "parent_chat_id": parent,
                                                            "text": f"child {mark}"}))
                        outcomes.append((mark, "ok", r["chat_id"]))
                    except LedgerError as e:
                        outcomes.append((mark, e.code, e.message))
                    except Exception as e:  # noqa: BLE001 - what the test looks for
                        outcomes.append((mark, "UNEXPECTED", f"{type(e).__name__}: {e}"))
            finally:
                done.set()

        worker = threading.Thread(target=commands)
        worker.start()
        killed = 0
        while not done.is_set():
            killed += terminate(pg_url, schema_backends(pg_url))
            kills[0] = killed
            time.sleep(0.1)
        worker.join(timeout=60)
        assert killed > 0, "no connection was terminated while the commands ran"
        assert [o for o in outcomes if o[1] not in {"ok", *CLEAR}] == []
        ok = [o for o in outcomes if o[1] == "ok"]
        assert len(ok) >= 12, f"reconnects should carry most commands through: {outcomes}"

        # nothing half-written: the ledger (read on a fresh application) pairs every child chat with its
        # parent's ChildChatCreated, and holds each applied command once
        app2 = open_app(pg_url)
        try:
            assert_streams_contiguous(app2)
            events = all_events(app2)
            children = {e.originator_id for e in events if isinstance(e, ev.ChatCreated) and e.parent_chat_id}
            announced = [e.child_chat_id for e in events if isinstance(e, ev.ChildChatCreated)]
            assert sorted(map(str, announced)) == sorted(map(str, children))
            assert len(announced) == len(set(announced))
            found = markers(app2)
            for mark, outcome, detail in outcomes:
                if outcome == "ok":
                    assert found[mark] == 1
                    assert uuid.UUID(detail) in children
                else:  # refused: nothing recorded
                    assert found[mark] == 0, (mark, outcome, detail)
            assert app2.load(uuid.UUID(parent)).version == 1 + len(announced)
            assert_views_equal_rebuild(app2, pg_url)
        finally:
            app2.close()
    finally:
        app.close()


def test_follow_resumes_after_its_connections_are_terminated(pg_url: str) -> None:
    app = open_app(pg_url)
    backend = open_backend(pg_url)
    stop = threading.Event()
    follower = Follower(app, [ChatViews(app)], backend, poll_interval=0.2, reconnect_delay=(0.05, 0.5))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            follower.run(stop)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    try:
        setup_org(app)
        thread.start()
        wait_for(lambda: follower.listen_pid is not None and follower.catch_ups >= 1, 15, "the follower to start")
        chats = []
        for round_ in range(3):
            for i in range(5):
                chats.append(execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG,
                                                             "owner_id": OWNER, "text": f"r{round_} c{i}"}))["chat_id"])
            first_listen = follower.listen_pid
            pids = set(schema_backends(pg_url)) | {follower.listen_pid}
            assert terminate(pg_url, [p for p in pids if p]) >= 1
            for cid in chats[-5:]:  # more work while the follower reconnects
                execute(app, command_from_dict({"type": "set_title", "chat_id": cid, "title": f"after kill {round_}"}))
            wait_for(lambda: backend.position("chat_views", ChatViews.version) == app.head(), 30, "the follower to catch up again")
            wait_for(lambda: follower.listen_pid not in (None, first_listen), 15, "a new LISTEN connection")
        assert follower.listen_connects >= 4
        status = {r["chat_id"]: r for r in backend.query("chat_views", "chat_status")}
        assert set(status) == set(chats)
        assert all(status[c]["title"].startswith("after kill") for c in chats)
    finally:
        stop.set()
        thread.join(timeout=15)
        backend.close()
    assert not thread.is_alive() and errors == []
    try:
        assert_views_equal_rebuild(app, pg_url)
    finally:
        app.close()
