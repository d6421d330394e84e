"""``events export`` -> ``events import`` into an empty database: the same streams, versions, order and
payload bytes; verify passes on the copy; the views built on the copy equal the original's. On SQLite and
PostgreSQL (a few thousand events; the 100,000-event run is by hand, see docs/commands.md)."""

from __future__ import annotations

import json
import uuid
from typing import Iterator

import pytest

from commands.views import all_projections
from commands.tools.workload import generate
from ledger.store import open_app
from projections import open_backend
from tests.audit.kit import cli
from tests.conftest import PG_URL, _with_schema, drop_schema
from tests.projections.projection_kit import read_build


@pytest.fixture
def copy_url(db_url, tmp_path) -> Iterator[str]:
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'copy.db'}"
        return
    url = _with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}")
    yield url
    drop_schema(url)


def _stored(url: str) -> list[tuple]:
    app = open_app(url)
    try:
        rows, start = [], 0
        while notes := app.notifications(start, 1000):
            rows.extend((str(n.originator_id), n.originator_version, n.topic, bytes(n.state)) for n in notes)
            start = notes[-1].id
        return rows
    finally:
        app.close()


def _views(url: str) -> dict:
    app = open_app(url)
    backend = open_backend(url)
    try:
        return {p.name: read_build(backend, p) for p in all_projections(app) if p.name in ("chat_views", "conversations")}
    finally:
        backend.close()
        app.close()


def test_export_import_round_trip(db_url, copy_url, tmp_path):
    app = open_app(db_url)
    try:
        n = generate(app, 3000, seed=11)
        head = app.head()
    finally:
        app.close()
    assert head >= 3000 and n >= 2900
    cli(db_url, "conversation", "start")  # one more aggregate type in the copy
    export = tmp_path / "events.jsonl"
    cli(db_url, "events", "export", "-o", str(export))
    lines = export.read_bytes().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "chat-ledger-events" and header["version"] == 2 and len(lines) == head + 2
    assert all("json" in json.loads(line) for line in lines[1:20])  # JSON payloads kept as text
    assert all(len(json.loads(line)["hash"]) == 64 for line in lines[1:])  # every event's chain hash
    out = cli(copy_url, "events", "import", str(export)).stdout  # (its progress goes to stderr)
    assert out.strip() == f"imported {head + 1} events"
    original, copy = _stored(db_url), _stored(copy_url)
    assert copy == original  # streams, versions, order, topics and payload bytes
    report = json.loads(cli(copy_url, "events", "verify", "--json").stdout)
    assert report["ok"] is True and report["events"] == head + 1
    # the copy's chains are the original's: same digest, same head hashes
    before = json.loads(cli(db_url, "events", "verify", "--json", "--no-projections").stdout)["chain"]
    assert report["chain"]["digest"] == before["digest"] and report["chain"]["heads"] == before["heads"]
    assert report["chain"]["broken"] == report["chain"]["unhashed"] == 0
    cli(db_url, "projections", "rebuild")
    cli(copy_url, "projections", "rebuild")
    assert _views(copy_url) == _views(db_url)
    # importing again is refused: the copy is not empty
    assert "error: database_not_empty:" in cli(copy_url, "events", "import", str(export), code=1).output


def test_export_since_and_msgpack_payloads_as_base64(db_url, tmp_path):
    app = open_app(db_url, payload_format="msgpack")
    try:
        generate(app, 200, seed=3)
        head = app.head()
    finally:
        app.close()
    lines = cli(db_url, "events", "export", "--since", str(head - 5)).stdout.splitlines()
    body = [json.loads(line) for line in lines[1:]]
    assert json.loads(lines[0])["since"] == head - 5 and len(body) == 5
    assert [b["id"] for b in body] == list(range(head - 4, head + 1))
    # msgpack payloads (from the chats) are base64; their bytes come back exactly
    chat_lines = [b for b in body if b["topic"].startswith("chat-ledger:chat.")]
    assert chat_lines and all("b64" in b and "json" not in b for b in chat_lines)


def test_import_rejects_bad_files(db_url, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "an export"}\n')
    assert "error: invalid_export:" in cli(db_url, "events", "import", str(bad), code=1).output
    bad.write_text('{"format": "chat-ledger-events", "version": 2}\n{"id": 1, "stream": "x"}\n')
    assert "error: invalid_export: line 2" in cli(db_url, "events", "import", str(bad), code=1).output
