"""Storage that refuses writes, and a database that is not there: clear errors naming the problem, and
the data left as it was.

* read-only SQLite: a file made immutable (``chattr +i``: the suite runs as root, for whom mode bits do
  not make a file read-only), a folder made immutable, and a database opened with ``mode=ro``;
* full SQLite: the CLI runs with ``RLIMIT_FSIZE`` just above the file's size (SIGXFSZ ignored), so every
  write past it fails as on a full disk (SQLite reports ``disk I/O error`` for EFBIG). ``PRAGMA
  max_page_count`` would only limit the connection that sets it, not the application's own connections;
* PostgreSQL: nothing listening on the port, and a server without the named database.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

from commands.handler import command_from_dict, execute
from ledger.store import open_app
from tests.chat.helpers import ORG, OWNER, setup_org

ROOT = Path(__file__).resolve().parents[2]


def cli(db: str, *args: str, stdin: str = "", preexec: Any = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", "from commands.cli.main import main; main()", "--db", db, *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=preexec, env=env)


def make_ledger(path: Path) -> str:
    """A ledger with one chat; returns its id."""
    app = open_app(f"sqlite:///{path}")
    setup_org(app)
    chat_id = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                              "text": "hello"}))["chat_id"]
    app.close()
    return chat_id


def event_count(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM stored_events").fetchone()[0]


def send(chat_id: str, text: str) -> str:
    return json.dumps({"type": "send_message", "chat_id": chat_id, "text": text}) + "\n"


@contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """``chattr +i``: not even root may write these (the suite runs as root, for whom mode bits do not
    make a file read-only)."""
    done = []
    try:
        for p in paths:
            if subprocess.run(["chattr", "+i", str(p)], capture_output=True).returncode != 0:
                pytest.skip("chattr +i is not available on this file system")
            done.append(p)
        yield
    finally:
        for p in done:
            subprocess.run(["chattr", "-i", str(p)], capture_output=True)


def test_read_only_sqlite_file_is_named(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    chat_id = make_ledger(db)
    before = event_count(db)
    os.chmod(db, 0o444)
    with immutable(db):
        r = cli(f"sqlite:///{db}", "apply", "-", stdin=send(chat_id, "more"))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.strip() == f"error: database_unavailable: SQLite file is read-only: {db}"
    assert "Traceback" not in r.stderr + r.stdout
    assert event_count(db) == before


def test_sqlite_opened_read_only_refuses_each_write_by_name(tmp_path: Path) -> None:
    """SQLite's own refusal (``mode=ro``): every command is refused with the database named; reads work."""
    db = tmp_path / "ledger.db"
    chat_id = make_ledger(db)
    before = event_count(db)
    r = cli(f"sqlite:///file:{db}?mode=ro", "apply", "-", stdin=send(chat_id, "one") + send(chat_id, "two"))
    results = [json.loads(line) for line in r.stdout.split("\n") if line.strip()]
    assert r.returncode == 1 and "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    assert [x["ok"] for x in results] == [False, False]
    for x in results:
        assert x["error"]["code"] == "database_unavailable"
        assert str(db) in x["error"]["message"] and "readonly" in x["error"]["message"]
    shown = cli(f"sqlite:///file:{db}?mode=ro", "show", chat_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert [m["parts"][0]["text"] for m in json.loads(shown.stdout)["messages"]] == ["hello"]
    assert event_count(db) == before


def test_read_only_sqlite_folder_is_named(tmp_path: Path) -> None:
    """The file is writable but its folder is not: SQLite's WAL file cannot be made."""
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "ledger.db"
    chat_id = make_ledger(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for f in folder.iterdir():
        if f.name != "ledger.db":
            f.unlink()
    before = event_count(db)
    for f in folder.iterdir():
        if f.name != "ledger.db":
            f.unlink()
    with immutable(folder):
        r = cli(f"sqlite:///{db}", "apply", "-", stdin=send(chat_id, "more"))
    out = r.stderr + r.stdout
    assert r.returncode == 1, out
    assert "Traceback" not in out
    assert "database_unavailable" in out and str(db) in out, out
    assert event_count(db) == before


def test_full_sqlite_file_is_named_and_nothing_is_half_written(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    chat_id = make_ledger(db)
    with sqlite3.connect(db) as conn:  # fold the WAL into the file: later writes go to a new WAL
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = event_count(db)
    limit = db.stat().st_size + 64 * 1024

    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    small, big = "a small one", "x" * 200_000  # the big message cannot fit in what is left (and is under max_prompt_bytes)
    r = cli(f"sqlite:///{db}", "apply", "-", stdin=send(chat_id, small) + send(chat_id, big) + send(chat_id, small),
            preexec=full_disk)
    results = [json.loads(line) for line in r.stdout.split("\n") if line.strip()]
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]
    assert r.returncode == 1
    assert [x["ok"] for x in results] == [True, False, True]
    error = results[1]["error"]
    # SQLite reports a write past the file size limit (EFBIG) as an I/O error; ENOSPC would say "full"
    assert error["code"] == "database_unavailable", error
    assert str(db) in error["message"] and ("disk I/O error" in error["message"] or "full" in error["message"]), error
    # the refused command left nothing; the others are there, once
    assert event_count(db) == before + 2
    shown = cli(f"sqlite:///{db}", "show", chat_id, "--json")
    data = json.loads(shown.stdout)  # the chat is running: the sends were queued
    assert [m["parts"][0]["text"] for m in data["messages"]] == ["hello"]
    assert [q["text"] for q in data["queue"]] == [small, small]


def test_unreachable_postgres_is_named() -> None:
    r = cli("postgresql://postgres@127.0.0.1:1/postgres", "status", timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("error: database_unavailable: cannot reach PostgreSQL at 127.0.0.1:1/postgres:"), r.stderr
    assert "Traceback" not in r.stderr


def test_missing_postgres_database_is_named() -> None:
    from tests.conftest import require_pg

    require_pg()
    name = f"no_such_db_{uuid.uuid4().hex[:6]}"
    r = cli(f"postgresql://postgres@127.0.0.1:5432/{name}", "apply", "-", stdin=send(str(uuid.uuid4()), "hi"))
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: database_unavailable: cannot reach PostgreSQL at 127.0.0.1:5432/{name}:")
    assert f'database "{name}" does not exist' in r.stderr
