"""The schema-change example (examples/schema_change, docs/schema-changes.md) on SQLite and PostgreSQL:
payloads written by the OLD shape of ``MemoTagged`` (committed fixture bytes) are read by the new class
(class_version 2 + upcaster), the view is rebuilt blue/green, and it equals the view the new code builds
from the same facts recorded as new events."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import pytest

from examples.schema_change import memo
from ledger.base import Emitter
from ledger.codec import CodecError
from ledger.store import open_app
from projections import catch_up, open_backend, rebuild
from tests.audit.kit import cli
from tests.conftest import PG_URL, _with_schema, drop_schema
from tests.projections.projection_kit import read_build

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "schema_change" / "fixtures" / "memo_v1.jsonl"
#: the facts the fixture holds (see examples/schema_change/make_fixture.py)
MEMOS = [
    (uuid.UUID("00000000-0000-4000-8000-00000000e001"), "Release checklist", ["urgent", "ops", "release"]),
    (uuid.UUID("00000000-0000-4000-8000-00000000e002"), "Ideas", ["later"]),
    (uuid.UUID("00000000-0000-4000-8000-00000000e003"), "Empty memo", []),
]
START = datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def new_url(db_url, tmp_path) -> Iterator[str]:
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'new.db'}"
        return
    url = _with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}")
    yield url
    drop_schema(url)


def record_with_new_code(app) -> None:
    """The same facts, recorded as new events by the current code (v2 shape)."""
    for i, (memo_id, title, tags) in enumerate(MEMOS):
        t = START + timedelta(hours=i)
        em = Emitter(memo_id, 0, t)
        em.emit(memo.MemoOpened, originator_topic=memo.MemoAggregate.TOPIC, title=title)
        agg = memo.MemoAggregate.start(em.events)
        for j, tag in enumerate(tags):
            em = Emitter(memo_id, agg.version, t + timedelta(minutes=j + 1))
            em.emit(memo.MemoTagged, tags=[tag], source="user")
            agg.record(em.events)
        app.save(agg)


def build_view_blue_green(url: str) -> tuple[dict, object]:
    app, backend = open_app(url), open_backend(url)
    try:
        catch_up(app, memo.MemoTags(app), backend)
        result = rebuild(app, memo.MemoTags(app), backend, blue_green=True)
        return read_build(backend, memo.MemoTags(app)), result
    finally:
        backend.close()
        app.close()


def test_old_payloads_are_upcast_and_views_equal_the_new_codes(db_url, new_url):
    lines = FIXTURE.read_bytes().splitlines()
    old_payloads = [json.loads(json.loads(line)["json"]) for line in lines[1:]]
    assert [p["tag"] for p in old_payloads if "tag" in p] == ["urgent", "ops", "release", "later"]  # the old shape
    assert all("class_version" not in p and "tags" not in p for p in old_payloads)

    cli(db_url, "events", "import", "--unverified", str(FIXTURE))  # (a version 1 file: made before hash chains)
    app = open_app(db_url)
    try:
        for memo_id, title, tags in MEMOS:
            agg = app.load(memo_id)
            assert type(agg) is memo.MemoAggregate  # the renamed class, found by its stable topic
            assert agg.state.title == title and agg.state.tags == tags
            tagged = [e for e in app.stream(memo_id) if isinstance(e, memo.MemoTagged)]
            assert all(len(e.tags) == 1 and e.source == "user" for e in tagged)
        # a payload newer than the code, and one the upcaster cannot read, fail naming the topic
        with pytest.raises(CodecError, match=r"MemoTagged .*class_version 3 is newer"):
            app.mapper.decode_payload(memo.MemoTagged.TOPIC, b'{"timestamp":"2026-01-01T00:00:00Z","tags":[],'
                                                            b'"source":"x","class_version":3}')
        with pytest.raises(CodecError, match="chat-ledger-example:memo.MemoTagged"):
            app.mapper.decode_payload(memo.MemoTagged.TOPIC, b'{"timestamp":"2026-01-01T00:00:00Z","tag":7}')
    finally:
        app.close()

    stats = {(r["topic"], r["class_version"]): r for r in
             (json.loads(x) for x in cli(db_url, "events", "stats", "--json").output.splitlines())}
    assert stats[(memo.MemoTagged.TOPIC, 1)]["count"] == 4
    assert stats[(memo.MemoTagged.TOPIC, 1)]["code_class_version"] == 2
    assert json.loads(cli(db_url, "events", "verify", "--json").stdout)["ok"] is True

    upcast_view, result = build_view_blue_green(db_url)
    assert result.mode == "blue_green" and result.diff.equal and result.switched and result.to_version == 2

    app = open_app(new_url)
    try:
        record_with_new_code(app)
        # the new code writes the v2 shape
        raw = [n.state for n in app.notifications(0, 100) if n.topic == memo.MemoTagged.TOPIC]
        assert all(json.loads(r)["class_version"] == 2 for r in raw)
    finally:
        app.close()
    new_view, _ = build_view_blue_green(new_url)
    assert upcast_view == new_view
    assert [r["tags"] for r in upcast_view["memos"]] == [["urgent", "ops", "release"], ["later"], []]

    # new events on the upcast ledger fold on top of the upcast ones
    app, backend = open_app(db_url), open_backend(db_url)
    try:
        agg = app.load(MEMOS[1][0])
        em = Emitter(agg.id, agg.version, START + timedelta(days=1))
        em.emit(memo.MemoTagged, tags=["later", "big"], source="bot")
        agg.record(em.events)
        app.save(agg)
        catch_up(app, memo.MemoTags(app), backend)
        row = backend.query("memo_tags", "memos", where={"memo_id": str(MEMOS[1][0])})[0]
        assert row["tags"] == ["later", "big"] and row["sources"] == ["user", "bot"]
    finally:
        backend.close()
        app.close()
