"""``chat-ledger bench``: speed as ratios against a baseline measured in the same run.

* replay: load a 10,000-event chat (decode + fold) vs decoding the same events alone (target >= 0.8);
* rebuild: rebuild the three chat views from N recorded events vs scanning and decoding the same
  notification range (target >= 0.5 on PostgreSQL), with peak RSS of a rebuild at two sizes (flat).

Each measurement runs in a fresh process (so peak RSS is the rebuild's own) on its own database: a new
SQLite file or a new PostgreSQL schema, dropped afterwards. Also runnable as ``python -m commands.bench``.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import click

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"


def _fresh_url(backend: str, pg_url: str, tmp: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp}/bench-{uuid.uuid4().hex[:8]}.db"
    return f"{pg_url.split('?', 1)[0]}?schema=bench_{uuid.uuid4().hex[:8]}"


def _drop(url: str) -> None:
    from ledger.store import DatabaseURL

    db = DatabaseURL.parse(url)
    if db.backend == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            try:
                os.remove(db.path + suffix)
            except FileNotFoundError:
                pass
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(db.schema)))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _scan_decode(app: Any) -> tuple[int, float]:
    t = time.perf_counter()
    n, start = 0, 0
    while True:
        notes = app.recorder.select_notifications(start=start, limit=500, inclusive_of_start=False)
        if not notes:
            break
        for note in notes:
            app.mapper.to_domain_event(note)
        n += len(notes)
        start = notes[-1].id
    return n, time.perf_counter() - t


# -- child measurements (each in its own process) ------------------------------------------------------

def child_generate(url: str, events: int) -> dict[str, Any]:
    from commands.workload import generate
    from ledger.store import open_app

    app = open_app(url)
    t = time.perf_counter()
    recorded = generate(app, events)
    app.close()
    return {"events": recorded, "write_s": round(time.perf_counter() - t, 2)}


def child_rebuild(url: str, events: int) -> dict[str, Any]:
    """Rebuild the views of a ledger recorded by ``child_generate`` (so peak RSS is the rebuild's)."""
    from ledger.store import open_app
    from projections import open_backend, rebuild
    from projections.chats import chat_projections

    app = open_app(url)
    recorded = app.head()
    rss_before = _peak_rss_mb()
    backend = open_backend(url)
    per_view = {}
    total_s = scan_total = 0.0
    # The machine is shared and noisy: the baseline is measured right before each view, and each
    # figure is the better of two runs.
    for p in chat_projections(app):
        scans, builds = [], []
        for _ in range(2):
            n, scan_s = _scan_decode(app)
            scans.append(scan_s)
            t = time.perf_counter()
            result = rebuild(app, p, backend, batch_size=500)
            builds.append(time.perf_counter() - t)
        dt, scan_s = min(builds), min(scans)
        total_s += dt
        scan_total += scan_s
        per_view[p.name] = {"seconds": round(dt, 3), "events_per_s": round(result.events / dt),
                            "raw_events_per_s": round(n / scan_s), "ratio": round(scan_s / dt, 3),
                            "events": result.events}
    backend.close()
    app.close()
    views = len(per_view)
    raw = views * n / scan_total
    return {
        "events": recorded, "raw_scan_decode_events_per_s": round(raw),
        "views": per_view,
        "rebuild_events_per_s_per_view": round(views * n / total_s),
        "ratio_per_view": round((views * n / total_s) / raw, 3),
        "peak_rss_mb_before_rebuild": round(rss_before, 1), "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


def child_replay(url: str, events: int) -> dict[str, Any]:
    from commands.workload import ChatScript, setup_catalogs
    from ledger.store import open_app

    app = open_app(url)
    script = ChatScript(__import__("random").Random(11), datetime(2026, 1, 1, tzinfo=timezone.utc), setup_catalogs(app))
    while script.chat is None or script.chat.version < events:
        script.step()
        if script.chat is not None and len(script.chat.pending_events) >= 1000:
            app.save(script.chat)
    app.save(script.chat)
    chat_id = script.chat.id
    decode, replay = [], []
    for _ in range(5):
        t = time.perf_counter()
        evs = list(app.events.get(chat_id))
        decode.append(time.perf_counter() - t)
        t = time.perf_counter()
        agg = app.load(chat_id)
        replay.append(time.perf_counter() - t)
        assert agg.version == len(evs)
    n = len(evs)
    app.close()
    return {"events": n, "decode_events_per_s": round(n / min(decode)), "replay_events_per_s": round(n / min(replay)),
            "ratio": round(min(decode) / min(replay), 3)}


def _in_child(kind: str, url: str, events: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "commands.bench", "--child", kind, url, str(events)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise click.ClickException(f"bench {kind} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_bench(backends: list[str], pg_url: str, rebuild_events: int, small_events: int, replay_events: int,
              only: set[str]) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "started_at": datetime.now(timezone.utc).isoformat(), "settings": {
            "rebuild_events": rebuild_events, "small_events": small_events, "replay_events": replay_events},
        "backends": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            r: dict[str, Any] = {}
            if "replay" in only:
                url = _fresh_url(backend, pg_url, tmp)
                try:
                    r["replay"] = _in_child("replay", url, replay_events)
                finally:
                    _drop(url)
            if "rebuild" in only:
                for label, n in (("small", small_events), ("large", rebuild_events)):
                    url = _fresh_url(backend, pg_url, tmp)
                    try:
                        written = _in_child("generate", url, n)
                        r[f"rebuild_{label}"] = {**_in_child("rebuild", url, n), "write_s": written["write_s"]}
                    finally:
                        _drop(url)
            results["backends"][backend] = r
    return results


def print_table(results: dict[str, Any]) -> None:
    click.echo(f"{'backend':<9} {'measure':<34} {'figure':>16} {'baseline':>16} {'ratio':>7} {'target':>7}")
    for backend, r in results["backends"].items():
        if "replay" in r:
            x = r["replay"]
            click.echo(f"{backend:<9} {'replay 10k-event chat (ev/s)':<34} {x['replay_events_per_s']:>16,} "
                       f"{x['decode_events_per_s']:>16,} {x['ratio']:>7.2f} {'>=0.8':>7}")
        for label in ("small", "large"):
            x = r.get(f"rebuild_{label}")
            if x:
                click.echo(f"{backend:<9} {'rebuild views, ' + format(x['events'], ',') + ' ev (ev/s/view)':<34} "
                           f"{x['rebuild_events_per_s_per_view']:>16,} {x['raw_scan_decode_events_per_s']:>16,} "
                           f"{x['ratio_per_view']:>7.2f} {'>=0.5':>7}")
        sizes = [r[k] for k in ("rebuild_small", "rebuild_large") if k in r]
        if len(sizes) == 2:
            click.echo(f"{backend:<9} {'peak RSS of a rebuild (MB)':<34} "
                       f"{sizes[0]['events']:>9,} ev: {sizes[0]['peak_rss_mb']:>5.0f}   "
                       f"{sizes[1]['events']:>9,} ev: {sizes[1]['peak_rss_mb']:>5.0f}")


@click.command("bench")
@click.option("--backend", "backends", multiple=True, type=click.Choice(["sqlite", "postgres"]),
              help="Default: both.")
@click.option("--pg", "pg_url", default=lambda: os.environ.get("CHAT_LEDGER_BENCH_PG", PG_DEFAULT), show_default="local")
@click.option("--events", "rebuild_events", type=int, default=200_000, show_default=True, help="Rebuild size.")
@click.option("--small-events", type=int, default=100_000, show_default=True, help="Second rebuild size (memory).")
@click.option("--replay-events", type=int, default=10_000, show_default=True)
@click.option("--only", multiple=True, type=click.Choice(["replay", "rebuild"]), help="Default: all.")
@click.option("--out", "out", type=click.Path(dir_okay=False), default="bench-results.json", show_default=True)
def bench(backends: tuple[str, ...], pg_url: str, rebuild_events: int, small_events: int, replay_events: int,
          only: tuple[str, ...], out: str) -> None:
    """Measure replay and projection rebuild speed against same-run baselines; print a table, write JSON."""
    results = run_bench(list(backends) or ["sqlite", "postgres"], pg_url, rebuild_events, small_events,
                        replay_events, set(only) or {"replay", "rebuild"})
    print_table(results)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    click.echo(f"\nwrote {out}")


def _register() -> None:
    from commands.cli import main

    main.add_command(bench)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        kind, url, events = sys.argv[2], sys.argv[3], int(sys.argv[4])
        fn = {"rebuild": child_rebuild, "generate": child_generate, "replay": child_replay}[kind]
        print(json.dumps(fn(url, events)))
    else:
        bench()
