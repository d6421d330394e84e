"""A real ``chat-ledger serve`` process on a free loopback port, tokens for it, and an SSE reader.

``Server(url)`` starts the CLI's ``serve`` in a subprocess and waits for ``/healthz`` to answer (polling
the condition, with a deadline; a process that exits first fails at once with its output)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

import httpx

from commands.tokens import issue_token
from ledger.store import open_app

STARTUP_DEADLINE = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, url: str, *args: str) -> None:
        self.url = url
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "commands.cli.main", "--db", url, "serve", "--port", str(self.port), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self._wait_healthy()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_DEADLINE
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"serve did not answer /healthz in {STARTUP_DEADLINE}s:\n{self.output()}")
            time.sleep(0.05)  # polling the condition above, not standing in for it

    def wait_ready(self, within: float) -> None:
        """Until ``/readyz`` answers 200 (the database reachable again), as a load balancer would wait."""
        deadline = time.monotonic() + within
        while httpx.get(f"{self.base}/readyz", timeout=within).status_code != 200:
            assert time.monotonic() < deadline, f"/readyz did not answer 200 within {within} s"
            time.sleep(0.05)  # polling the condition above, not standing in for it

    def client(self, secret: str | None = None, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=kw.pop("timeout", 30.0), **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()


def tokens(url: str, **specs: dict[str, Any]) -> dict[str, str]:
    """name -> secret of each token issued for ``specs`` (name -> issue_token's keywords)."""
    import uuid

    app = open_app(url)
    try:
        out = {}
        for name, spec in specs.items():
            spec = {k: uuid.UUID(v) if k in ("user", "org") and isinstance(v, str) else v for k, v in spec.items()}
            out[name] = issue_token(app, **spec)["secret"]
        return out
    finally:
        app.close()


def sse_events(response: httpx.Response, deadline: float | None = None) -> Iterator[dict[str, str]]:
    """The messages of an open SSE response (``id``, ``event``, ``data``; comments skipped); with a
    ``deadline`` (``time.monotonic``), it ends at the first line read after it (a keep-alive at the latest)."""
    message: dict[str, str] = {}
    for line in response.iter_lines():
        if deadline is not None and time.monotonic() > deadline:
            return
        if not line:
            if message:
                yield message
            message = {}
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            message[field] = value[1:] if value.startswith(" ") else value


def take_events(response: httpx.Response, n: int, deadline: float) -> list[dict[str, Any]]:
    """The first ``n`` events (their JSON ``data``) of an open SSE response; failing at ``deadline``
    (``time.monotonic``; keep-alives come every 15 s, so a stream that stalls fails then)."""
    import json

    got = []
    for message in sse_events(response, deadline=deadline):
        got.append(json.loads(message["data"]))
        if len(got) == n:
            return got
    raise AssertionError(f"the stream gave {len(got)} of {n} events by its deadline")
