"""PostgreSQL clusters made by a test (``initdb``, ``pg_basebackup``), for the high-availability tests: a
primary with a synchronous standby (``pair``), killed with SIGKILL, stopped, restarted, queried. Runs as root with
PostgreSQL's server binaries; the fixtures skip with the reason elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest

from tests.reliability.test_sync_standby_gone import _bindir, _free_port

CLI = [sys.executable, "-m", "commands.cli.main"]


def cluster_root(prefix: str) -> tuple[Path, Path]:
    """PostgreSQL's bindir and a new directory owned by ``postgres``; skips where clusters cannot be made."""
    bindir = _bindir()
    if bindir is None or os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root, runuser and PostgreSQL's server binaries (pg_config --bindir) to make clusters")
    root = Path(tempfile.mkdtemp(prefix=prefix))
    shutil.chown(root, "postgres", "postgres")
    return bindir, root


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc: no tool needed)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


class Cluster:
    def __init__(self, bindir: Path, root: Path, name: str) -> None:
        self.bindir, self.root, self.port = bindir, root, _free_port()
        self.data, self.log = root / name, root / f"{name}.log"

    def run(self, tool: str, *argv: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(self.bindir / tool), *argv], check=True,
                       capture_output=True, timeout=120)

    def start(self, *settings: str) -> None:
        opts = " ".join([f"-c port={self.port}", "-c listen_addresses=127.0.0.1",
                         f"-c unix_socket_directories={self.root}", *settings])
        self.run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.log), "-o", opts, "start")

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started, as a machine that lost power."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        children = _children(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # already gone (with its process group: a failover manager killed with it)
            children = []
        for child in children:
            try:
                os.kill(int(child), signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)  # polling the condition above

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(["runuser", "-u", "postgres", "--", str(self.bindir / "pg_ctl"), "-D", str(self.data),
                            "-m", "immediate", "-w", "stop"], capture_output=True, timeout=120)

    def sql(self, statement: str) -> Any:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            return conn.execute(statement).fetchall() if statement.lstrip().upper().startswith(("SELECT", "SHOW")) \
                else conn.execute(statement)


@pytest.fixture
def pair() -> Iterator[tuple[Cluster, Cluster]]:
    """A primary and its synchronous standby (``pg_basebackup -R``, streaming), stopped and removed after."""
    bindir, root = cluster_root("chat-ledger-ha-")
    primary, standby = Cluster(bindir, root, "primary"), Cluster(bindir, root, "standby")
    try:
        primary.run("initdb", "-D", str(primary.data), "-A", "trust", "-U", "postgres")
        primary.start("-c synchronous_standby_names='*'", "-c synchronous_commit=on")
        primary.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "-D",
                    str(standby.data), "-R", "-X", "stream")
        standby.start()
        wait_sync(primary)
        yield primary, standby
    finally:
        standby.stop()
        primary.stop()
        shutil.rmtree(root, ignore_errors=True)


def wait_sync(primary: Cluster) -> None:
    deadline = time.monotonic() + 60
    while ("sync",) not in primary.sql("SELECT sync_state FROM pg_stat_replication"):
        assert time.monotonic() < deadline, "the standby did not become synchronous"
        time.sleep(0.1)  # polling the condition above


def apply(url: str, *commands: dict) -> list[dict]:
    out = subprocess.run([*CLI, "--db", url, "apply", "-"], input="\n".join(json.dumps(c) for c in commands),
                         capture_output=True, text=True, timeout=120)
    return [json.loads(line) for line in out.stdout.splitlines()]
