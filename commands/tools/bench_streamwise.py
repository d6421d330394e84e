"""Stream-wise rebuild measurements of ``chat-ledger bench --only rebuild`` (issue 17), each in a fresh process:
``python -m commands.tools.bench_streamwise KIND URL [WORKERS]`` prints one JSON line.

* ``streamwise``: on a ledger written by ``bench_children.child_generate``: scan + decode of the chat events (the
  baseline, better of two), then the chat views rebuilt stream-wise with 1 worker (this process: its peak RSS is
  the 1-worker figure) and with WORKERS processes (each reports its own peak RSS), then a log-order build of the
  same events (what ``catch-up`` does after a pause, at the default 500 notifications per transaction).
* ``library``: the eventsourcing library's own ``ProjectionRunner`` (PostgreSQL only: the library's SQLite
  recorder has no subscriptions) following the same ledger with a view of one status row per chat, one
  transaction per event, as its documentation shows; rate over the first ``LIBRARY_EVENTS`` events.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

LIBRARY_EVENTS = 5_000


def _scan_decode_chat(app: Any) -> tuple[int, float]:
    """Scan and decode the chat views' events (the topics they read) in log order, 500 at a time."""
    from commands.tools.bench_kit import _scan_decode
    from projections.chats import CHAT_TOPICS

    return _scan_decode(app, CHAT_TOPICS)


def child_streamwise(url: str, workers: int) -> dict[str, Any]:
    from commands.tools.bench_kit import _peak_rss_mb
    from ledger.store import open_app
    from projections import open_backend, rebuild
    from projections.chats import ChatViews

    app = open_app(url)
    backend = open_backend(url)
    n, scan_s = min((_scan_decode_chat(app) for _ in range(2)), key=lambda x: x[1])
    raw = n / scan_s
    out: dict[str, Any] = {"events": n, "raw_scan_decode_events_per_s": round(raw)}
    for label, w, sw in (("streamwise_1", 1, True), (f"streamwise_{workers}", workers, True), ("log_order", 1, False)):
        t = time.perf_counter()
        result = rebuild(app, ChatViews(app), backend, streamwise=sw, workers=w)
        dt = time.perf_counter() - t
        out[label] = {"seconds": round(dt, 2), "events_per_s": round(result.events / dt),
                      "ratio": round(result.events / dt / raw, 3), "workers": w,
                      "worker_peak_rss_mb": [round(x, 1) for x in result.worker_peak_rss_mb]}
        if label == "streamwise_1":
            out[label]["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    out["log_order_vs_streamwise_1"] = round(out["streamwise_1"]["seconds"] and
                                             out["log_order"]["seconds"] / out["streamwise_1"]["seconds"], 2)
    backend.close()
    app.close()
    return out


def child_library(url: str, events: int = LIBRARY_EVENTS) -> dict[str, Any]:
    """The library's ProjectionRunner over the ledger at ``url`` (PostgreSQL), first ``events`` chat events."""
    from eventsourcing.postgres import PostgresTrackingRecorder
    from eventsourcing.projection import Projection, ProjectionRunner
    from psycopg.sql import SQL, Identifier

    from ledger.chat.evolve import evolve
    from ledger.chat.views import status_values
    from ledger.store import ChatLedgerApp, DatabaseURL, open_app
    from projections.chats import CHAT_TOPICS
    from projections.folding import StreamFold

    app = open_app(url)
    head_events = app.recorder.select_notifications(start=0, limit=events, topics=CHAT_TOPICS)
    last_id = head_events[-1].id
    n = len(head_events)
    del head_events
    env = DatabaseURL.parse(url).env()

    class StatusView(PostgresTrackingRecorder):
        def __init__(self, datastore: Any, **kwargs: Any) -> None:
            super().__init__(datastore, **kwargs)
            self.table = Identifier(self.datastore.schema), Identifier("library_chat_status")
            self.sql_create_statements.append(SQL(
                "CREATE TABLE IF NOT EXISTS {}.{} (chat_id uuid PRIMARY KEY, row jsonb NOT NULL)").format(*self.table))
            self.upsert = SQL("INSERT INTO {}.{} VALUES (%s, %s) ON CONFLICT (chat_id) DO UPDATE SET row = "
                              "excluded.row").format(*self.table)

        def process(self, event: Any, tracking: Any, row: Any) -> None:
            from psycopg.types.json import Jsonb

            with self.datastore.transaction(commit=True) as curs:
                self._insert_tracking(curs, tracking)
                curs.execute(self.upsert, (event.originator_id, Jsonb(row, dumps=_dumps)))

    fold = StreamFold(app, evolve, __import__("ledger.chat.events", fromlist=["ChatCreated"]).ChatCreated)

    class StatusProjection(Projection[StatusView]):
        name = "library_bench"
        topics = CHAT_TOPICS

        def process_event(self, domain_event: Any, tracking: Any) -> None:
            state = fold.after(domain_event, fold.before(domain_event))
            self.view.process(domain_event, tracking, status_values(state))

    t = time.perf_counter()
    with ProjectionRunner(application_class=ChatLedgerApp, projection_class=StatusProjection,
                          view_class=StatusView, env={**env, "LIBRARY_BENCH_POSTGRES_SCHEMA":
                                                      DatabaseURL.parse(url).schema}) as runner:
        runner.wait(last_id, timeout=600)
    dt = time.perf_counter() - t
    app.close()
    return {"events": n, "seconds": round(dt, 2), "events_per_s": round(n / dt)}


def _dumps(v: Any) -> str:
    import msgspec

    return msgspec.json.encode(v).decode()


if __name__ == "__main__":
    kind, url = sys.argv[1], sys.argv[2]
    if kind == "streamwise":
        print(json.dumps(child_streamwise(url, int(sys.argv[3]))))
    else:
        print(json.dumps(child_library(url)))
