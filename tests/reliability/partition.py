"""A real network partition between the ledger and PostgreSQL.

A veth pair joins this host to a network namespace of its own. Inside it a relay process listens on the
namespace's address and passes every connection on to the PostgreSQL server's Unix socket (sockets in
the file system are not namespaced, so the relay reaches the server without a route back). A client
connects to ``address:port`` over the veth link. ``cut()`` sets the namespace's end of the link down:
from then on nothing answers and nothing refuses — segments the client sends are never acknowledged, a
reply it waits for never comes, a new connection finds no host. That is a partition (or a server host
that lost power), which a proxy on loopback cannot make: its kernel acknowledges everything.
``heal()`` sets the link up again; connections cut meanwhile stay dead, new ones work.

Needs root and iproute2 (``ip netns``, veth); ``Partition.unavailable()`` says why not, for a skip.

Run as ``python -m tests.reliability.partition ADDRESS SOCKET DEVICE``, this module is the relay: it prints
the port it listens on, then serves until killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest

from ledger.database import DatabaseURL


ROOT = Path(__file__).resolve().parents[2]  # the relay runs as ``-m tests.reliability.partition`` from here


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=20)


class Partition:
    """One namespace, its veth pair (``10.x.y.1`` here, ``10.x.y.2`` there) and its relay."""

    def __init__(self, server_socket: str) -> None:
        tag = uuid.uuid4().hex[:8]
        self.namespace = f"cl{tag}"
        self._here, self._there = f"vcl{tag}a", f"vcl{tag}b"  # interface names: at most 15 characters
        octets = int(tag[:4], 16)
        net = f"10.{200 + octets % 50}.{(octets >> 6) % 256}"
        self.address = f"{net}.2"
        self._relay: subprocess.Popen[str] | None = None
        try:
            _run("ip", "netns", "add", self.namespace)
            _run("ip", "link", "add", self._here, "type", "veth", "peer", "name", self._there)
            _run("ip", "link", "set", self._there, "netns", self.namespace)
            _run("ip", "addr", "add", f"{net}.1/30", "dev", self._here)
            _run("ip", "link", "set", self._here, "up")
            self._in_ns("ip", "addr", "add", f"{self.address}/30", "dev", self._there)
            self._in_ns("ip", "link", "set", self._there, "up")
            self._relay = subprocess.Popen(
                ["ip", "netns", "exec", self.namespace, sys.executable, "-m", "tests.reliability.partition",
                 self.address, server_socket, self._there],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
            assert self._relay.stdout is not None
            self.port = int(self._relay.stdout.readline())
            self._cut_at_commit = threading.Event()
            threading.Thread(target=self._said, args=(self._relay.stdout,), daemon=True).start()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def unavailable() -> str | None:
        """Why a partition cannot be made here, or None."""
        if os.geteuid() != 0:
            return "a network namespace needs root"
        if shutil.which("ip") is None:
            return "iproute2's ip is not installed"
        probe = f"clprobe{uuid.uuid4().hex[:6]}"
        try:
            _run("ip", "netns", "add", probe)
        except (subprocess.SubprocessError, OSError) as e:
            return f"ip netns add failed: {e}"
        _run("ip", "netns", "delete", probe)
        return None

    def through(self, url: str) -> str:
        """``url``'s database, schema and user, reached across the link (no other parameter: the
        ledger's own TCP defaults are what is tested)."""
        db = DatabaseURL.parse(url)
        return f"postgresql://{db.user}@{self.address}:{self.port}/{db.dbname}?schema={db.schema}"

    def cut(self) -> None:
        self._in_ns("ip", "link", "set", self._there, "down")

    def cut_at_commit(self) -> None:
        """Cut the link when the server's next reply to a COMMIT reaches the relay, withholding it: the
        commit happened, and the client hears nothing more."""
        assert self._relay is not None and self._relay.stdin is not None
        self._cut_at_commit.clear()
        self._relay.stdin.write("arm\n")
        self._relay.stdin.flush()

    def was_cut_at_commit(self) -> bool:
        return self._cut_at_commit.is_set()

    def _said(self, stdout: Any) -> None:
        for line in stdout:
            if line.strip() == "cut":
                self._cut_at_commit.set()

    def heal(self) -> None:
        self._in_ns("ip", "link", "set", self._there, "up")

    def close(self) -> None:
        if self._relay is not None:
            self._relay.kill()
            self._relay.wait()
            self._relay = None
        subprocess.run(["ip", "netns", "delete", self.namespace], capture_output=True)  # takes the veth pair
        subprocess.run(["ip", "link", "delete", self._here], capture_output=True)  # if the move failed

    def _in_ns(self, *argv: str) -> None:
        _run("ip", "netns", "exec", self.namespace, *argv)

    def __enter__(self) -> Partition:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextlib.contextmanager
def partition_for(url: str) -> Iterator[Partition]:
    """A partition in front of ``url``'s server, or the test skipped saying why none can be made here."""
    why = Partition.unavailable()
    if why is not None:
        pytest.skip(f"no network partition here: {why}")
    with psycopg.connect(DatabaseURL.parse(url).psycopg_conninfo()) as conn:
        directory = str(conn.execute("SHOW unix_socket_directories").fetchone()[0]).split(",")[0].strip()
        port = conn.execute("SHOW port").fetchone()[0]
    server_socket = os.path.join(directory, f".s.PGSQL.{port}")
    if not os.path.exists(server_socket):
        pytest.skip(f"no network partition here: the server's socket {server_socket} is not on this machine")
    with Partition(server_socket) as partition:
        yield partition


# -- the relay (inside the namespace) ---------------------------------------------------------------------

COMMIT_COMPLETE = b"C" + struct.pack("!I", 4 + len(b"COMMIT\x00")) + b"COMMIT\x00"


class _Relay:
    """Pipes each connection to the server's socket; armed (a line ``arm`` on stdin), it sets ``device``
    down the moment the server's reply to a ``COMMIT`` arrives, before passing it on, and says ``cut``."""

    def __init__(self, address: str, server_socket: str, device: str) -> None:
        self.server_socket, self.device = server_socket, device
        self.armed = threading.Event()
        self.listener = socket.create_server((address, 0))

    def serve(self) -> None:
        print(self.listener.getsockname()[1], flush=True)
        threading.Thread(target=self._control, daemon=True).start()
        while True:
            client, _ = self.listener.accept()
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.server_socket)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _control(self) -> None:
        for line in sys.stdin:
            if line.strip() == "arm":
                self.armed.set()

    def _pipe(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        tail = b""  # the end of the last chunk: a COMMIT reply split across two reads is still seen
        try:
            while data := source.recv(65536):
                if replies and self.armed.is_set() and COMMIT_COMPLETE in tail + data:
                    self.armed.clear()
                    subprocess.run(["ip", "link", "set", self.device, "down"], check=True)
                    print("cut", flush=True)
                    return  # the reply is never passed on, the sockets stay open: silence, not a close
                tail = data[-len(COMMIT_COMPLETE):]
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


if __name__ == "__main__":
    _Relay(*sys.argv[1:4]).serve()
