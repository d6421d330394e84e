"""``chat-ledger bench --only service``: the ledger service under load vs ``apply`` in one process.

The same commands (small simulated chats, ``chat_script_commands``) are run in two arms, each on its own
fresh database, in the same run: in this process, one after the other through the handler (``apply``'s
path); and by ``CLIENTS`` concurrent HTTP clients (one keep-alive connection each, one command per request,
whole chats in order, each client an organization member with its own token) against a real ``chat-ledger
serve`` process on loopback. The arms alternate in ``CHUNKS`` chunks in ABBA order (every client's next
slice of commands), so that a machine whose load or disk changes during the run weighs on both arms alike;
each arm's rate is its commands over the sum of its chunks' times. Between chunks, off the clock, the
streams receive every event of the chunk and the server's views catch up.

The clients (``_Connection``) are pre-encoded HTTP/1.1 requests on asyncio streams, all on one event loop
in the bench process, so they take little of the cores the server needs. Figures: commands/s and p50/p99
latency of each arm; the SSE delivery lag (receipt time minus the event's recorded time) p50/p99 of an
auditor's stream per organization, every event of the run.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime
from typing import Any, AsyncIterator

import msgspec

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
        org, user = ORGS[i % len(ORGS)], USERS[i % len(USERS)]
        cmds: list[dict[str, Any]] = []
        while len(cmds) < commands // clients:
            cmds += chat_script_commands(rng, org, user, uuid.UUID(int=rng.getrandbits(128), version=4))
        plans.append((org, user, cmds))
    return plans


class _InProcess:
    """The baseline arm: the handler in this process on its own ledger (``apply``'s path)."""

    def __init__(self, url: str) -> None:
        from commands.tools.workload import setup_catalogs
        from ledger.store import open_app

        self.app = open_app(url)
        setup_catalogs(self.app)
        self.latencies: list[float] = []
        self.wall = 0.0

    def run(self, commands: list[Any]) -> None:
        from commands.handler import execute

        t0 = time.perf_counter()
        for cmd in commands:
            t = time.perf_counter()
            execute(self.app, cmd)
            self.latencies.append(time.perf_counter() - t)
        self.wall += time.perf_counter() - t0

    def figures(self) -> dict[str, Any]:
        n = len(self.latencies)
        return {"commands": n, "commands_per_s": round(n / self.wall), **_percentiles(self.latencies)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(url: str) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = _free_port()
    # (--create: the ledger may be new; --write-rate 0: the bench measures the service, not its per-token limit)
    argv = [sys.executable, "-m", "commands.cli.main", "--db", url, "serve", "--port", str(port), "--create",
            "--write-rate", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                            stderr=open(os.environ["BENCH_SERVE_LOG"], "ab") if os.environ.get("BENCH_SERVE_LOG")
                            else subprocess.DEVNULL)
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


def _profiler(pid: int) -> subprocess.Popen[bytes] | None:
    """``CHAT_LEDGER_BENCH_PYSPY=FILE``: sample every thread of the server with py-spy (if installed) while
    the clients run, as folded stacks in FILE (one line per distinct stack and its sample count)."""
    out = os.environ.get("CHAT_LEDGER_BENCH_PYSPY")
    if not out:
        return None
    flags = os.environ.get("CHAT_LEDGER_BENCH_PYSPY_FLAGS", "--threads --idle").split()  # "--gil": CPU only
    return subprocess.Popen(["py-spy", "record", "--pid", str(pid), *flags, "--rate", "250", "--format", "raw",
                             "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class _Connection:
    """One keep-alive HTTP/1.1 connection on asyncio streams: requests are pre-encoded bytes, a response is
    its status and body (Content-Length or chunked). The bench's clients are these, all on one event loop in
    the bench process, so they take little of the cores the server shares with them (``httpx`` clients in 8
    threads took enough that the server did 433 cmd/s with them and 665 with these, with also the clock
    started after the views' first build: one run each)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str,
                 secret: str) -> None:
        self.reader, self.writer = reader, writer
        self.head = f"Host: {host}\r\nAuthorization: Bearer {secret}\r\n".encode()

    @classmethod
    async def open(cls, host: str, port: int, secret: str) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        return cls(reader, writer, f"{host}:{port}", secret)

    def close(self) -> None:
        self.writer.close()

    async def _headers(self) -> tuple[int, dict[bytes, bytes]]:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = raw[:-4].split(b"\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return int(status_line.split(b" ", 2)[1]), headers

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        self.writer.write(b"%s %s HTTP/1.1\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (method.encode(), path.encode(), self.head, len(body), body))
        status, headers = await self._headers()
        if headers.get(b"transfer-encoding") == b"chunked":
            return status, b"".join([chunk async for chunk in self.chunks()])
        return status, await self.reader.readexactly(int(headers.get(b"content-length", b"0")))

    async def stream(self, path: str) -> AsyncIterator[bytes]:
        """The chunks of a streamed (chunked) GET response, as they arrive; first an empty one once the
        response has started (the stream is open)."""
        self.writer.write(b"GET %s HTTP/1.1\r\n%s\r\n" % (path.encode(), self.head))
        status, _ = await self._headers()
        if status != 200:
            raise RuntimeError(f"GET {path}: {status}")
        yield b""
        async for chunk in self.chunks():
            yield chunk

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return
            yield data[:-2]


def _run_arms(url: str, baseline_url: str, plans: list[Any], chunks: int) -> dict[str, Any]:
    from commands.tokens import issue_token
    from commands.tools.workload import setup_catalogs
    from ledger.store import open_app

    app = open_app(url)
    setup_catalogs(app)
    secrets = [issue_token(app, user=user, org=org, role="member")["secret"] for org, user, _ in plans]
    auditors = {org: issue_token(app, user=uuid.UUID(int=0xD000), org=org, role="auditor")["secret"]
                for org in {org for org, _, _ in plans}}
    app.close()
    baseline = _InProcess(baseline_url)
    proc, base = _serve(url)
    try:
        _wait_views(base, secrets[0])
        profiler = _profiler(proc.pid)
        try:
            http = asyncio.run(_drive(base, plans, secrets, auditors, baseline, chunks, proc.pid))
        finally:
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its samples on SIGINT
                profiler.wait(timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        baseline.app.close()
    inproc = baseline.figures()
    return {"in_process": inproc, "http": http, "chunks": chunks,
            "ratio": round(http["commands_per_s"] / inproc["commands_per_s"], 2)}


def _wait_views(base: str, secret: str) -> None:
    """Until the server's follower has built its views of the setup (the catalogs, the tokens), so the clock
    measures the service recording commands, not a first build the in-process run never does."""
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready = httpx.get(f"{base}/readyz", timeout=30).json()
        if ready.get("projections") and all(p["lag"] == 0 for p in ready["projections"]):
            return
        time.sleep(0.1)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux ``/proc``; every thread), 0 where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _slices(plan: list[Any], chunks: int) -> list[list[Any]]:
    step = -(-len(plan) // chunks)
    return [plan[k * step:(k + 1) * step] for k in range(chunks)]


async def _drive(base: str, plans: list[Any], secrets: list[str], auditors: dict[Any, str],
                 baseline: _InProcess, chunks: int, server_pid: int) -> dict[str, Any]:
    from commands.handler import command_from_dict

    host, port = base.removeprefix("http://").split(":")
    lags: list[float] = []
    refused: list[Any] = []
    latencies: list[list[float]] = [[] for _ in plans]
    decode_event = msgspec.json.Decoder(_Stamp).decode
    listening = []

    async def listen(org: Any, secret: str) -> None:
        conn = await _Connection.open(host, int(port), secret)
        _, body = await conn.request("GET", "/v1/events?limit=1")
        head = msgspec.json.decode(body)["head"]
        buffer = b""
        try:
            async for chunk in conn.stream(f"/v1/events/stream?org={org}&after={head}"):
                if not listening or listening[-1] is not conn:
                    listening.append(conn)
                now = time.time()
                buffer += chunk
                *messages, buffer = buffer.split(b"\r\n\r\n" if b"\r\n\r\n" in buffer else b"\n\n")
                for message in messages:
                    for line in message.splitlines():
                        if line.startswith(b"data:"):
                            lags.append(now - decode_event(line[5:]).timestamp.timestamp())
        finally:
            conn.close()

    async def client(i: int, conn: _Connection, commands: list[bytes]) -> None:
        for body in commands:
            t = time.perf_counter()
            _, answer = await conn.request("POST", "/v1/commands", body)
            latencies[i].append(time.perf_counter() - t)
            if b'"ok":true' not in answer:
                refused.append(msgspec.json.decode(answer))

    listeners = [asyncio.create_task(listen(org, secret)) for org, secret in auditors.items()]
    while len(listening) < len(auditors):  # every stream is open
        await asyncio.sleep(0.01)
        if any(t.done() for t in listeners):
            await asyncio.gather(*listeners)
    # every client's commands, and the baseline's (client after client), chunk by chunk
    http_chunks = list(zip(*(_slices([msgspec.json.encode(c) for c in plan], chunks) for _, _, plan in plans)))
    local_chunks = [[command_from_dict(c) for part in parts for c in part]
                    for parts in zip(*(_slices(plan, chunks) for _, _, plan in plans))]
    conns: list[_Connection] = []

    async def reconnect() -> None:
        # (off the clock) fresh keep-alive connections for each HTTP chunk: uvicorn closes one left idle for
        # 5 s, and the other arm, or the views catching up, can take longer than that between two chunks
        for conn in conns:
            conn.close()
        conns[:] = [await _Connection.open(host, int(port), secret) for secret in secrets]

    async def head() -> int:
        await reconnect()
        return int(msgspec.json.decode((await conns[0].request("GET", "/v1/events?limit=1"))[1])["head"])

    wall, start = 0.0, await head()
    client_cpu = server_cpu = 0.0  # CPU seconds of the clients and streams (this process) and of the server
    for k in range(chunks):
        for arm in ("http", "local") if k % 4 in (0, 3) else ("local", "http"):  # ABBA
            if arm == "local":
                baseline.run(local_chunks[k])  # blocks the loop: nothing is in flight meanwhile
                continue
            await reconnect()
            t0, c0, s0 = time.perf_counter(), time.process_time(), _cpu_seconds(server_pid)
            await asyncio.gather(*(client(i, conns[i], http_chunks[k][i]) for i in range(len(plans))))
            wall += time.perf_counter() - t0
            client_cpu += time.process_time() - c0
            server_cpu += _cpu_seconds(server_pid) - s0
            recorded = await head() - start  # every event goes to one auditor's stream (its organization's)
            deadline = time.monotonic() + 10
            while len(lags) < recorded and time.monotonic() < deadline:
                await asyncio.sleep(0.005)  # off the clock: the streams deliver the chunk's last events
            await asyncio.to_thread(_wait_views, base, secrets[0])  # and the views catch up
    for conn in conns:
        conn.close()
    n = sum(len(x) for x in latencies)
    for t in listeners:
        t.cancel()
    return {"commands": n, "clients": len(plans), "commands_per_s": round(n / wall), "refused": len(refused),
            "first_refused": refused[:3], **_percentiles([x for xs in latencies for x in xs]),
            "cpu_s": {"wall": round(wall, 2), "server": round(server_cpu, 2), "clients": round(client_cpu, 2)},
            "sse": {"events": len(lags), "streams": len(auditors), **_percentiles(lags)}}


class _Stamp(msgspec.Struct):
    timestamp: datetime


#: chunks each arm runs in (ABBA order)
CHUNKS = 8


def child_service(url: str, commands: int, clients: int = CLIENTS, chunks: int = CHUNKS) -> dict[str, Any]:
    from commands.tools.bench_kit import _drop, _sibling

    baseline_url = _sibling(url, "inproc")
    try:
        return _run_arms(url, baseline_url, _plans(commands, clients), chunks)
    finally:
        _drop(baseline_url)
