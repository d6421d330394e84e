"""Benchmark child of the evidence (issue 27, point 7; ``chat-ledger bench --only evidence``, run by
``commands.tools.bench_children``): what the Merkle tree and its checkpoints cost.

* **command throughput with the tree**: the same commands through the handler into two ledgers, chunk by chunk in
  ABBA order, one of them with a thread publishing a checkpoint every ``PERIOD`` seconds (as ``serve
  --checkpoint-key`` does, 300 times more often than its default), the other without;
* **rebuild unaffected**: the views of both rebuilt alternately (best of 3);
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

#: seconds between the checkpoints of the "tree" arm
PERIOD = 0.2


def child_evidence(url: str, commands: int, *sizes: int, rounds: int = 8) -> dict[str, Any]:
    """``sizes``: the log sizes measured (default 10,000 and 100,000)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from commands.evidence import publish_checkpoint
    from commands.handler import execute
    from commands.tools.workload import setup_catalogs
    from ledger.store import open_app

    key = Ed25519PrivateKey.generate()
    cmds = _workload_commands(commands)
    urls = {"tree": url, "none": _sibling(url, "notree")}
    apps = {arm: open_app(u) for arm, u in urls.items()}
    for app in apps.values():
        setup_catalogs(app)
    stop, published = threading.Event(), [0]

    def publishing() -> None:
        while not stop.wait(PERIOD):
            published[0] += publish_checkpoint(apps["tree"], key) is not None

    spent = {"tree": 0.0, "none": 0.0}
    publisher = threading.Thread(target=publishing, daemon=True)
    publisher.start()
    size = max(1, len(cmds) // rounds)
    for i in range(0, len(cmds), size):
        for arm in (("tree", "none") if (i // size) % 2 == 0 else ("none", "tree")):
            t = time.perf_counter()
            for c in cmds[i:i + size]:
                execute(apps[arm], c)
            spent[arm] += time.perf_counter() - t
    stop.set()
    publisher.join()
    out: dict[str, Any] = {
        "commands": len(cmds), "checkpoint_period_s": PERIOD, "checkpoints_published": published[0],
        "commands_per_s": {k: round(len(cmds) / v) for k, v in spent.items()},
        "command_throughput_ratio": round(spent["none"] / spent["tree"], 3)}
    out["rebuild"] = _rebuilds(apps, urls)
    for app in apps.values():
        app.close()
    out["sizes"] = {}
    for n in sizes or (10_000, 100_000):
        sized = _sibling(url, f"ev{n}")
        try:
            out["sizes"][str(n)] = _by_size(sized, n, key)
        finally:
            _drop(sized)
    return out


def _rebuilds(apps: dict[str, Any], urls: dict[str, str]) -> dict[str, Any]:
    from projections import open_backend, rebuild
    from projections.chats import chat_projections

    backends = {arm: open_backend(u) for arm, u in urls.items()}
    builds: dict[str, list[float]] = {arm: [] for arm in apps}
    for k in range(3):
        for arm in (("tree", "none") if k % 2 == 0 else ("none", "tree")):
            t = time.perf_counter()
            rebuild(apps[arm], chat_projections(apps[arm])[0], backends[arm], batch_size=500)
            builds[arm].append(time.perf_counter() - t)
    for b in backends.values():
        b.close()
    return {"events": apps["tree"].head(), "rebuild_s": {k: round(min(v), 3) for k, v in builds.items()},
            "ratio": round(min(builds["none"]) / min(builds["tree"]), 3)}


def _by_size(url: str, events: int, key: Any) -> dict[str, Any]:
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
        t = time.perf_counter()
        first = _signed_now(app, key)
        first_s = time.perf_counter() - t
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
                "consistency_nodes_max": cnodes, "verify_against_checkpoint_s": round(verify_s, 3)}
    finally:
        app.close()


def _stream_version(app: Any, notification_id: int) -> tuple[Any, int]:
    from uuid import UUID

    (n,) = app.recorder.select_notifications(start=notification_id, limit=1)
    stream = n.originator_id if isinstance(n.originator_id, UUID) else UUID(str(n.originator_id))
    return stream, n.originator_version
