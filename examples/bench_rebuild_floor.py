"""Benchmark: the floor of rebuilding the chat views of an interleaved ledger, by transaction size.

A projection whose rows are exact at every committed position must, in each transaction, write the
status row of every chat the transaction's events touched (each event changes at least the row's
``version``). With K chats recorded at once, a transaction of B events touches about
``K * (1 - exp(-B / K))`` chats. This script measures, on PostgreSQL, in one process and one run:

* **scan**: reading and decoding the notifications (the rebuild benchmark's baseline);
* **rebuild**: the real ``projections.rebuild`` of the chat views;
* **floor**: the same reads and decoding, then only the status-row writes a transaction must make —
  the touched chats' rows, prebuilt as tuples (no fold, no row computation, no normalization, no
  tool-call or queue rows) — COPY-ed and merged with the position update, committed like a batch.

The floor does strictly less than any correct rebuild at that transaction size, so a rebuild cannot be
faster than it here: where the floor is below half the scan rate, the rebuild target (>= 0.5) cannot be
met at that size by optimizing the view code.

    .venv/bin/python examples/bench_rebuild_floor.py                      # 100k events, 300 chats at once
    .venv/bin/python examples/bench_rebuild_floor.py --interleave 1       # chat after chat
    .venv/bin/python examples/bench_rebuild_floor.py --batch-sizes 500,2000 --pg postgresql://...
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from commands.tools.bench_kit import _scan_decode  # noqa: E402
from commands.tools.workload import generate  # noqa: E402
from ledger.store import open_app  # noqa: E402
from projections import open_backend, rebuild  # noqa: E402
from projections.chats import CHAT_TOPICS, STATUS, ChatViews  # noqa: E402
from projections.engine import physical_name  # noqa: E402


def floor_run(app: Any, conn: psycopg.Connection[Any], schema: str, status: str, rows: dict[str, tuple[Any, ...]],
              batch_size: int) -> tuple[int, float]:
    """(events read, seconds) of the floor pass at ``batch_size`` notifications per transaction."""
    q = sql.Identifier
    target, position = q(schema, "floor_status"), q(schema, "floor_position")
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target))
    conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(target, q(schema, status)))
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (id int PRIMARY KEY, position bigint NOT NULL)")
                 .format(position))
    conn.execute(sql.SQL("DELETE FROM {}").format(position))
    conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0)").format(position))
    cols = [r[0] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
        "ORDER BY ordinal_position", (schema, status))]
    merge = sql.SQL("INSERT INTO {} SELECT * FROM floor_stage ON CONFLICT (chat_id) DO UPDATE SET {}").format(
        target, sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(q(c)) for c in cols[1:]))
    head, pos, events = app.head(), 0, 0
    t = time.perf_counter()
    while pos < head:
        end = min(pos + batch_size, head)
        notes = app.recorder.select_notifications(start=pos, limit=batch_size, stop=end, topics=list(CHAT_TOPICS),
                                                  inclusive_of_start=False)
        touched = {str(app.mapper.to_domain_event(n).originator_id) for n in notes}
        events += len(notes)
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT position FROM {} WHERE id = 1 FOR UPDATE").format(position))
            cur.execute("SET LOCAL synchronous_commit TO off")
            cur.execute(sql.SQL("CREATE TEMPORARY TABLE IF NOT EXISTS floor_stage (LIKE {}) ON COMMIT DELETE ROWS")
                        .format(target))
            with cur.copy("COPY floor_stage FROM STDIN") as copy:
                for chat in touched:
                    copy.write_row(rows[chat])
            cur.execute(merge)
            cur.execute("TRUNCATE floor_stage")
            cur.execute(sql.SQL("UPDATE {} SET position = %s WHERE id = 1").format(position), (end,))
        pos = end
    seconds = time.perf_counter() - t
    conn.execute(sql.SQL("DROP TABLE {}, {}").format(target, position))
    return events, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--interleave", type=int, default=300, help="chats recorded at once (1: chat after chat)")
    p.add_argument("--batch-sizes", default="500,1000,2000")
    args = p.parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    schema = f"bench_floor_{uuid.uuid4().hex[:8]}"
    url = f"{args.pg}?schema={schema}"
    conn = psycopg.connect(args.pg, autocommit=True)
    try:
        app = open_app(url)
        recorded = generate(app, args.events, interleave=args.interleave)
        backend = open_backend(url)
        views = ChatViews(app)
        rebuild(app, views, backend)
        status = physical_name(views.name, backend.live_version(views.name) or views.version, STATUS)
        rows = {r[0]: tuple(Jsonb(v) if isinstance(v, (dict, list)) else v for v in r) for r in
                conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, status)))}
        print(f"{recorded:,} events, {len(rows):,} chats, {args.interleave} recorded at once (PostgreSQL)")
        print(f"{'events/transaction':>18} {'scan ev/s':>10} {'rebuild ev/s':>13} {'ratio':>6} "
              f"{'floor ev/s':>11} {'ratio':>6}")
        for size in sizes:
            n, scan_s = _scan_decode(app)
            t = time.perf_counter()
            rebuild(app, ChatViews(app), backend, batch_size=size)
            rebuild_s = time.perf_counter() - t
            _, floor_s = floor_run(app, conn, schema, status, rows, size)
            # rates over the same notification range (as the rebuild benchmark reports them)
            print(f"{size:>18,} {n / scan_s:>10,.0f} {n / rebuild_s:>13,.0f} {scan_s / rebuild_s:>6.2f} "
                  f"{n / floor_s:>11,.0f} {scan_s / floor_s:>6.2f}")
        backend.close()
        app.close()
    finally:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.close()


if __name__ == "__main__":
    main()
