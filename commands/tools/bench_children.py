"""The measurements of ``chat-ledger bench``, each run in a fresh process (so peak RSS is its own):
``python -m commands.tools.bench_children KIND URL N [EXTRA...]`` prints one JSON line."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import uuid
from datetime import datetime, timezone
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


# -- command throughput, concurrent writers, view queries -------------------------------------------------

def chat_script_commands(rng: Any, org: Any, owner: Any, chat_id: Any) -> list[dict[str, Any]]:
    """The commands of one small simulated chat (a worker's turn with a local tool call, a follow-up
    turn), as JSON objects for the real handler. Every command is valid in the state the previous one
    leaves, so a single writer applies them all."""
    cid = str(chat_id)
    call = f"call_{rng.randint(1, 10**9)}"
    tool = rng.choice(["read", "execute"])
    return [
        {"type": "create_chat", "organization_id": str(org), "owner_id": str(owner), "chat_id": cid,
         "text": f"Task {rng.randint(1, 10**6)}: please help", "dynamic_tools": ["ask_user"]},
        {"type": "commit_step", "chat_id": cid, "messages": [{"role": "assistant", "parts": [
            {"type": "text", "text": "Working on it."},
            {"type": "tool-call", "tool_call_id": call, "tool_name": tool, "args": {"path": f"src/f{rng.randint(1, 99)}.py"}}],
            "usage": {"input_tokens": rng.randint(1000, 90000), "output_tokens": 200}}]},
        {"type": "commit_step", "chat_id": cid, "messages": [{"role": "tool", "parts": [
            {"type": "tool-result", "tool_call_id": call, "tool_name": tool, "result": {"ok": True, "lines": rng.randint(1, 200)}}]}]},
        {"type": "commit_step", "chat_id": cid, "messages": [{"role": "assistant", "parts": [
            {"type": "text", "text": "Here is the answer."}], "usage": {"input_tokens": rng.randint(1000, 90000), "output_tokens": 300}}]},
        {"type": "finish_turn", "chat_id": cid},
        {"type": "send_message", "chat_id": cid, "text": "next question"},
        {"type": "commit_step", "chat_id": cid, "messages": [{"role": "assistant", "parts": [
            {"type": "text", "text": "Done."}]}]},
        {"type": "finish_turn", "chat_id": cid},
    ]


def _workload_commands(n: int, seed: int = 5) -> list[Any]:
    import random

    from commands.handler import command_from_dict
    from commands.tools.workload import ORGS, USERS

    rng = random.Random(seed)
    cmds: list[Any] = []
    while len(cmds) < n:
        chat_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        cmds.extend(command_from_dict(c) for c in
                    chat_script_commands(rng, rng.choice(ORGS), rng.choice(USERS), chat_id))
    return cmds[:n]


def child_throughput(url: str, commands: int) -> dict[str, Any]:
    """Commands through the real handler vs bare ``app.save`` of the events the handler recorded (the same
    events, one save per command, into a fresh database with the same catalogs). Both best of 2."""
    from commands.handler import execute
    from commands.tools.workload import setup_catalogs
    from ledger.store import open_app

    cmds = _workload_commands(commands)  # decoded outside the timing: the handler's own work is measured
    handler_s, save_s, events = [], [], 0
    for attempt in range(2):
        url_h = url if attempt == 0 else _sibling(url, "h2")
        app = open_app(url_h)
        setup_catalogs(app)
        start = app.head()
        ends: list[tuple[Any, int]] = []
        t = time.perf_counter()
        for c in cmds:
            r = execute(app, c)
            ends.append((r["chat_id"], r["version"]))
        handler_s.append(time.perf_counter() - t)
        recorded = [e for _, e in app.iter_events(start)]
        app.close()
        events = len(recorded)
        # the events of each command: its chat's events up to the version the command's result names
        by_chat: dict[Any, list[Any]] = {}
        for e in recorded:
            by_chat.setdefault(str(e.originator_id), []).append(e)
        groups, done = [], {}
        for chat_id, version in ends:
            chat_id = str(chat_id)
            lo = done.get(chat_id, 0)
            groups.append(by_chat[chat_id][lo:version])
            done[chat_id] = version
        assert sum(map(len, groups)) == events, "every recorded event belongs to exactly one command"
        url_s = _sibling(url, "s1" if attempt == 0 else "s2")
        base = open_app(url_s)
        setup_catalogs(base)
        t = time.perf_counter()
        for g in groups:
            base.save(*g)
        save_s.append(time.perf_counter() - t)
        base.close()
        for u in ((url_s,) if attempt == 0 else (url_h, url_s)):
            _drop(u)
    h, s = min(handler_s), min(save_s)
    return {"commands": len(cmds), "events": events, "handler_commands_per_s": round(len(cmds) / h),
            "handler_events_per_s": round(events / h), "bare_save_commands_per_s": round(len(cmds) / s),
            "bare_save_events_per_s": round(events / s), "overhead": round(h / s, 3),
            "handler_s": [round(x, 3) for x in handler_s], "bare_save_s": [round(x, 3) for x in save_s]}


def _sibling(url: str, tag: str) -> str:
    if url.startswith("sqlite"):
        return url.replace(".db", f"-{tag}.db")
    return f"{url}_{tag}"


def _writer(url: str, chat_ids: list[str], commands: int, seed: int, barrier: Any, out: Any) -> None:
    """One writer process: ``commands`` commands on ``chat_ids`` (chosen at random), alternating an
    assistant step and a title change (both allowed in R0 and leaving it there). Counts conflict retries."""
    import random

    from commands import uow
    from commands.handler import command_from_dict, execute
    from eventsourcing.persistence import IntegrityError
    from ledger.errors import LedgerError
    from ledger.store import open_app

    retries = [0]
    commit = uow.UnitOfWork.commit

    def counting_commit(self: Any) -> Any:
        try:
            return commit(self)
        except IntegrityError:
            retries[0] += 1
            raise

    uow.UnitOfWork.commit = counting_commit  # type: ignore[method-assign]
    rng = random.Random(seed)
    app = open_app(url)
    cmds = []
    for i in range(commands):
        cid = rng.choice(chat_ids)
        if i % 2:
            cmds.append(command_from_dict({"type": "set_title", "chat_id": cid, "title": f"t{seed}-{i}"}))
        else:
            cmds.append(command_from_dict({"type": "commit_step", "chat_id": cid, "messages": [
                {"role": "assistant", "parts": [{"type": "text", "text": f"step {seed}-{i}"}]}]}))
    ok, refused = 0, {}
    barrier.wait()
    t = time.perf_counter()
    for c in cmds:
        try:
            execute(app, c)
            ok += 1
        except LedgerError as e:
            refused[e.code] = refused.get(e.code, 0) + 1
    elapsed = time.perf_counter() - t
    app.close()
    out.put({"ok": ok, "refused": refused, "retries": retries[0], "seconds": elapsed})


def child_concurrent(url: str, commands: int, processes: int = 4) -> dict[str, Any]:
    """``processes`` writer processes, ``commands`` commands each: on distinct chats (10 per writer) and
    on contended chats (2 chats shared by every writer). Commands/s over the wall time, conflict retries."""
    import multiprocessing as mp

    from commands.handler import command_from_dict, execute
    from commands.tools.workload import ORGS, USERS, setup_catalogs
    from ledger.store import open_app

    app = open_app(url)
    setup_catalogs(app)

    def new_chat() -> str:
        return execute(app, command_from_dict({"type": "create_chat", "organization_id": str(ORGS[0]),
                                               "owner_id": str(USERS[0]), "text": "go"}))["chat_id"]

    plans = {"distinct": [[new_chat() for _ in range(10)] for _ in range(processes)],
             "contended": [[new_chat() for _ in range(2)]] * processes}
    head0 = app.head()
    app.close()
    ctx = mp.get_context("fork")
    out: dict[str, Any] = {"processes": processes, "commands_per_process": commands}
    for mode, plan in plans.items():
        app = open_app(url)
        head_before = app.head()
        app.close()
        barrier, q = ctx.Barrier(processes + 1), ctx.Queue()
        procs = [ctx.Process(target=_writer, args=(url, plan[i], commands, 100 * i + len(mode), barrier, q))
                 for i in range(processes)]
        for p in procs:
            p.start()
        barrier.wait()
        t = time.perf_counter()
        results = [q.get(timeout=600) for _ in procs]
        wall = time.perf_counter() - t
        for p in procs:
            p.join(timeout=60)
        ok = sum(r["ok"] for r in results)
        refused: dict[str, int] = {}
        for r in results:
            for k, v in r["refused"].items():
                refused[k] = refused.get(k, 0) + v
        app = open_app(url)
        # count the events (PostgreSQL notification ids have gaps where a conflicting insert rolled back)
        written = sum(1 for _ in app.iter_events(head_before))
        app.close()
        out[mode] = {"chats": len({c for chats in plan for c in chats}), "commands_ok": ok, "refused": refused,
                     "commands_per_s": round(ok / wall), "conflict_retries": sum(r["retries"] for r in results),
                     "retries_per_command": round(sum(r["retries"] for r in results) / max(ok, 1), 3),
                     "events_written": written, "wall_s": round(wall, 2)}
        assert written == ok, f"{mode}: {written} events for {ok} applied one-event commands"
    out["setup_events"] = head0
    return out


def _percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000  # noqa: E731
    return {"p50_ms": round(pick(0.50), 3), "p99_ms": round(pick(0.99), 3), "samples": len(s)}


def child_views(url: str, chats: int) -> dict[str, Any]:
    """``chats`` small chats (2-4 events each, written by the workload's pure core in big transactions),
    the chat_views projection caught up, then latencies of the view queries the CLI runs."""
    import random

    from commands.tools.workload import ORGS, ChatScript, setup_catalogs
    from ledger.store import open_app
    from projections import catch_up, open_backend
    from projections.chats import chat_projections

    app = open_app(url)
    facts = setup_catalogs(app)
    rng = random.Random(3)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    t = time.perf_counter()
    pending, ids = [], []
    for _ in range(chats):
        script = ChatScript(random.Random(rng.getrandbits(64)), start, facts)
        for _ in range(rng.choice((2, 2, 3, 4))):
            script.step()
        pending.append(script.chat)
        ids.append(str(script.chat.id))
        if len(pending) >= 500:
            app.save(*pending)
            pending = []
    if pending:
        app.save(*pending)
    write_s = time.perf_counter() - t
    backend = open_backend(url)
    t = time.perf_counter()
    views = chat_projections(app)[0]
    applied = catch_up(app, views, backend, batch_size=2000)
    catch_up_s = time.perf_counter() - t
    status_rows = backend.query(views, "chat_status", limit=None)
    assert len(status_rows) == chats, (len(status_rows), chats)
    unresolved_chats = sorted({r["chat_id"] for r in backend.query(views, "unresolved_tool_calls")})

    def timed(fn: Any, args: list[Any]) -> dict[str, Any]:
        for a in args[:5]:
            fn(a)  # warm up
        samples, rows = [], 0
        for a in args:
            t0 = time.perf_counter()
            rows += len(fn(a))
            samples.append(time.perf_counter() - t0)
        return {**_percentiles(samples), "rows_per_query": round(rows / len(args), 1)}

    pick = [rng.choice(ids) for _ in range(1000)]
    pick_unresolved = [rng.choice(unresolved_chats) for _ in range(1000)] if unresolved_chats else pick
    orgs = [str(rng.choice(ORGS)) for _ in range(200)]
    orgs_full = [str(o) for o in ORGS] * 3
    out = {
        "chats": chats, "events": app.head(), "write_s": round(write_s, 1), "catch_up_s": round(catch_up_s, 1),
        "catch_up_events": applied, "unresolved_rows": sum(1 for _ in backend.query(views, "unresolved_tool_calls")),
        "status_by_chat": timed(lambda c: backend.query(views, "chat_status", where={"chat_id": c}), pick),
        "status_by_org_page": timed(lambda o: backend.query(views, "chat_status", where={"organization_id": o},
                                                            order_by="-updated_at", limit=100), orgs),
        "status_by_org_all": timed(lambda o: backend.query(views, "chat_status", where={"organization_id": o},
                                                           order_by=["updated_at", "chat_id"]), orgs_full),
        "unresolved_by_chat": timed(lambda c: backend.query(views, "unresolved_tool_calls", where={"chat_id": c},
                                                            order_by=["chat_id", "assistant_message_id", "since"]),
                                    pick_unresolved),
        "unresolved_all": timed(lambda _: backend.query(views, "unresolved_tool_calls",
                                                        order_by=["chat_id", "assistant_message_id", "since"]), [0] * 10),
    }
    backend.close()
    app.close()
    return out


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


if __name__ == "__main__":
    kind, url, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
    from commands.tools.bench_service import child_service

    fn = {"rebuild": child_rebuild, "generate": child_generate, "replay": child_replay,
          "throughput": child_throughput, "concurrent": child_concurrent, "views": child_views,
          "service": child_service, "longchat": child_longchat, "firstcmd": child_firstcmd,
          "chain": child_chain}[kind]
    print(json.dumps(fn(url, events, *map(int, sys.argv[4:]))))  # type: ignore[operator]
