"""``chat-ledger bench --only writepath``: the write path against the machine's own limit, in one run.

On the same PostgreSQL server, one after the other: ``pgbench`` inserting one row per transaction into a table
shaped like the events table (the same columns, primary key and unique key) with the ledger's mean stored
payload size, at 1, 8 and 32 clients; the ledger's commands through the handler in one process; and through the
service (``chat-ledger serve``) at 8 and 32 HTTP clients (``bench_service``). Ratios: the handler against
pgbench at 1 client (target >= 0.5), the service against pgbench at the same number of clients (>= 0.3).
A command records one or more events (``events_per_command``); pgbench's transaction is one row. Then several
writers at once: 4 ``serve`` processes on the ledger and 64 clients spread over them (commands/s, p50/p99).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

PGBENCH_SECONDS = 8


def _pgbench() -> str | None:
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return shutil.which("pgbench")
    path = Path(out) / "pgbench"
    return str(path) if path.exists() else shutil.which("pgbench")


def pgbench_rates(url: str, payload_bytes: int, clients: tuple[int, ...], seconds: int = PGBENCH_SECONDS
                  ) -> dict[str, Any]:
    """Transactions/s of pgbench inserting one events-shaped row per transaction, per client count."""
    import psycopg
    from psycopg import sql

    from ledger.store import DatabaseURL

    db = DatabaseURL.parse(url)
    binary = _pgbench()
    if binary is None:
        return {"error": "pgbench not found (PostgreSQL's client binaries)"}
    table = sql.Identifier(db.schema, "pgbench_events")
    with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(db.schema)))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        conn.execute(sql.SQL(
            "CREATE TABLE {} (originator_id uuid NOT NULL, originator_version bigint NOT NULL, topic text, "
            "state bytea, notification_id bigserial, chain_hash bytea, "
            "PRIMARY KEY (originator_id, originator_version))").format(table))
        conn.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (notification_id)").format(table))
        target = table.as_string(conn)
    out: dict[str, Any] = {"payload_bytes": payload_bytes, "seconds": seconds}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "insert.sql"
        script.write_text(f"INSERT INTO {target} (originator_id, originator_version, topic, state) VALUES "
                          f"(gen_random_uuid(), 1, 'ledger.chat.events:Chat.MessagesCommitted', "
                          f"convert_to(repeat('x', {payload_bytes}), 'UTF8'));\n")
        for n in clients:  # (libpq takes a whole connection string where pgbench takes a database name)
            run = subprocess.run(
                [binary, "-n", "-c", str(n), "-j", str(min(n, os.cpu_count() or 1)), "-T", str(seconds),
                 "-f", str(script), db.psycopg_conninfo()], capture_output=True, text=True, check=False)
            found = re.search(r"tps = ([0-9.]+)", run.stdout)
            out[f"clients_{n}"] = round(float(found.group(1))) if found else {"error": run.stderr[-500:]}
    with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    return out


def handler_rate(url: str, commands: int) -> dict[str, Any]:
    """The workload's commands through the handler in this process: commands/s, events per command and the
    mean stored payload size (what pgbench's row carries)."""
    from commands.handler import execute
    from commands.tools.bench_writes import _workload_commands
    from commands.tools.workload import setup_catalogs
    from ledger.store import open_app

    cmds = _workload_commands(commands)
    app = open_app(url)
    try:
        setup_catalogs(app)
        for c in _workload_commands(200, seed=11):  # warm: connections, prepared statements
            execute(app, c)
        start = app.head()
        t = time.perf_counter()
        for c in cmds:
            execute(app, c)
        seconds = time.perf_counter() - t
        states = [len(n.state) for n in app.notifications(start, 1 << 30)]
    finally:
        app.close()
    return {"commands": len(cmds), "commands_per_s": round(len(cmds) / seconds),
            "events_per_command": round(len(states) / len(cmds), 2),
            "mean_payload_bytes": round(sum(states) / max(len(states), 1))}


def floors(url: str, payload_bytes: int, n: int = 2000) -> dict[str, Any]:
    """What bounds the handler, step by step, in this process: one autocommit INSERT of the same row per
    transaction from Python (psycopg: pgbench's work, less its C client), and the ledger's recorder alone (one
    event per save: the pipeline, its lock, the chain, COMMIT; no decision)."""
    import uuid

    import psycopg
    from eventsourcing.persistence import StoredEvent
    from psycopg import sql

    from ledger.store import DatabaseURL, open_app

    db = DatabaseURL.parse(url)
    payload = b"x" * payload_bytes
    table = sql.Identifier(db.schema, "floor_events")
    with psycopg.connect(db.psycopg_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(db.schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (originator_id uuid NOT NULL, originator_version bigint NOT NULL, "
                             "topic text, state bytea, notification_id bigserial UNIQUE, "
                             "PRIMARY KEY (originator_id, originator_version))").format(table))
        insert = sql.SQL("INSERT INTO {} (originator_id, originator_version, topic, state) VALUES (%s, 1, %s, %s)"
                         ).format(table).as_string(conn)
        t = time.perf_counter()
        for _ in range(n):
            conn.execute(insert, (uuid.uuid4(), "ledger.chat.events:Chat.MessagesCommitted", payload), prepare=True)
        psycopg_s = time.perf_counter() - t
        conn.execute(sql.SQL("DROP TABLE {}").format(table))
    app = open_app(url)
    try:
        streams = [uuid.uuid4() for _ in range(50)]
        versions = dict.fromkeys(streams, 0)
        t = time.perf_counter()
        for k in range(n):
            stream = streams[k % 50]
            versions[stream] += 1
            app.recorder.insert_events([StoredEvent(stream, versions[stream], "ledger.chat.events:Chat.MessagesCommitted",
                                                    payload)])
        recorder_s = time.perf_counter() - t
    finally:
        app.close()
    return {"psycopg_insert_per_s": round(n / psycopg_s), "recorder_saves_per_s": round(n / recorder_s)}


def child_writepath(url: str, commands: int) -> dict[str, Any]:
    from commands.tools.bench_kit import _drop, _sibling
    from commands.tools.bench_service import child_service

    handler = handler_rate(url, commands)
    pgbench = pgbench_rates(url, handler["mean_payload_bytes"], (1, 8, 32))
    floor = floors(_sibling(url, "floor"), handler["mean_payload_bytes"])
    _drop(_sibling(url, "floor"))
    service: dict[str, Any] = {}
    for clients in (8, 32):
        target = _sibling(url, f"svc{clients}")
        try:
            service[f"clients_{clients}"] = child_service(target, commands, clients=clients)["http"]
        finally:
            _drop(target)

    target = _sibling(url, "many")
    try:
        many = many_servers(target, commands)
    finally:
        _drop(target)

    def ratio(a: Any, b: Any) -> float | None:
        return round(a / b, 2) if isinstance(a, int) and isinstance(b, int) and b else None

    return {"handler": handler, "pgbench": pgbench, "floors": floor, "service": service, "many_servers": many,
            "ratios": {
        "handler_vs_pgbench_1": ratio(handler["commands_per_s"], pgbench.get("clients_1")),
        "service_8_vs_pgbench_8": ratio(service["clients_8"]["commands_per_s"], pgbench.get("clients_8")),
        "service_32_vs_pgbench_32": ratio(service["clients_32"]["commands_per_s"], pgbench.get("clients_32"))}}


def many_servers(url: str, commands: int, servers: int = 4, clients: int = 64) -> dict[str, Any]:
    """``servers`` ``serve`` processes on one ledger, ``clients`` clients spread over them, each sending its
    commands (whole small chats) one after the other on a keep-alive connection: commands/s over the wall time,
    p50/p99 latency, the servers' CPU seconds."""
    from commands.tokens import issue_token
    from commands.tools.bench_service import _Connection, _cpu_seconds, _percentiles, _plans, _serve, _wait_views
    from commands.tools.workload import setup_catalogs
    from ledger.store import open_app

    import msgspec

    plans = _plans(commands, clients)
    app = open_app(url)
    setup_catalogs(app)
    secrets = [issue_token(app, user=user, org=org, role="member")["secret"] for org, user, _ in plans]
    app.close()
    procs = [_serve(url) for _ in range(servers)]
    try:
        for _, base in procs:
            _wait_views(base, secrets[0])

        async def drive() -> tuple[float, list[float], int]:
            latencies: list[float] = []
            refused = 0

            async def client(i: int) -> None:
                nonlocal refused
                host, port = procs[i % servers][1].removeprefix("http://").split(":")
                conn = await _Connection.open(host, int(port), secrets[i])
                try:
                    for command in plans[i][2]:
                        t = time.perf_counter()
                        _, answer = await conn.request("POST", "/v1/commands", msgspec.json.encode(command))
                        latencies.append(time.perf_counter() - t)
                        refused += b'"ok":true' not in answer
                finally:
                    conn.close()

            t0 = time.perf_counter()
            await asyncio.gather(*(client(i) for i in range(clients)))
            return time.perf_counter() - t0, latencies, refused

        cpu0 = sum(_cpu_seconds(p.pid) for p, _ in procs)
        wall, latencies, refused = asyncio.run(drive())
        cpu = sum(_cpu_seconds(p.pid) for p, _ in procs) - cpu0
    finally:
        for p, _ in procs:
            p.terminate()
        for p, _ in procs:
            p.wait(timeout=15)
    return {"servers": servers, "clients": clients, "commands": len(latencies), "refused": refused,
            "commands_per_s": round(len(latencies) / wall), **_percentiles(latencies),
            "servers_cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}
