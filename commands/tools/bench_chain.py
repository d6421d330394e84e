"""Benchmark child of hash chains: the same work with and without chains, interleaved (``chat-ledger bench``,
run by ``commands.tools.bench_children``)."""

from __future__ import annotations

import time
from typing import Any

from commands.tools.bench_kit import _drop, _sibling
from commands.tools.bench_writes import _workload_commands


def _unhashed(app: Any) -> Any:
    """This open ledger without hash chains, as one made before them: the column dropped, the recorder
    told (it then inserts with the library's statements)."""
    recorder = app.recorder
    with recorder.datastore.transaction(commit=True) as c:
        if hasattr(recorder, "_use_chain"):
            c.execute(f'ALTER TABLE "{recorder.datastore.schema}"."{recorder.events_table_name}" '
                      "DROP COLUMN IF EXISTS chain_hash")
            recorder._use_chain(False)
        else:
            c.execute(f"ALTER TABLE {recorder.events_table_name} DROP COLUMN chain_hash")
            recorder.chain_column = False
    return app


def child_chain(url: str, commands: int, rounds: int = 8) -> dict[str, Any]:
    """The cost of hash chains, interleaved in one process so that a noisy machine hits both arms alike:
    the same commands through the handler into a ledger with chains and one without, chunk by chunk in
    ABBA order; then the same events generated into both and their views rebuilt alternately (best of 3)."""
    from commands.handler import execute
    from commands.tools.workload import generate, setup_catalogs
    from ledger.store import open_app
    from projections import open_backend, rebuild
    from projections.chats import chat_projections

    cmds = _workload_commands(commands)
    urls = {"hashed": url, "unhashed": _sibling(url, "nochain")}
    apps = {"hashed": open_app(urls["hashed"]), "unhashed": _unhashed(open_app(urls["unhashed"]))}
    spent = {"hashed": 0.0, "unhashed": 0.0}
    for app in apps.values():
        setup_catalogs(app)
    size = max(1, len(cmds) // rounds)
    for i in range(0, len(cmds), size):
        order = ("hashed", "unhashed") if (i // size) % 2 == 0 else ("unhashed", "hashed")
        for arm in order:
            t = time.perf_counter()
            for c in cmds[i:i + size]:
                execute(apps[arm], c)
            spent[arm] += time.perf_counter() - t
    out: dict[str, Any] = {"commands": len(cmds), "rounds": rounds,
                           "commands_per_s": {k: round(len(cmds) / v) for k, v in spent.items()},
                           "command_throughput_ratio": round(spent["unhashed"] / spent["hashed"], 3)}
    for app in apps.values():
        app.close()
    # rebuild: the same events in two fresh ledgers, with and without chains
    events = commands * 5
    builds: dict[str, list[float]] = {"hashed": [], "unhashed": []}
    written: dict[str, float] = {}
    rurls = {"hashed": _sibling(url, "rh"), "unhashed": _sibling(url, "ru")}
    rapps = {"hashed": open_app(rurls["hashed"]), "unhashed": _unhashed(open_app(rurls["unhashed"]))}
    recorded = 0
    for arm, app in rapps.items():
        t = time.perf_counter()
        recorded = generate(app, events)
        written[arm] = time.perf_counter() - t
    backends = {arm: open_backend(u) for arm, u in rurls.items()}
    projection = {arm: chat_projections(app)[0] for arm, app in rapps.items()}
    for k in range(3):
        for arm in (("hashed", "unhashed") if k % 2 == 0 else ("unhashed", "hashed")):
            t = time.perf_counter()
            rebuild(rapps[arm], projection[arm], backends[arm], batch_size=500)
            builds[arm].append(time.perf_counter() - t)
    for arm in rapps:
        backends[arm].close()
        rapps[arm].close()
    out.update({"rebuild_events": recorded,
                "rebuild_s": {k: round(min(v), 3) for k, v in builds.items()},
                "rebuild_ratio": round(min(builds["unhashed"]) / min(builds["hashed"]), 3),
                "generate_s": {k: round(v, 2) for k, v in written.items()},
                "generate_ratio": round(written["unhashed"] / written["hashed"], 3)})
    for u in (urls["unhashed"], *rurls.values()):
        _drop(u)
    return out
