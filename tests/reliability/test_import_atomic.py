"""``events import`` is validated and atomic (issue 13 point 4), on SQLite and PostgreSQL.

* A real ``chat-ledger events import`` subprocess is SIGKILLed while its one transaction is open (seen from
  outside: PostgreSQL lists its EXCLUSIVE lock on the events table; on SQLite another connection cannot
  take the write lock) and while it is still reading its input (a pipe the test holds open); nothing is
  left behind, and the same command run again gives a copy equal to the source (exported again and
  compared line by line, but for notification ids, which the database assigns).
* Each corrupted export — a truncated line, a file cut at a line boundary, an unknown topic, an
  undecodable payload, version -1 / 0 / huge, a missing line (with and without ``prev``), a duplicate,
  out-of-order ids, bad base64, both payload forms, a line that is not an object or is nested too deeply,
  a bad, missing or partial header — is refused with ``invalid_export`` naming the line, and nothing is
  written (the target's head stays 0). Before the fix these were imported with exit 0 (then ``status``
  failed on every chat), ended in tracebacks, or left the first 1,000-line batches behind.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg
import pytest

from commands.eventlog_transfer import export_lines
from commands.tools.workload import generate
from commands.handler import command_from_dict, execute
from ledger.store import DatabaseURL, open_app
from tests.audit.kit import cli
from tests.conftest import PG_URL, _with_schema, drop_schema
from tests.reliability.kit import admin_conninfo, wait_for

CHAT_LEDGER = str(Path(sys.executable).with_name("chat-ledger"))


def _export(app: Any) -> list[bytes]:
    return list(export_lines(app))


@pytest.fixture(scope="module")
def small_export(tmp_path_factory) -> list[bytes]:
    """About 1,200 events of chats, catalogs and a conversation (JSON payloads), exported."""
    path = tmp_path_factory.mktemp("small") / "src.db"
    app = open_app(f"sqlite:///{path}")
    try:
        generate(app, 1200, seed=21, interleave=6)
        execute(app, command_from_dict({"type": "conversation_start"}))
        return _export(app)
    finally:
        app.close()


@pytest.fixture(scope="module")
def big_export(tmp_path_factory) -> Path:
    """About 15,000 events, exported to a file: enough for the import's transaction to be caught open."""
    folder = tmp_path_factory.mktemp("big")
    app = open_app(f"sqlite:///{folder / 'src.db'}")
    try:
        generate(app, 15_000, seed=22, interleave=8)
        path = folder / "export.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in _export(app)))
        return path
    finally:
        app.close()


def _events_of(lines: list[bytes]) -> list[dict[str, Any]]:
    """The export's event lines without what the database assigns (notification ids and ``prev``)."""
    out = []
    for line in lines[1:]:
        obj = json.loads(line)
        obj.pop("id")
        obj.pop("prev", None)
        out.append(obj)
    return out


def _head(url: str) -> int:
    app = open_app(url)
    try:
        return app.head()
    finally:
        app.close()


# -- SIGKILL ---------------------------------------------------------------------------------------------

def _transaction_open(url: str) -> Callable[[], bool]:
    """Whether some process holds the import's write transaction open on ``url``'s event store."""
    db = DatabaseURL.parse(url)
    if db.backend == "sqlite":
        def sqlite_locked() -> bool:
            probe = sqlite3.connect(db.path, timeout=0, isolation_level=None)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
                return False
            except sqlite3.OperationalError as e:
                assert "locked" in str(e), e
                return True
            finally:
                probe.close()
        return sqlite_locked

    def pg_locked() -> bool:
        with psycopg.connect(admin_conninfo(url), autocommit=True) as conn:
            return conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                "AND c.relname = 'chatledger_events' AND l.mode = 'ExclusiveLock' AND l.granted",
                (db.schema,)).fetchone()[0] > 0
    return pg_locked


@pytest.fixture
def fresh_url(db_url, tmp_path) -> Iterator[Callable[[], str]]:
    """Makes further empty databases of ``db_url``'s backend (each attempt of a test gets its own)."""
    made: list[str] = []

    def make() -> str:
        if db_url.startswith("sqlite"):
            url = f"sqlite:///{tmp_path / f'copy{len(made)}.db'}"
        else:
            url = _with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}")
        made.append(url)
        return url

    yield make
    for url in made:
        if not url.startswith("sqlite"):
            drop_schema(url)


