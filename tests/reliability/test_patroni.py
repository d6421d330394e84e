"""Issue 25, point 2: Patroni with etcd as the failover manager, shown working (docs/operations.md).

One etcd member and two Patroni nodes (Debian's ``etcd-server`` and ``patroni``), each managing a PostgreSQL
cluster of its own on loopback, in Patroni's ``synchronous_mode``; a ``serve`` process on the multi-host URL of
both (``target_session_attrs=read-write``); a client sending keyed commands. The leader's machine is lost
(its Patroni and its PostgreSQL killed with SIGKILL): nobody promotes by hand — Patroni promotes the
synchronous standby once the leader's key expires in etcd — and the client goes on through the same server
process. Every acknowledged command is there exactly once and ``events verify`` passes. Runs as root with
PostgreSQL's server binaries, ``patroni`` and ``etcd``; skipped with the reason elsewhere."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.reliability.clusters import CLI, Cluster, apply, cluster_root
from tests.reliability.test_failover import send_until_settled
from tests.reliability.test_sync_standby_gone import _free_port
from tests.service.server import Server, tokens

pytestmark = pytest.mark.slow

ORG, USER = "0a000000-0000-4000-8000-0000000000c1", "0b000000-0000-4000-8000-0000000000c1"
#: seconds the leader's key lives in etcd unless renewed (Patroni's smallest): the failover takes about this long
TTL = 20


class Node:
    """One Patroni node and the PostgreSQL cluster it manages."""

    def __init__(self, cluster: Cluster, name: str, etcd: str, root: Path) -> None:
        self.cluster, self.name, self.api = cluster, name, _free_port()
        self.config = root / f"{name}.yml"
        pg_hba = ["local all all trust", "host all all 127.0.0.1/32 trust",
                  "host replication replicator 127.0.0.1/32 trust"]
        config = {  # YAML is a superset of JSON
            "scope": "ledger", "name": name,
            "restapi": {"listen": f"127.0.0.1:{self.api}", "connect_address": f"127.0.0.1:{self.api}"},
            "etcd3": {"hosts": [etcd]},
            "bootstrap": {
                "dcs": {"ttl": TTL, "loop_wait": 1, "retry_timeout": 5, "synchronous_mode": True,
                        "postgresql": {"use_pg_rewind": False,
                                       "parameters": {"wal_level": "replica", "hot_standby": "on",
                                                      "max_wal_senders": 10, "max_replication_slots": 10}}},
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}, {"username": "postgres"}],
                "pg_hba": pg_hba,
            },
            "postgresql": {
                "listen": f"127.0.0.1:{cluster.port}", "connect_address": f"127.0.0.1:{cluster.port}",
                "data_dir": str(cluster.data), "bin_dir": str(cluster.bindir), "pgpass": str(root / f"{name}.pgpass"),
                "authentication": {"superuser": {"username": "postgres", "password": "postgres"},
                                   "replication": {"username": "replicator", "password": "replicator"}},
                "parameters": {"unix_socket_directories": str(root)},
                "pg_hba": pg_hba,
            },
        }
        self.config.write_text(json.dumps(config))
        shutil.chown(self.config, "postgres", "postgres")
        self.log = open(root / f"{name}.log", "wb")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["runuser", "-u", "postgres", "--", "patroni", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def role(self) -> str | None:
        try:
            return httpx.get(f"http://127.0.0.1:{self.api}/patroni", timeout=2).json().get("role")
        except (httpx.HTTPError, ValueError):
            return None

    def kill(self) -> None:
        """The machine is lost: Patroni and its PostgreSQL die at once (SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        if (self.cluster.data / "postmaster.pid").exists():
            self.cluster.kill()


def wait_for(condition: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)  # polling the condition above


def cluster_members(node: Node) -> list[dict[str, Any]]:
    try:
        return httpx.get(f"http://127.0.0.1:{node.api}/cluster", timeout=2).json().get("members", [])
    except (httpx.HTTPError, ValueError):
        return []


@pytest.fixture
def patroni_pair() -> Iterator[tuple[Node, Node]]:
    if shutil.which("patroni") is None or shutil.which("etcd") is None:
        pytest.skip("needs Debian's patroni and etcd-server packages (apt-get install patroni etcd-server)")
    bindir, root = cluster_root("chat-ledger-patroni-")
    client_port, peer_port = _free_port(), _free_port()
    etcd_log = open(root / "etcd.log", "wb")
    etcd = subprocess.Popen(
        ["etcd", "--name", "e1", "--data-dir", str(root / "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client_port}",
         "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-cluster", f"e1=http://127.0.0.1:{peer_port}"],
        stdout=etcd_log, stderr=subprocess.STDOUT, start_new_session=True)
    nodes = [Node(Cluster(bindir, root, name), name, f"127.0.0.1:{client_port}", root) for name in ("pg1", "pg2")]
    try:
        def etcd_healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{client_port}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(etcd_healthy, 30, "etcd did not start")
        nodes[0].start()
        wait_for(lambda: nodes[0].role() in ("master", "primary"), 90, "Patroni did not bootstrap a leader")
        nodes[1].start()
        wait_for(lambda: any(m.get("role") == "sync_standby" and m.get("state") in ("running", "streaming")
                             for m in cluster_members(nodes[0])), 120, "no synchronous standby joined")
        yield nodes[0], nodes[1]
    except BaseException:
        for name in ("etcd.log", "pg1.log", "pg2.log"):
            print(f"--- {name}\n{(root / name).read_text(errors='replace')[-3000:]}")
        raise
    finally:  # every process goes, whatever one of them does
        with contextlib.ExitStack() as stack:
            stack.callback(shutil.rmtree, root, ignore_errors=True)
            stack.callback(etcd.wait, timeout=30)
            stack.callback(os.killpg, etcd.pid, signal.SIGKILL)
            for node in nodes:
                stack.callback(node.kill)


def test_patroni_fails_over_on_its_own_and_no_acknowledged_command_is_lost(patroni_pair) -> None:
    leader, replica = patroni_pair
    url = (f"postgresql://postgres@127.0.0.1:{leader.cluster.port},127.0.0.1:{replica.cluster.port}/postgres"
           "?target_session_attrs=read-write&schema=patroni")
    rows = apply(url, {"type": "add_organization_member", "organization_id": ORG, "user_id": USER},
                 {"type": "create_model_config", "organization_id": ORG, "provider": "anthropic", "model": "claude",
                  "context_limit": 200000},
                 {"type": "set_deployment_settings", "limits": {"max_queued_messages_per_chat": 1000}},
                 {"type": "create_chat", "organization_id": ORG, "owner_id": USER, "text": "before"})
    assert all(r["ok"] for r in rows), rows
    chat = rows[-1]["result"]["chat_id"]
    secret = tokens(url, admin={"user": USER, "org": ORG, "role": "admin"})["admin"]
    server = Server(url)
    acked: list[str] = []
    met: list[str] = []
    stop = threading.Event()

    def client() -> None:
        with server.client(secret, timeout=30) as c:
            i = 0
            while not stop.is_set():
                key = f"k-{i}"
                body, errors = send_until_settled(
                    c, {"type": "send_message", "chat_id": chat, "text": key, "idempotency_key": key}, 180)
                acked.append(key)
                met.extend(errors)
                i += 1

    thread = threading.Thread(target=client)
    thread.start()
    try:
        check_failover(server, leader, replica, url, secret, chat, acked, met, stop, thread)
    finally:
        stop.set()
        thread.join(timeout=300)
        server.stop()


def check_failover(server: Server, leader: Node, replica: Node, url: str, secret: str, chat: str,
                   acked: list[str], met: list[str], stop: threading.Event, thread: threading.Thread) -> None:
    try:
        wait_for(lambda: len(acked) >= 5, 60, "no commands before the failover")
        leader.kill()
        # nobody promotes: Patroni does, once the leader's key expires in etcd
        wait_for(lambda: replica.role() in ("master", "primary"), TTL * 4, "Patroni did not promote the standby")
        at_failover = len(acked)
        wait_for(lambda: len(acked) >= at_failover + 5, 120, "commands did not go on through the new leader")
    finally:
        stop.set()
        thread.join(timeout=300)
    assert not thread.is_alive()

    server.wait_ready(within=60)  # the same process, no restart
    with server.client(secret) as c:
        queue = c.get(f"/v1/chats/{chat}/queue").json()
    texts = [q["text"] for q in queue]
    assert sorted(texts) == sorted(acked) and len(set(texts)) == len(texts), (texts, acked, met[-5:])
    verify = subprocess.run([*CLI, "--db", url, "events", "verify", "--json"], capture_output=True, text=True,
                            timeout=300)
    assert verify.returncode == 0, verify.stdout[-2000:]
