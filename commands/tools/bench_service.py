"""``chat-ledger bench --only service``: the ledger service under load vs ``apply`` in one process.

The same commands (small simulated chats, ``chat_script_commands``) are run twice, each on a fresh
database in the same run: in this process, one after the other through the handler (``apply``'s path);
then by ``CLIENTS`` concurrent HTTP clients (threads, one keep-alive connection each, one chat at a time
per client, as its own organization member with a token) against a real ``chat-ledger serve`` process on
loopback. Figures: commands/s and p50/p99 latency of each; the SSE delivery lag (receipt time minus the
event's recorded time) p99 of an auditor's stream per organization while the clients write.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from typing import Any

CLIENTS = 8


def _percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples) or [0.0]
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000  # noqa: E731
    return {"p50_ms": round(pick(0.50), 2), "p99_ms": round(pick(0.99), 2), "samples": len(samples)}


def _plans(commands: int, clients: int) -> list[tuple[Any, Any, list[dict[str, Any]]]]:
    """Per client: its organization, its user and its commands (whole chats, about commands/clients)."""
    from commands.tools.bench_writes import chat_script_commands
    from commands.tools.workload import ORGS, USERS

    rng = random.Random(18)
    plans = []
    for i in range(clients):
        org, user = ORGS[i % len(ORGS)], USERS[i]
        cmds: list[dict[str, Any]] = []
        while len(cmds) < commands // clients:
            cmds += chat_script_commands(rng, org, user, uuid.UUID(int=rng.getrandbits(128), version=4))
        plans.append((org, user, cmds))
    return plans


def _in_process(url: str, plans: list[Any]) -> dict[str, Any]:
    from commands.handler import command_from_dict, execute
    from commands.tools.workload import setup_catalogs
    from ledger.store import open_app

    app = open_app(url)
    setup_catalogs(app)
    cmds = [command_from_dict(c) for _, _, plan in plans for c in plan]
    latencies = []
    t0 = time.perf_counter()
    for cmd in cmds:
        t = time.perf_counter()
        execute(app, cmd)
        latencies.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    app.close()
    return {"commands": len(cmds), "commands_per_s": round(len(cmds) / wall), **_percentiles(latencies)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(url: str) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "commands.cli.main", "--db", url, "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("serve did not start")


def _over_http(url: str, plans: list[Any]) -> dict[str, Any]:
    import httpx

    from commands.tokens import issue_token
    from commands.tools.workload import setup_catalogs
    from ledger.store import open_app

    app = open_app(url)
    setup_catalogs(app)
    secrets = [issue_token(app, user=user, org=org, role="member")["secret"] for org, user, _ in plans]
    auditors = {org: issue_token(app, user=uuid.UUID(int=0xD000), org=org, role="auditor")["secret"]
                for org in {org for org, _, _ in plans}}
    app.close()
    proc, base = _serve(url)
    lags: list[float] = []
    refused: list[Any] = []
    latencies: list[list[float]] = [[] for _ in plans]
    stop = threading.Event()
    ready = threading.Barrier(len(auditors) + 1)

    def listen(org: Any, secret: str) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=60) as c:
            head = c.get("/v1/events", params={"limit": 1}).json()["head"]
            with c.stream("GET", "/v1/events/stream", params={"org": str(org), "after": head}) as r:
                ready.wait()
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        stamp = json.loads(line[5:])["timestamp"]
                        lags.append(time.time() - datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
                    if stop.is_set():
                        return

    def client(i: int) -> None:
        _, _, plan = plans[i]
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secrets[i]}"}, timeout=60) as c:
            for cmd in plan:
                t = time.perf_counter()
                r = c.post("/v1/commands", json=cmd)
                latencies[i].append(time.perf_counter() - t)
                if not r.json().get("ok"):
                    refused.append(r.json())

    try:
        listeners = [threading.Thread(target=listen, args=item, daemon=True) for item in auditors.items()]
        for t in listeners:
            t.start()
        ready.wait(timeout=60)
        workers = [threading.Thread(target=client, args=(i,)) for i in range(len(plans))]
        t0 = time.perf_counter()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        wall = time.perf_counter() - t0
        n = sum(len(x) for x in latencies)
        deadline = time.monotonic() + 10
        while len(lags) < n and time.monotonic() < deadline:
            time.sleep(0.05)  # the streams deliver the last events
        stop.set()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    return {"commands": n, "clients": len(plans), "commands_per_s": round(n / wall), "refused": len(refused),
            "first_refused": refused[:3], **_percentiles([x for xs in latencies for x in xs]),
            "sse": {"events": len(lags), "streams": len(auditors), **_percentiles(lags)}}


def child_service(url: str, commands: int, clients: int = CLIENTS) -> dict[str, Any]:
    from commands.tools.bench_kit import _drop, _sibling

    plans = _plans(commands, clients)
    baseline_url = _sibling(url, "inproc")
    try:
        inproc = _in_process(baseline_url, plans)
    finally:
        _drop(baseline_url)
    http = _over_http(url, plans)
    return {"in_process": inproc, "http": http, "ratio": round(http["commands_per_s"] / inproc["commands_per_s"], 2)}
