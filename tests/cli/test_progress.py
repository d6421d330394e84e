"""Issue 30, point 2: long work shows its progress on stderr — on a terminal a bar with the rate and the time
left, elsewhere a line per interval (``CHAT_LEDGER_PROGRESS_SECONDS``; 0 here: a line at every update) —
for simulate, events verify, export and import, projections rebuild and catch-up; and ``projections status``
explains "not built"."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "commands.cli.main"]


def run(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "CHAT_LEDGER_PROGRESS_SECONDS": "0"}
    out = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, input=stdin, env=env, timeout=300)
    assert out.returncode == 0, out.stderr.decode()
    return out


def test_long_work_writes_progress_lines_when_not_on_a_terminal(tmp_path):
    made = run("simulate", "--chats", "3", "--seed", "7", cwd=tmp_path).stderr.decode()
    assert re.search(r"simulating chats: 3/3 chats \([\d,]+ chats/s\)", made), made
    verified = run("events", "verify", cwd=tmp_path).stderr.decode()
    assert re.search(r"verifying: [\d,]+/[\d,]+ events \([\d,]+ events/s", verified), verified
    export = run("events", "export", "-o", "export.jsonl", cwd=tmp_path).stderr.decode()
    assert "exporting: " in export and "events/s" in export
    imported = run("--db", "sqlite:///copy.db", "events", "import", "export.jsonl", cwd=tmp_path).stderr.decode()
    assert "validating: " in imported and "validated" in imported
    rebuilt = run("projections", "rebuild", "chat_views", cwd=tmp_path).stderr.decode()
    assert "rebuilding chat_views: " in rebuilt
    caught = run("--db", "sqlite:///copy.db", "projections", "catch-up", cwd=tmp_path).stderr.decode()
    assert "catching up chat_views: " in caught


def test_on_a_terminal_it_is_a_bar_with_the_rate(tmp_path):
    parent, child = pty.openpty()
    env = {**os.environ, "CHAT_LEDGER_PROGRESS_SECONDS": "0", "COLUMNS": "120"}
    proc = subprocess.Popen([*CLI, "simulate", "--chats", "3", "--seed", "7"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=child, env=env)
    os.close(child)
    seen = b""
    while True:
        try:
            chunk = os.read(parent, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=300) == 0
    text = seen.decode(errors="replace")
    assert "simulating chats" in text and "chats/s" in text and "3/3" in text, text
    assert "simulating chats: 3/3" not in text  # a bar, not the lines


def test_projections_status_explains_not_built(tmp_path):
    run("init", cwd=tmp_path)
    out = run("projections", "status", cwd=tmp_path).stdout.decode()
    assert "not built: chat_views" in out and "projections catch-up" in out
