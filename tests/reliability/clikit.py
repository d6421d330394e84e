"""The installed ``chat-ledger`` command as a real process, and the one line it must end with on a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: the console script pip installed beside this interpreter (``pip install -e .``)
CHAT_LEDGER = str(Path(sys.executable).with_name("chat-ledger"))


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the settings a test controls: no PG* variable (libpq would read
    them), no CHAT_LEDGER_DB / CHAT_LEDGER_DEBUG / CHAT_LEDGER_SQLITE_TIMEOUT; then ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PG") and k not in ("CHAT_LEDGER_DB", "CHAT_LEDGER_DEBUG", "CHAT_LEDGER_SQLITE_TIMEOUT")}
    env.update(extra)
    return env


def run(db: str | None, *args: str, env: dict[str, str] | None = None, input: str | None = None,
        timeout: float = 120, cwd: str | Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [CHAT_LEDGER, *(("--db", db) if db is not None else ()), *args]
    return subprocess.run(argv, capture_output=True, text=True, input=input, timeout=timeout,
                          env=env if env is not None else clean_env(), cwd=cwd)


def start(db: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([CHAT_LEDGER, "--db", db, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env if env is not None else clean_env())


def error_line(proc: Any, code: str) -> str:
    """Assert the process failed as the CLI promises — exit 1, no traceback, stderr exactly one line
    ``error: <code>: <message>`` — and return the message. ``proc``: a CompletedProcess, or a
    ``(returncode, stdout, stderr)`` triple."""
    returncode, stderr = (proc.returncode, proc.stderr) if hasattr(proc, "returncode") else (proc[0], proc[2])
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {code}: "), stderr
    assert returncode == 1, (returncode, stderr)
    return lines[0][len(f"error: {code}: "):]
