"""Benchmark children of the write path: command throughput through the handler against bare saves, and
concurrent writers (``chat-ledger bench``, run by ``commands.tools.bench_children``)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from commands.tools.bench_kit import _drop, _sibling


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
