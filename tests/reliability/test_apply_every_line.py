"""``chat-ledger apply`` answers every line (issue 13 point 5): input is read as bytes, every non-blank line
gets exactly one result line, in order, whatever it holds, and results are written as each line is run.

The reproductions run the real ``chat-ledger`` console script in a subprocess: a line nested 1,000 levels
deep (a RecursionError traceback before), an invalid UTF-8 byte at line 300 of 500 (a UnicodeDecodeError
traceback after 274 results before, the rest neither run nor reported), a UTF-8 byte order mark on line 1
(line 1 malformed before). ``apply -`` is driven through a real pipe: each result is read before the next
line is written. A hypothesis fuzz test feeds arbitrary bytes per line through the CLI.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.cli.main import main
from ledger.store import open_app
from tests.chat.helpers import ORG, OWNER, setup_org

CHAT_LEDGER = str(Path(sys.executable).with_name("chat-ledger"))


def _ready(url: str) -> None:
    app = open_app(url)
    try:
        setup_org(app)
    finally:
        app.close()


def _create(title: str) -> bytes:
    return json.dumps({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER, "text": "hi",
                       "title": title, "initial_status": "waiting"}).encode()


def _apply_file(url: str, path: Path) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run([CHAT_LEDGER, "--db", url, "apply", str(path)], capture_output=True, timeout=300)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    return proc.returncode, results, proc.stderr.decode("utf-8", "replace")


def test_deeply_nested_line_is_refused_alone(sqlite_url, tmp_path):
    _ready(sqlite_url)
    # retry_state is any JSON object: the decoder descends into it
    deep = b'{"type": "record_retry_state", "chat_id": "' + str(uuid.uuid4()).encode() + b'", "retry_state": ' \
        + b'{"a": ' + b"[" * 1000 + b"]" * 1000 + b"}}"
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b"\n".join([_create("before"), deep, b"[" * 100_000, _create("after")]) + b"\n")
    code, results, stderr = _apply_file(sqlite_url, path)
    assert "Traceback" not in stderr
    assert code == 1
    assert [r["line"] for r in results] == [1, 2, 3, 4]
    assert [r["ok"] for r in results] == [True, False, False, True]
    assert results[1]["error"]["code"] == results[2]["error"]["code"] == "invalid_command"
    assert "nested too deeply" in results[1]["error"]["message"]


def test_invalid_utf8_byte_at_line_300_of_500(sqlite_url, tmp_path):
    _ready(sqlite_url)
    lines = [_create(f"t{n}") for n in range(1, 501)]
    lines[299] = lines[299].replace(b"t300", b"t3\xff00")
    path = tmp_path / "utf8.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    code, results, stderr = _apply_file(sqlite_url, path)
    assert "Traceback" not in stderr
    assert code == 1
    assert [r["line"] for r in results] == list(range(1, 501))
    assert [r["line"] for r in results if not r["ok"]] == [300]
    assert results[299]["error"]["code"] == "invalid_command"
    assert "UTF-8" in results[299]["error"]["message"]
    # the 499 other commands were all run: 499 chats recorded
    out = subprocess.run([CHAT_LEDGER, "--db", sqlite_url, "status", "--json"], capture_output=True, check=True)
    titles = sorted(json.loads(line)["title"] for line in out.stdout.splitlines())
    assert titles == sorted(f"t{n}" for n in range(1, 501) if n != 300)


def test_byte_order_mark_on_line_one_is_ignored(sqlite_url, tmp_path):
    _ready(sqlite_url)
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _create("first") + b"\n" + _create("second") + b"\n")
    code, results, stderr = _apply_file(sqlite_url, path)
    assert code == 0, (results, stderr)
    assert [(r["line"], r["ok"], r["type"]) for r in results] == [(1, True, "create_chat"), (2, True, "create_chat")]


def _read_line(proc: subprocess.Popen, deadline: float) -> bytes:
    """One line of the child's stdout, waiting (on the pipe, not on time) until it arrives or the deadline."""
    buf = b""
    fd = proc.stdout.fileno()
    while not buf.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no result line within the deadline (got {buf!r})"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 1)
            assert chunk, f"apply closed its output early (got {buf!r})"
            buf += chunk
    return buf


