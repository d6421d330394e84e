"""What the benchmark children share: fresh and sibling database URLs, dropping them, peak RSS, a log scan,
percentiles."""

from __future__ import annotations

import os
import resource
import time
import uuid
from typing import Any


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


def _scan_decode(app: Any, topics: Any = ()) -> tuple[int, float]:
    """Scan and decode the log (of ``topics``, default every event) in pages of 500: (events, seconds)."""
    t = time.perf_counter()
    n, start = 0, 0
    while True:
        notes = app.recorder.select_notifications(start=start, limit=500, topics=topics, inclusive_of_start=False)
        if not notes:
            break
        for note in notes:
            app.mapper.to_domain_event(note)
        n += len(notes)
        start = notes[-1].id
    return n, time.perf_counter() - t


def _sibling(url: str, tag: str) -> str:
    if url.startswith("sqlite"):
        return url.replace(".db", f"-{tag}.db")
    return f"{url}_{tag}"


def _percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000  # noqa: E731
    return {"p50_ms": round(pick(0.50), 3), "p99_ms": round(pick(0.99), 3), "samples": len(s)}
