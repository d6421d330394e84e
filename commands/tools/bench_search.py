"""``chat-ledger bench --only search``: the search view on a generated ledger, in one process of its own.

``python -m commands.tools.bench_search URL EVENTS`` records EVENTS events (``workload.generate``), then
measures, in the same run:

* the search view's rebuild against a scan-and-decode of the same log (the ratio the issue asks ≥ 0.5), with
  as many workers as CPUs (``projections rebuild``'s default) and with one;
* queries through the API of a real ``serve`` whose views are caught up, as a deployment's are (an admin token of
  one organization, so the scope applies):
  rare and common single words, rare and common phrases, each asked 10 times in rotation after one warm-up
  round; p50/p95 per kind and over all.

Prints one JSON line."""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from typing import Any


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 2)


def queries(seed: int = 3) -> dict[str, list[str]]:
    """What people look for in the workload's chats (``commands.tools.workload``): a task number (rare), a
    word of most assistant messages (common), a file path (a rare phrase), a sentence (a common phrase)."""
    rng = random.Random(seed)
    return {
        "rare_word": [str(rng.randint(1, 10**6)) for _ in range(4)] + ["overloaded"],
        "common_word": ["answer", "working", "question", "execute", "read"],
        "rare_phrase": [f'"src/file_{rng.randint(1, 99)}.py"' for _ in range(5)],
        "common_phrase": ['"here is the answer"', '"next question"', '"please help"', '"and also this"',
                          '"provider overloaded"'],
    }


def child(url: str, events: int) -> dict[str, Any]:
    import httpx

    from commands.tokens import issue_token
    from commands.tools.bench_kit import _scan_decode
    from commands.tools.bench_service import _serve
    from commands.tools.workload import ORGS, generate
    from commands.views import catch_up_views
    from ledger.store import open_app
    from projections import open_backend, rebuild
    from projections.search import SearchView

    app = open_app(url)
    t = time.perf_counter()
    recorded = generate(app, events)
    write_s = time.perf_counter() - t
    backend = open_backend(url)
    catch_up_views(app, backend)  # (the server's views: caught up as in a deployment, not part of the figures)
    workers = os.cpu_count() or 1
    scans: list[float] = []
    builds: dict[int, list[float]] = {1: [], workers: []}
    for _ in range(2):  # the better of two: the machine is shared
        n, scan_s = _scan_decode(app)
        scans.append(scan_s)
        for w in builds:  # one worker, and as many as CPUs (``projections rebuild``'s default)
            t = time.perf_counter()
            rebuild(app, SearchView(app), backend, batch_size=500, workers=w)
            builds[w].append(time.perf_counter() - t)
    secret = issue_token(app, user=uuid.UUID(int=0xD001), org=ORGS[0], role="admin")["secret"]
    backend.close()
    app.close()
    proc, base = _serve(url)
    samples: dict[str, list[float]] = {}
    hits: dict[str, list[int]] = {}
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=120) as c:
            plan = queries()
            for kind, qs in plan.items():  # warm-up round (the server's views catch up on the first)
                for q in qs:
                    r = c.get("/v1/search", params={"q": q, "limit": 20})
                    r.raise_for_status()
            for _ in range(10):
                for kind, qs in plan.items():
                    for q in qs:
                        t = time.perf_counter()
                        r = c.get("/v1/search", params={"q": q, "limit": 20})
                        samples.setdefault(kind, []).append(time.perf_counter() - t)
                        r.raise_for_status()
                        hits.setdefault(kind, []).append(len(r.json()["hits"]))
    finally:
        proc.terminate()
        proc.wait(30)
    everything = [s for v in samples.values() for s in v]
    return {
        "events": recorded, "write_s": round(write_s, 1),
        "rebuild": {"seconds": round(min(builds[workers]), 2), "workers": workers,
                    "events_per_s": round(n / min(builds[workers])),
                    "scan_decode_events_per_s": round(n / min(scans)), "ratio": round(min(scans) / min(builds[workers]), 3),
                    "one_worker": {"seconds": round(min(builds[1]), 2), "ratio": round(min(scans) / min(builds[1]), 3)}},
        "queries": {kind: {"p50_ms": _pct(v, 0.5), "p95_ms": _pct(v, 0.95), "mean_hits": round(sum(hits[kind]) / len(v), 1)}
                    for kind, v in samples.items()},
        "p95_ms": _pct(everything, 0.95), "samples": len(everything),
    }


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]))))