def _import(url: str, path: Path | str, **kw: Any) -> subprocess.Popen:
    return subprocess.Popen([CHAT_LEDGER, "--db", url, "events", "import", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def _assert_copy_equals_source(url: str, source: Path) -> None:
    app = open_app(url)
    try:
        copy = _export(app)
    finally:
        app.close()
    assert _events_of(copy) == _events_of(source.read_bytes().splitlines())


def test_sigkill_during_the_import_transaction_then_the_same_command_finishes(db_url, fresh_url, big_export):
    total = len(big_export.read_bytes().splitlines()) - 1
    caught_open = 0
    for _ in range(3):  # a kill that lands after the commit proves nothing: try again on a fresh database
        url = fresh_url()
        cli(url, "init")  # the tables exist: the only write lock the import takes is its transaction's
        is_open = _transaction_open(url)
        proc = _import(url, big_export)
        try:
            wait_for(lambda: is_open() or proc.poll() is not None, 120, "the import's transaction to open")
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
        head = _head(url)
        assert head in (0, total), f"a killed import left {head} of {total} events"
        if proc.returncode != -signal.SIGKILL or head != 0:
            continue  # it had finished before the signal
        caught_open += 1
        rerun = _import(url, big_export)
        out, err = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, err.decode()
        assert out.decode().strip() == f"imported {total} events"
        _assert_copy_equals_source(url, big_export)
        report = json.loads(cli(url, "events", "verify", "--json", "--no-projections").stdout)
        assert report["ok"] is True and report["events"] == total
        break
    assert caught_open, "the import's transaction was never caught open"


def test_sigkill_while_reading_the_input_leaves_nothing(db_url, fresh_url, big_export):
    url = fresh_url()
    lines = big_export.read_bytes().splitlines(keepends=True)
    proc = _import(url, "-", stdin=subprocess.PIPE)
    try:
        proc.stdin.write(b"".join(lines[: len(lines) // 2]))
        proc.stdin.flush()
        # the importer cannot be past its first pass: the input is still open
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
    assert proc.returncode == -signal.SIGKILL
    assert _head(url) == 0
    rerun = _import(url, big_export)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    _assert_copy_equals_source(url, big_export)


# -- corrupted exports -----------------------------------------------------------------------------------

def _set(line: bytes, **fields: Any) -> bytes:
    obj = json.loads(line)
    for k, v in fields.items():
        if v is None:
            obj.pop(k, None)
        else:
            obj[k] = v
    return json.dumps(obj).encode()


def _unchained(lines: list[bytes]) -> list[bytes]:
    """The export as the code before ``prev`` wrote it."""
    return [lines[0], *(_set(line, prev=None) for line in lines[1:])]


def _pick(lines: list[bytes], where: Callable[[list[dict[str, Any]], int], bool]) -> int:
    objs = [json.loads(line) for line in lines]
    return next(i for i in range(len(lines) // 2, len(lines) - 1) if where(objs, i))


def _mid_stream(objs: list[dict[str, Any]], i: int) -> bool:
    """Line ``i`` is an event whose stream has a later event (so dropping it leaves a version gap)."""
    return any(o["stream"] == objs[i]["stream"] for o in objs[i + 1:])


def _other_stream_next(objs: list[dict[str, Any]], i: int) -> bool:
    return objs[i]["stream"] != objs[i + 1]["stream"] and objs[i]["version"] > 1 and objs[i + 1]["version"] > 1


def _next_of_stream(lines: list[bytes], i: int) -> int:
    stream = json.loads(lines[i])["stream"]
    return next(j for j in range(i + 1, len(lines)) if json.loads(lines[j])["stream"] == stream)


Corruption = Callable[[list[bytes]], tuple[list[bytes], int, str]]


def _truncated_line(lines):
    k = len(lines) // 2
    return lines[:k] + [lines[k][: len(lines[k]) // 2]], k + 1, "not an exported event"


def _cut_at_line(lines):
    k = len(lines) // 2
    return lines[:k], k, "it is truncated"


def _field(k_of: Callable[[list[bytes]], int], reason: str, **fields: Any) -> Corruption:
    def corrupt(lines):
        k = k_of(lines)
        return lines[:k] + [_set(lines[k], **fields)] + lines[k + 1:], k + 1, reason
    return corrupt


def _middle(lines: list[bytes]) -> int:
    return len(lines) // 2


def _missing_line(lines):
    j = _pick(lines, _mid_stream)
    return lines[:j] + lines[j + 1:], j + 1, "a line is missing"


def _missing_line_without_prev(lines):
    lines = _unchained(lines)
    j = _pick(lines, _mid_stream)
    later = _next_of_stream(lines, j)
    return lines[:j] + lines[j + 1:], later, "follows version"


def _missing_last_event_of_a_stream(lines):
    j = _pick(lines, lambda objs, i: not _mid_stream(objs, i))
    return lines[:j] + lines[j + 1:], j + 1, "a line is missing"


def _duplicate(lines):
    k = _pick(lines, _mid_stream)
    last = json.loads(lines[-1])["id"]
    return lines + [_set(lines[k], id=last + 1, prev=last)], len(lines) + 1, "a duplicate"


def _out_of_order(lines):
    k = _pick(lines, _other_stream_next)
    return lines[:k] + [lines[k + 1], lines[k]] + lines[k + 2:], k + 1, "out of place"


def _out_of_order_without_prev(lines):
    lines = _unchained(lines)
    k = _pick(lines, _other_stream_next)
    return lines[:k] + [lines[k + 1], lines[k]] + lines[k + 2:], k + 2, "ids increase"


def _replace(k_of: Callable[[list[bytes]], int], new: Callable[[bytes], bytes], reason: str) -> Corruption:
    def corrupt(lines):
        k = k_of(lines)
        return lines[:k] + [new(lines[k])] + lines[k + 1:], k + 1, reason
    return corrupt


def _header(new: bytes, reason: str) -> Corruption:
    return lambda lines: ([new] + lines[1:], 1, reason)


def _middle_json(lines: list[bytes]) -> int:
    return next(i for i in range(len(lines) // 2, len(lines)) if '"timestamp"' in json.loads(lines[i]).get("json", ""))


def _edited_payload(line: bytes) -> bytes:
    """The same event a microsecond later: a payload that decodes, under the hash of the original."""
    obj = json.loads(line)
    payload = json.loads(obj["json"])
    stamp = payload["timestamp"]
    digit = stamp[25] if stamp[19] == "." else None
    assert digit is not None, stamp  # ISO with microseconds: 2024-01-01T00:00:00.123456+00:00
    payload["timestamp"] = stamp[:25] + str((int(digit) + 1) % 10) + stamp[26:]
    return _set(line, json=json.dumps(payload))


def _swapped_in_stream(lines):
    """Two events of one stream trade places (topic, payload and hash): ids, prev and versions still run in
    order, the chain does not."""
    i = _pick(lines, lambda objs, i: objs[i]["version"] > 1 and _mid_stream(objs, i))
    j = _next_of_stream(lines, i)
    a, b = json.loads(lines[i]), json.loads(lines[j])
    swapped = [_set(lines[i], **{k: b.get(k) for k in ("topic", "json", "b64", "hash")}),
               _set(lines[j], **{k: a.get(k) for k in ("topic", "json", "b64", "hash")})]
    return lines[:i] + [swapped[0]] + lines[i + 1:j] + [swapped[1]] + lines[j + 1:], i + 1, "is not the chain hash"


def _both_forms(line: bytes) -> bytes:
    return _set(line, b64="e30=")


CORRUPTIONS: dict[str, Corruption] = {
    "truncated line": _truncated_line,
    "cut at a line boundary": _cut_at_line,
    "unknown topic": _field(_middle, "unknown event topic", topic="chat-ledger:chat.NoSuchEvent"),
    "undecodable payload": _field(_middle, "cannot decode", json='{"timestamp": "yesterday"}'),
    "payload not an object": _field(_middle, "cannot decode", json='{"timestamp": ["x"]'),
    "version -1": _field(_middle, "version -1 follows", version=-1),
    "version 0": _field(_middle, "version 0 follows", version=0),
    "version huge": _field(_middle, "version 4611686018427387904 follows", version=2 ** 62),
    "version beyond 64 bits": _field(_middle, "version 1180591620717411303424 follows", version=2 ** 70),
    "missing line": _missing_line,
    "missing line (export without prev)": _missing_line_without_prev,
    "missing last event of a stream": _missing_last_event_of_a_stream,
    "duplicate": _duplicate,
    "out-of-order ids": _out_of_order,
    "out-of-order ids (export without prev)": _out_of_order_without_prev,
    "bad base64": _field(_middle, "not valid base64", json=None, b64="!!not base64!!"),
    "json and b64": _replace(_middle, _both_forms, "exactly one of json and b64"),
    "not an object": _replace(_middle, lambda _: b"[1, 2, 3]", "not an exported event"),
    "nested too deeply": _replace(_middle, lambda _: b'{"id": ' + b"[" * 5000, "not an exported event"),
    "header not JSON": _header(b"chat-ledger export", "not a chat-ledger export header"),
    "header of another format": _header(b'{"format": "other", "version": 1}', "not a chat-ledger export header"),
    "header of another version": _header(b'{"format": "chat-ledger-events", "version": 3}',
                                         "unsupported export version 3"),
    "hash changed": _field(_middle, "is not the chain hash", hash="00" * 32),
    "hash stripped": _field(_middle, "has no hash", hash=None),
    "a version 1 header (no hashes: edited lines could not be told)": _header(
        b'{"format": "chat-ledger-events", "version": 1}', "Import it with --unverified"),
    "payload edited under its hash": _replace(_middle_json, _edited_payload, "is not the chain hash"),
    "events of a stream swapped": _swapped_in_stream,
    "partial export": _header(b'{"format": "chat-ledger-events", "version": 1, "since": 5, "head": 9}',
                              "partial export"),
    "no header": lambda lines: (lines[1:], 1, "not a chat-ledger export header"),
    "stream not starting with a creation": _field(lambda lines: _pick(lines, lambda objs, i: objs[i]["version"] > 1),
                                                  "not with a creation event", stream=str(uuid.uuid4()), version=1),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corrupted_export_is_refused_naming_the_line_and_nothing_is_written(name, db_url, tmp_path, small_export):
    lines, number, reason = CORRUPTIONS[name](list(small_export))
    path = tmp_path / "corrupt.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    out = cli(db_url, "events", "import", str(path), code=1).output
    assert f"error: invalid_export: line {number}: " in out, out
    assert reason in out, out
    assert "nothing was imported" in out
    assert _head(db_url) == 0


def test_the_uncorrupted_export_imports(db_url, tmp_path, small_export):
    """The control for the table above: the same export, untouched, imports whole."""
    path = tmp_path / "ok.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in small_export))
    assert cli(db_url, "events", "import", str(path)).output.strip() == f"imported {len(small_export) - 1} events"
    app = open_app(db_url)
    try:
        assert _events_of(_export(app)) == _events_of(small_export)
    finally:
        app.close()


def test_an_export_without_prev_still_imports(db_url, tmp_path, small_export):
    path = tmp_path / "old.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in _unchained(list(small_export))))
    assert cli(db_url, "events", "import", str(path)).output.strip() == f"imported {len(small_export) - 1} events"


def test_import_into_a_database_with_events_writes_nothing(db_url, tmp_path, small_export):
    app = open_app(db_url)
    try:
        execute(app, command_from_dict({"type": "conversation_start"}))
        head = app.head()
    finally:
        app.close()
    path = tmp_path / "ok.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in small_export))
    assert "error: database_not_empty:" in cli(db_url, "events", "import", str(path), code=1).output
    assert _head(db_url) == head


def test_empty_file_is_refused(db_url, tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"\n\n")
    assert "error: invalid_export: empty file: no export header" in cli(db_url, "events", "import", str(path),
                                                                         code=1).output
