"""A view batch never reads the event store while its transaction holds the view's locks.

On SQLite the view transaction holds the file's write lock (``BEGIN IMMEDIATE``). If the chat views'
fold then loaded a stream through an application shared with command writers, it could queue behind a
writer that itself waits for that lock: a deadlock until a timeout (seen with writers and a catch-up
sharing ONE application object). So a projection reads what it needs from elsewhere in ``prepare``,
before the transaction opens (``SqlBackend.apply_batch``); inside ``apply`` the fold only uses memory.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

from commands.handler import command_from_dict, execute
from ledger.store import open_app
from projections import catch_up, open_backend, streamwise
from projections.chats import ChatViews
from tests.chat.helpers import ORG, OWNER, setup_org


def test_cold_fold_loads_states_before_the_view_transaction(sqlite_url: str) -> None:
    app = open_app(sqlite_url)
    backend = open_backend(sqlite_url)
    try:
        setup_org(app)
        chats = [execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG,
                                                 "owner_id": OWNER, "text": f"chat {i}"}))["chat_id"]
                 for i in range(5)]
        warm = ChatViews(app)
        catch_up(app, warm, backend)
        for chat_id in chats:  # events whose states a cold fold must load
            execute(app, command_from_dict({"type": "set_title", "chat_id": chat_id, "title": "renamed"}))
        cold = ChatViews(app)  # a restarted follower: nothing in memory

        in_tx = threading.local()
        loads: list[tuple[uuid.UUID, bool]] = []
        original_tx, original_load = backend._write_tx, app.load

        @contextmanager
        def watched_tx() -> Iterator[Any]:
            in_tx.on = True
            try:
                with original_tx() as cur:
                    yield cur
            finally:
                in_tx.on = False

        def watched_load(aggregate_id: uuid.UUID, version: int | None = None) -> Any:
            loads.append((aggregate_id, getattr(in_tx, "on", False)))
            return original_load(aggregate_id, version=version)

        def watched_read(app: Any, upto: dict[uuid.UUID, int], *args: Any) -> Any:  # the fold's batched reads
            loads.extend((a, getattr(in_tx, "on", False)) for a in upto)
            return original_read(app, upto, *args)

        backend._write_tx = watched_tx  # type: ignore[method-assign]
        app.load = watched_load  # type: ignore[method-assign]
        original_read = streamwise.read_streams
        streamwise.read_streams = watched_read
        try:
            assert catch_up(app, cold, backend) == len(chats)
        finally:
            streamwise.read_streams = original_read
        assert {str(a) for a, _ in loads} == set(chats)  # the cold fold did load every state ...
        assert not any(inside for _, inside in loads)  # ... and never inside the view transaction
        titles = {r["chat_id"]: r["title"] for r in backend.query("chat_views", "chat_status")}
        assert all(titles[c] == "renamed" for c in chats)
    finally:
        backend.close()
        app.close()
