"""Benchmark child of the evidence (issue 27, point 7; ``chat-ledger bench --only evidence``, run by
``commands.tools.bench_children``): what the Merkle tree and its checkpoints cost.

* **command throughput with the tree**: the same commands through the handler into three ledgers, chunk by chunk,
  each arm first in turn: two with a thread publishing a checkpoint every ``PERIODS`` seconds while their commands
  run (as ``serve --checkpoint-key`` does, 60 and 300 times more often than its default), one without;
* **rebuild unaffected**: a ledger's views rebuilt before its tree was built and after (best of 2 each);
* **checkpoints and proofs by log size** (10,000, 100,000 and with ``--million`` 1,000,000 events): the log's scan,
  the first checkpoint (the tree built from nothing), the next one after 1,000 more events (the tree kept
  current), inclusion and consistency proofs (median of 100, and their length) and ``events verify
  --checkpoint``'s recomputation."""

from __future__ import annotations

import random
import statistics
import threading
import time
from typing import Any

from commands.tools.bench_kit import _drop, _scan_decode, _sibling
from commands.tools.bench_writes import _workload_commands

#: seconds between the checkpoints of the publishing arms (``serve``'s default: 60)
PERIODS = (1.0, 0.2)


def child_evidence(url: str, commands: int, *sizes: int, rounds: int = 9) -> dict[str, Any]:
    """``sizes``: the log sizes measured (default 10,000 and 100,000)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from commands.evidence import publish_checkpoint
    from commands.handler import execute
    from commands.tools.workload import setup_catalogs
    from ledger.store import open_app

    key = Ed25519PrivateKey.generate()
    cmds = _workload_commands(commands)
    arms = {"none": None, **{f"every {p:g} s": p for p in PERIODS}}
    urls = {arm: _sibling(url, f"arm{i}") if i else url for i, arm in enumerate(arms)}
    apps = {arm: open_app(u) for arm, u in urls.items()}
    for app in apps.values():
        setup_catalogs(app)
    stop, active = threading.Event(), {arm: threading.Event() for arm in arms}
    published = dict.fromkeys(arms, 0)

    def publishing(arm: str, period: float) -> None:  # only while its arm runs commands
        while not stop.wait(period):
            if active[arm].is_set():
                published[arm] += publish_checkpoint(apps[arm], key) is not None

    threads = [threading.Thread(target=publishing, args=(arm, p), daemon=True) for arm, p in arms.items() if p]
    for t in threads:
        t.start()
    spent = dict.fromkeys(arms, 0.0)
    size, names = max(1, len(cmds) // rounds), list(arms)
    for k, i in enumerate(range(0, len(cmds), size)):
        for arm in names[k % len(names):] + names[:k % len(names)]:  # each arm first, second, third in turn
            active[arm].set()
            t = time.perf_counter()
            for c in cmds[i:i + size]:
                execute(apps[arm], c)
            spent[arm] += time.perf_counter() - t
            active[arm].clear()
    stop.set()
    for t in threads:
        t.join()
    out: dict[str, Any] = {
        "commands": len(cmds), "checkpoints_published": published,
        "commands_per_s": {k: round(len(cmds) / v) for k, v in spent.items()},
        "command_throughput_ratio": {k: round(spent["none"] / v, 3) for k, v in spent.items() if k != "none"}}
    for app in apps.values():
        app.close()
    for u in list(urls.values())[1:]:
        _drop(u)
    out["sizes"] = {}
    for n in sizes or (10_000, 100_000):
        sized = _sibling(url, f"ev{n}")
        try:
            out["sizes"][str(n)] = _by_size(sized, n, key, rebuild=n <= 100_000)
        finally:
            _drop(sized)
    return out


def _rebuild_s(app: Any, url: str) -> float:
    """The chat views of ``app`` rebuilt: the best of 2, in seconds."""
    from projections import open_backend, rebuild
    from projections.chats import chat_projections

    backend = open_backend(url)
    try:
        best = float("inf")
        for _ in range(2):
            t = time.perf_counter()
            rebuild(app, chat_projections(app)[0], backend, batch_size=500)
            best = min(best, time.perf_counter() - t)
        return best
    finally:
        backend.close()


def _by_size(url: str, events: int, key: Any, rebuild: bool) -> dict[str, Any]:
    from commands.evidence import _signed_now, check_checkpoint, consistency_at, inclusion_at
    from commands.tools.workload import generate
    from ledger.evidence.tree import StoredTree
    from ledger.store import open_app

    app = open_app(url)
    try:
        t = time.perf_counter()
        generate(app, events, interleave=300)
        write_s = time.perf_counter() - t
        scanned, scan_s = _scan_decode(app)
        before = _rebuild_s(app, url) if rebuild else None  # the views rebuilt without a tree, then with one
        t = time.perf_counter()
        first = _signed_now(app, key)
        first_s = time.perf_counter() - t
        after = _rebuild_s(app, url) if rebuild else None
        generate(app, 1_000, seed=11, interleave=10)
        t = time.perf_counter()
        second = _signed_now(app, key)
        next_s = time.perf_counter() - t
        size = second.log_size
        tree = StoredTree(app)
        rng = random.Random(5)
        leaves = list(tree.leaves(size))
        picks = [leaves[rng.randrange(size)][1] for _ in range(100)]
        located = [_stream_version(app, nid) for nid in picks]
        inclusion, nodes = [], 0
        for stream, version in located:
            t = time.perf_counter()
            doc = inclusion_at(app, stream, version, size)
            inclusion.append(time.perf_counter() - t)
            nodes = max(nodes, len(doc["audit_path"]))
        consistency, cnodes = [], 0
        for _ in range(100):
            old = rng.randrange(1, size)
            t = time.perf_counter()
            doc = consistency_at(app, old, size)
            consistency.append(time.perf_counter() - t)
            cnodes = max(cnodes, len(doc["proof"]))
        t = time.perf_counter()
        anomalies = check_checkpoint(app, second, key.public_key())
        verify_s = time.perf_counter() - t
        assert anomalies == [], anomalies
        return {"events": size, "write_s": round(write_s, 1), "scan_decode_s": round(scan_s, 3),
                "scanned": scanned, "first_checkpoint_s": round(first_s, 3),
                "first_checkpoint_events": first.log_size, "next_checkpoint_s": round(next_s, 4),
                "next_checkpoint_new_events": size - first.log_size,
                "inclusion_ms_median": round(statistics.median(inclusion) * 1000, 2), "inclusion_nodes_max": nodes,
                "consistency_ms_median": round(statistics.median(consistency) * 1000, 2),
                "consistency_nodes_max": cnodes, "verify_against_checkpoint_s": round(verify_s, 3),
                **({"rebuild_s": {"without_tree": round(before, 3), "with_tree": round(after, 3)},
                    "rebuild_ratio": round(before / after, 3)} if before is not None and after else {})}
    finally:
        app.close()


def _stream_version(app: Any, notification_id: int) -> tuple[Any, int]:
    from uuid import UUID

    (n,) = app.recorder.select_notifications(start=notification_id, limit=1)
    stream = n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id))
    return stream, n.originator_version