def test_apply_stdin_streams_one_result_per_line(sqlite_url):
    """A client writing to ``apply -`` reads each result before it sends the next line (the pipe stays open)."""
    _ready(sqlite_url)
    proc = subprocess.Popen([CHAT_LEDGER, "--db", sqlite_url, "apply", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        chat_id = None
        deadline = time.monotonic() + 120
        proc.stdin.write(_create("streamed") + b"\n")
        proc.stdin.flush()
        first = json.loads(_read_line(proc, deadline))
        assert first["line"] == 1 and first["ok"] is True
        chat_id = first["result"]["chat_id"]
        # the next command depends on the first result: only a streaming apply can be driven like this
        for n in range(2, 6):
            line = json.dumps({"type": "set_title", "chat_id": chat_id, "title": f"v{n}"}).encode()
            proc.stdin.write(line + b"\n")
            proc.stdin.flush()
            result = json.loads(_read_line(proc, deadline))
            assert result["line"] == n and result["ok"] is True
            assert result["result"]["version"] == n
        proc.stdin.write(b"not json\n")
        proc.stdin.flush()
        bad = json.loads(_read_line(proc, deadline))
        assert bad["line"] == 6 and bad["error"]["code"] == "invalid_command"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 1
        assert proc.stdout.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- fuzz ------------------------------------------------------------------------------------------------

def _valid_lines() -> list[bytes]:
    chat = str(uuid.uuid4())
    return [
        _create("fuzz"),
        json.dumps({"type": "set_title", "chat_id": chat, "title": "x"}).encode(),
        json.dumps({"type": "add_organization_member", "organization_id": ORG, "user_id": str(uuid.uuid4())}).encode(),
        json.dumps({"type": "conversation_start"}).encode(),
    ]


@st.composite
def fuzz_line(draw: Any) -> bytes:
    """Arbitrary bytes, or a valid command with bytes overwritten or inserted (never a newline: one line)."""
    kind = draw(st.sampled_from(["bytes", "mutated", "valid", "blank", "deep"]))
    if kind == "bytes":
        line = draw(st.binary(max_size=80))
    elif kind == "blank":
        line = draw(st.sampled_from([b"", b" ", b"\t", b"\r", b" \r "]))
    elif kind == "deep":
        n = draw(st.integers(min_value=500, max_value=5000))
        line = draw(st.sampled_from([b"[" * n, b"[" * n + b"]" * n, b'{"type":"set_title","a":' + b"[" * n]))
    else:
        line = draw(st.sampled_from(_valid_lines()))
        if kind == "mutated":
            for _ in range(draw(st.integers(min_value=1, max_value=3))):
                at = draw(st.integers(min_value=0, max_value=len(line)))
                junk = draw(st.binary(min_size=1, max_size=3))
                line = line[:at] + junk + line[at + draw(st.integers(min_value=0, max_value=1)):]
    return line.replace(b"\n", b"")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(lines=st.lists(fuzz_line(), min_size=1, max_size=12), bom=st.booleans())
def test_fuzz_every_nonblank_line_gets_one_result_in_order(sqlite_url, lines, bom):
    data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + b"\n"
    result = CliRunner().invoke(main, ["--db", sqlite_url, "apply", "-"], input=data)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code in (0, 1), result.output
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    first = (b"\xef\xbb\xbf" if bom else b"") + lines[0]
    first = first[3:] if first.startswith(b"\xef\xbb\xbf") else first  # one BOM opening line 1 is ignored
    expected = [n for n, line in enumerate([first, *lines[1:]], start=1) if line.strip()]
    assert [a["line"] for a in answers] == expected
    assert result.exit_code == (1 if any(not a["ok"] for a in answers) else 0)
    for a in answers:
        assert set(a) == {"line", "ok", "type", "result" if a["ok"] else "error"}
        if not a["ok"]:
            assert isinstance(a["error"]["code"], str) and a["error"]["message"]
