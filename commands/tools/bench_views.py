"""Benchmark child of the read side: latencies of the view queries the CLI runs (``chat-ledger bench``, run by
``commands.tools.bench_children``)."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from commands.tools.bench_kit import _percentiles


def child_views(url: str, chats: int) -> dict[str, Any]:
    """``chats`` small chats (2-4 events each, written by the workload's pure core in big transactions),
    the chat_views projection caught up, then latencies of the view queries the CLI runs."""
    import random

    from commands.tools.workload import ORGS, ChatScript, setup_catalogs
    from ledger.store import open_app
    from projections import catch_up, open_backend
    from projections.chats import chat_projections

    app = open_app(url)
    facts = setup_catalogs(app)
    rng = random.Random(3)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    t = time.perf_counter()
    pending, ids = [], []
    for _ in range(chats):
        script = ChatScript(random.Random(rng.getrandbits(64)), start, facts)
        for _ in range(rng.choice((2, 2, 3, 4))):
            script.step()
        pending.append(script.chat)
        ids.append(str(script.chat.id))
        if len(pending) >= 500:
            app.save(*pending)
            pending = []
    if pending:
        app.save(*pending)
    write_s = time.perf_counter() - t
    backend = open_backend(url)
    t = time.perf_counter()
    views = chat_projections(app)[0]
    applied = catch_up(app, views, backend, batch_size=2000)
    catch_up_s = time.perf_counter() - t
    status_rows = backend.query(views, "chat_status", limit=None)
    assert len(status_rows) == chats, (len(status_rows), chats)
    unresolved_chats = sorted({r["chat_id"] for r in backend.query(views, "unresolved_tool_calls")})

    def timed(fn: Any, args: list[Any]) -> dict[str, Any]:
        for a in args[:5]:
            fn(a)  # warm up
        samples, rows = [], 0
        for a in args:
            t0 = time.perf_counter()
            rows += len(fn(a))
            samples.append(time.perf_counter() - t0)
        return {**_percentiles(samples), "rows_per_query": round(rows / len(args), 1)}

    pick = [rng.choice(ids) for _ in range(1000)]
    pick_unresolved = [rng.choice(unresolved_chats) for _ in range(1000)] if unresolved_chats else pick
    orgs = [str(rng.choice(ORGS)) for _ in range(200)]
    orgs_full = [str(o) for o in ORGS] * 3
    out = {
        "chats": chats, "events": app.head(), "write_s": round(write_s, 1), "catch_up_s": round(catch_up_s, 1),
        "catch_up_events": applied, "unresolved_rows": sum(1 for _ in backend.query(views, "unresolved_tool_calls")),
        "status_by_chat": timed(lambda c: backend.query(views, "chat_status", where={"chat_id": c}), pick),
        "status_by_org_page": timed(lambda o: backend.query(views, "chat_status", where={"organization_id": o},
                                                            order_by="-updated_at", limit=100), orgs),
        "status_by_org_all": timed(lambda o: backend.query(views, "chat_status", where={"organization_id": o},
                                                           order_by=["updated_at", "chat_id"]), orgs_full),
        "unresolved_by_chat": timed(lambda c: backend.query(views, "unresolved_tool_calls", where={"chat_id": c},
                                                            order_by=["chat_id", "assistant_message_id", "since"]),
                                    pick_unresolved),
        "unresolved_all": timed(lambda _: backend.query(views, "unresolved_tool_calls",
                                                        order_by=["chat_id", "assistant_message_id", "since"]), [0] * 10),
    }
    backend.close()
    app.close()
    return out
