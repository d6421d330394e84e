"""The CLI's start-up, whole process (``chat-ledger bench --only startup``): the median of 5 runs each of
``chat-ledger --version``, ``--help`` and ``status CHAT`` on a small SQLite ledger, beside ``python -c pass``
(the interpreter's own start) in the same run. Each is run once first, so that the bytecode caches are
written (as on any installed copy); ``PYTHONDONTWRITEBYTECODE`` is cleared for the runs.

Targets (issue 30): ``--version`` and ``--help`` under 0.15 s, ``status CHAT`` under 0.3 s.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RUNS = 5
TARGETS = {"version": 0.15, "help": 0.15, "status": 0.3}


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def measure(runs: int = RUNS) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    script = Path(sys.executable).with_name("chat-ledger")  # the installed entry point, as people run it
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "commands.cli.main"]
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/ledger.db"
        org, user = "0a000000-0000-4000-8000-000000000001", "0b000000-0000-4000-8000-0000000000a1"
        lines = "\n".join(json.dumps(c) for c in (
            {"type": "add_organization_member", "organization_id": org, "user_id": user},
            {"type": "create_model_config", "organization_id": org, "provider": "anthropic", "model": "claude",
             "context_limit": 200_000, "is_default": True},
            {"type": "create_chat", "organization_id": org, "owner_id": user, "text": "hello", "title": "start-up"}))
        made = subprocess.run([*cli, "--db", url, "apply", "-"], input=lines, env=env, capture_output=True,
                              text=True, check=True)
        chat = json.loads(made.stdout.splitlines()[-1])["result"]["chat_id"]
        cases = {"python": [sys.executable, "-c", "pass"], "version": [*cli, "--version"], "help": [*cli, "--help"],
                 "status": [*cli, "--db", url, "status", chat]}
        out: dict[str, Any] = {}
        for name, argv in cases.items():
            _timed(argv, env)  # warm: bytecode written, files in the page cache
            samples = [_timed(argv, env) for _ in range(runs)]
            out[name] = {"median_s": round(statistics.median(samples), 3),
                         "samples_s": [round(s, 3) for s in samples]}
        for name, target in TARGETS.items():
            out[name].update(target_s=target, met=out[name]["median_s"] < target,
                             over_python_s=round(out[name]["median_s"] - out["python"]["median_s"], 3))
    return out


if __name__ == "__main__":
    print(json.dumps(measure()))
