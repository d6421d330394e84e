"""The measurements of ``chat-ledger bench``, each run in a fresh process (so peak RSS is its own):
``python -m commands.tools.bench_children KIND URL N [EXTRA...]`` prints one JSON line.

The children of the log (generate, rebuild, replay, a long chat, a first command) are here; the others in
``bench_writes``, ``bench_views``, ``bench_chain`` and ``bench_service``; what they share in ``bench_kit``."""

from __future__ import annotations

import json
import sys
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from commands.tools.bench_kit import _peak_rss_mb, _scan_decode


# -- child measurements (each in its own process) ------------------------------------------------------

def child_generate(url: str, events: int, interleave: int = 1) -> dict[str, Any]:
    from commands.tools.workload import generate
    from ledger.store import open_app

    app = open_app(url)
    t = time.perf_counter()
    recorded = generate(app, events, interleave=interleave)
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
    from commands.tools.workload import ChatScript, setup_catalogs
    from ledger.store import open_app

    app = open_app(url)
    app.snapshotting_intervals = {}  # the replay of the whole chat is measured (``longchat``: from a snapshot)
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


def child_longchat(url: str, events: int) -> dict[str, Any]:
    """The first command on a chat of ``events`` events in a fresh process (which starts from the chat's
    latest snapshot, ``ledger.snapshots``) vs the first command on a new chat in a fresh process; each the
    better of 3 processes. Also the full replay of the long chat (what a load cost before snapshots)."""
    import subprocess

    from commands.tools.workload import ChatScript, setup_catalogs
    from ledger.base import fast_project
    from ledger.store import open_app

    app = open_app(url)
    facts = setup_catalogs(app)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    script = ChatScript(__import__("random").Random(11), start, facts)
    while script.chat is None or script.chat.version < events:
        script.step()
        if len(script.chat.pending_events) >= 200:  # saves of ~200 events: snapshots as commands take them
            app.save(script.chat)
    app.save(script.chat)
    small = ChatScript(__import__("random").Random(12), start, facts)
    small.step()
    app.save(small.chat)
    long_id, new_id = script.chat.id, small.chat.id
    t = time.perf_counter()
    replay = fast_project(None, app.events.get(long_id))
    replay_s = time.perf_counter() - t
    snapshot = app.repository._snapshot(long_id, None)
    app.close()

    def first(chat_id: uuid.UUID) -> float:
        out = subprocess.run([sys.executable, "-m", "commands.tools.bench_children", "firstcmd", url, "0",
                              str(chat_id.int)], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]

    longs, news = [], []
    for _ in range(3):
        longs.append(first(long_id))
        news.append(first(new_id))
    lo, ne = min(longs), min(news)
    return {"events": replay.version, "messages": len(replay.state.messages),
            "snapshot_version": snapshot.originator_version if snapshot else None,
            "first_command_long_ms": round(lo * 1000, 2), "first_command_new_ms": round(ne * 1000, 2),
            "ratio": round(lo / ne, 2), "full_replay_ms": round(replay_s * 1000, 1),
            "long_ms": [round(x * 1000, 2) for x in longs], "new_ms": [round(x * 1000, 2) for x in news]}


def child_firstcmd(url: str, _: int, chat_int: int) -> dict[str, Any]:
    """One command (a title change) on a chat in this fresh process: the seconds ``execute`` took."""
    from commands.handler import command_from_dict, execute
    from ledger.store import open_app

    app = open_app(url)
    cmd = command_from_dict({"type": "set_title", "chat_id": str(uuid.UUID(int=chat_int)), "title": "renamed"})
    t = time.perf_counter()
    execute(app, cmd)
    seconds = time.perf_counter() - t
    app.close()
    return {"seconds": seconds}


if __name__ == "__main__":
    kind, url, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
    from commands.tools.bench_chain import child_chain
    from commands.tools.bench_evidence import child_evidence
    from commands.tools.bench_privacy import child_privacy
    from commands.tools.bench_service import child_service
    from commands.tools.bench_views import child_views
    from commands.tools.bench_writepath import child_writepath
    from commands.tools.bench_writes import child_concurrent, child_throughput

    fn = {"rebuild": child_rebuild, "generate": child_generate, "replay": child_replay,
          "throughput": child_throughput, "concurrent": child_concurrent, "views": child_views,
          "service": child_service, "longchat": child_longchat, "firstcmd": child_firstcmd,
          "chain": child_chain, "writepath": child_writepath, "evidence": child_evidence,
          "privacy": child_privacy}[kind]
    print(json.dumps(fn(url, events, *map(int, sys.argv[4:]))))  # type: ignore[operator]
