"""Benchmark child of sealing people's data (issue 28, point 7; ``chat-ledger bench --only privacy``, run by
``commands.tools.bench_children``): the same commands through the handler into a ledger opened with a master key
(every personal value sealed: ``ledger.sealer``) and into one without, in 16 rounds of the same commands through
both in ABBA order (the ratio: the rounds' median); then the same generated events in two fresh ledgers, scanned and
decoded (best of 4) and every projection rebuilt, as ``projections rebuild`` does by default (best of 10 for the
whole and for each projection: the chat views alone, the lightest work per event and so the most of it spent
decrypting, are reported beside the whole), the two ledgers in turns (ABBA); then the erasure of a user who owns
1,000 chats, among as many of others (``_erasure``)."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from commands.tools.bench_kit import _drop, _scan_decode, _sibling
from commands.tools.bench_writes import _workload_commands


def _open(url: str, master: str | None) -> Any:
    from ledger.store import open_app
    from ledger.subjectkeys import MASTER_ENV

    if master:
        os.environ[MASTER_ENV] = master
    try:
        return open_app(url)
    finally:
        os.environ.pop(MASTER_ENV, None)


def child_privacy(url: str, commands: int, events: int = 30_000, rounds: int = 16,
                  rebuilds: int = 5) -> dict[str, Any]:
    from commands.handler import execute
    from commands.tools.workload import generate, setup_catalogs
    from commands.views import all_projections
    from ledger.subjectkeys import new_master_key
    from projections import open_backend, rebuild

    master = new_master_key()
    urls = {"plain": url, "sealed": _sibling(url, "sealed")}
    apps = {arm: _open(u, master if arm == "sealed" else None) for arm, u in urls.items()}
    for app in apps.values():
        setup_catalogs(app)
    cmds = _workload_commands(commands)
    chunks: dict[str, list[float]] = {arm: [] for arm in apps}
    size = max(1, len(cmds) // rounds)
    for k, i in enumerate(range(0, len(cmds), size)):
        for arm in (("plain", "sealed") if k % 2 == 0 else ("sealed", "plain")):
            t = time.perf_counter()
            for c in cmds[i:i + size]:
                execute(apps[arm], c)
            chunks[arm].append(time.perf_counter() - t)
    for app in apps.values():
        app.close()
    spent = {arm: sum(times) for arm, times in chunks.items()}
    # The ratio: the median of the rounds' (the same commands, through the two arms one after the other), so a
    # moment when the machine is busy elsewhere moves one round, not the figure; the totals' ratio beside it
    out: dict[str, Any] = {"commands": len(cmds), "rounds": len(chunks["plain"]),
                           "commands_per_s": {k: round(len(cmds) / v) for k, v in spent.items()},
                           "command_throughput_ratio": round(statistics.median(
                               p / s for p, s in zip(chunks["plain"], chunks["sealed"])), 3),
                           "command_total_ratio": round(spent["plain"] / spent["sealed"], 3)}
    gen = {"plain": _sibling(url, "gp"), "sealed": _sibling(url, "gs")}
    measured: dict[str, dict[str, float]] = {}
    opened: dict[str, Any] = {}
    try:
        for arm, u in gen.items():
            opened[arm] = (_open(u, master if arm == "sealed" else None), open_backend(u))
            generate(opened[arm][0], events, interleave=50)
        # the two ledgers scanned (best of 4), then rebuilt (best of 10), in turns (ABBA): a run of a third of a
        # second is at the mercy of whatever else the machine does for a moment, which only ever slows it
        times: dict[str, dict[str, list[float]]] = {arm: {"scan": [], "rebuild": []} for arm in gen}
        each: dict[str, dict[str, list[float]]] = {arm: {} for arm in gen}  # arm -> projection -> its rebuilds
        for k in range(2 * rebuilds):
            for arm in (("plain", "sealed") if k % 2 == 0 else ("sealed", "plain")):
                app, backend = opened[arm]
                if k < 4:
                    measured.setdefault(arm, {})["events"], scan_s = _scan_decode(app)
                    times[arm]["scan"].append(scan_s)
                whole = 0.0
                for projection in all_projections(app):
                    t = time.perf_counter()
                    rebuild(app, projection, backend, batch_size=500)
                    spent = time.perf_counter() - t
                    each[arm].setdefault(projection.name, []).append(spent)
                    whole += spent
                times[arm]["rebuild"].append(whole)
        for arm, (app, _) in opened.items():
            stored = sum(len(bytes(n.state)) for n in app.recorder.select_notifications(start=1, limit=events * 2))
            measured[arm].update({"scan_decode_s": round(min(times[arm]["scan"]), 3),
                                  "rebuild_s": round(min(times[arm]["rebuild"]), 3), "stored_bytes": stored,
                                  "rebuilds": len(times[arm]["rebuild"]),
                                  "rebuild_each_s": {n: round(min(v), 3) for n, v in each[arm].items()}})
    finally:
        for app, backend in opened.values():
            backend.close()
            app.close()
        for u in gen.values():
            _drop(u)
        _drop(urls["sealed"])
    out.update({"ledgers": measured,
                "scan_decode_ratio": round(measured["plain"]["scan_decode_s"] / measured["sealed"]["scan_decode_s"], 3),
                "rebuild_ratio": round(measured["plain"]["rebuild_s"] / measured["sealed"]["rebuild_s"], 3),
                "rebuild_each_ratio": {n: round(min(each["plain"][n]) / min(each["sealed"][n]), 3)
                                       for n in each["plain"]},
                "stored_size_ratio": round(measured["sealed"]["stored_bytes"] / measured["plain"]["stored_bytes"], 3)})
    out["erasure"] = _erasure(_sibling(url, "erase"), master)
    return out


def _erasure(url: str, master: str, chats: int = 1000) -> dict[str, Any]:
    """A sealed ledger where one user owns ``chats`` chats (a prompt, an answer, a finished turn each) and others
    as many; the views caught up; then ``erase_subject`` of that user timed whole — its keys destroyed, the
    erasure recorded, the views of its chats rewritten, the views' files scrubbed — beside the time the same
    chats took to record (the ratio: recording / erasing)."""
    from commands.handler import command_from_dict, execute
    from commands.tools.workload import ORGS, USERS, setup_catalogs
    from commands.views import catch_up_views
    from projections import open_backend

    def run(app: Any, **command: Any) -> dict[str, Any]:
        return execute(app, command_from_dict(command))

    def chat(app: Any, owner: Any, i: int) -> None:
        c = run(app, type="create_chat", organization_id=str(ORGS[0]), owner_id=str(owner),
                message={"role": "user", "parts": [{"type": "text", "text": f"please look at item {i} of mine"}]})
        run(app, type="commit_step", chat_id=c["chat_id"], messages=[{"role": "assistant", "parts": [
            {"type": "text", "text": f"item {i} looks fine to me"}]}])
        run(app, type="finish_turn", chat_id=c["chat_id"])

    app = _open(url, master)
    try:
        setup_catalogs(app)
        subject, others = USERS[0], USERS[1:]
        t = time.perf_counter()
        for i in range(chats):
            chat(app, subject, i)
        record_s = time.perf_counter() - t
        for i in range(chats):
            chat(app, others[i % len(others)], i)
        backend = open_backend(url)
        catch_up_views(app, backend)
        backend.close()
        t = time.perf_counter()
        result = run(app, type="erase_subject", user_id=str(subject), reason="bench")
        erase_s = time.perf_counter() - t
    finally:
        app.close()
        _drop(url)
    return {"chats": chats, "other_chats": chats, "keys_destroyed": result["keys_destroyed"],
            "streams": len(result["streams"]), "erase_s": round(erase_s, 3), "record_s": round(record_s, 3),
            "record_vs_erase_ratio": round(record_s / erase_s, 2)}
