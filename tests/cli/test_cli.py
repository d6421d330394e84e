"""The ``chat-ledger`` command line (docs/commands.md, "Results" and "CLI") through click's CliRunner, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from click.testing import CliRunner, Result

from commands.base import HANDLERS, command_type
from commands.cli.main import main
from ledger.store import open_app

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "examples" / "scenarios").glob("*.jsonl"))

STATUS_KEYS = {
    "chat_id", "organization_id", "owner_id", "parent_chat_id", "root_chat_id", "title", "status",
    "execution_state", "archived", "queue_length", "editing_queued_message_id", "last_error",
    "requires_action_deadline_at",
    "compaction_requested_at", "hook_allowed_tools", "model_config_id", "turn_id", "generation_attempt",
    "history_version", "worker_id", "runner_id", "message_count", "version", "updated_at",
    "title_source", "plan_mode", "pinned_at", "workspace_id", "build_id", "agent_id", "shared", "labels",
}
MESSAGE_KEYS = {"message_id", "role", "parts", "visibility", "turn_id", "created_by", "model_config_id", "deleted",
                "compressed", "created_at", "usage"}
QUEUE_KEYS = {"chat_id", "queued_message_id", "position", "created_by", "text", "turn_id", "hook_prefix",
              "hook_allowed_tools", "model_config_id", "reasoning_effort", "editing_since"}
UNRESOLVED_KEYS = {"chat_id", "assistant_message_id", "tool_call_id", "tool_name", "kind", "execution_id", "args",
                   "since"}
#: every chat command result has these (docs/commands.md, "Results"); others "as relevant" (and fields may be added)
RESULT_KEYS = {"chat_id", "status", "execution_state", "archived", "queue_length", "version"}
CHAT_COMMAND_TYPES = {command_type(c) for c in HANDLERS if c.__module__ == "commands.chat_messages"}


class LedgerCLI:
    """Runs the CLI against one database URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.runner = CliRunner()

    def run(self, *args: str, input: str | None = None, db: bool = True, env: dict[str, str] | None = None) -> Result:
        argv = (["--db", self.url] if db else []) + list(args)
        result = self.runner.invoke(main, argv, input=input, env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    def json_lines(self, *args: str, **kw: Any) -> tuple[list[dict[str, Any]], Result]:
        result = self.run(*args, **kw)
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()], result

    def head(self) -> int:
        app = open_app(self.url)
        try:
            return app.head()
        finally:
            app.close()


@pytest.fixture
def cli(db_url: str) -> LedgerCLI:
    return LedgerCLI(db_url)


def jsonl(*commands: dict[str, Any]) -> str:
    return "".join(json.dumps(c) + "\n" for c in commands)


def new_org(cli: LedgerCLI, *members: str) -> str:
    """A fresh organization with these members and a default model (chats need both); returns its id."""
    org = str(uuid4())
    out, result = cli.json_lines("apply", "-", input=jsonl(
        *({"type": "add_organization_member", "organization_id": org, "user_id": m} for m in members),
        {"type": "create_model_config", "organization_id": org, "provider": "anthropic", "model": "claude-sonnet-4-5",
         "context_limit": 200000, "is_default": True},
    ))
    assert result.exit_code == 0, out
    return org


def assert_result_shape(result: dict[str, Any]) -> None:
    """The docs/commands.md, "Results" shape of a chat command result."""
    assert RESULT_KEYS <= set(result), sorted(result)
    UUID(result["chat_id"])
    assert isinstance(result["version"], int) and result["version"] >= 1
    assert isinstance(result["archived"], bool) and isinstance(result["queue_length"], int)


def assert_output_line(out: dict[str, Any], number: int, ctype: Any) -> None:
    assert out["line"] == number and out["type"] == ctype
    if out["ok"] is True:
        assert set(out) == {"line", "ok", "type", "result"}
        assert isinstance(out["result"], dict)
        if ctype in CHAT_COMMAND_TYPES:
            assert_result_shape(out["result"])
    else:
        assert out["ok"] is False
        assert set(out) == {"line", "ok", "type", "error"}
        assert set(out["error"]) == {"code", "message"}
        assert isinstance(out["error"]["code"], str) and out["error"]["message"]


# -- 1. apply the example scenarios ----------------------------------------------------------------------

@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_apply_scenario(cli: LedgerCLI, scenario: Path) -> None:
    expected = json.loads(scenario.with_name(scenario.stem + ".expected.json").read_text(encoding="utf-8"))
    lines = scenario.read_text(encoding="utf-8").splitlines()
    numbered = {n: json.loads(line) for n, line in enumerate(lines, start=1) if line.strip()}

    out, result = cli.json_lines("apply", str(scenario))
    assert [o["line"] for o in out] == list(numbered)
    for raw, parsed in zip(result.stdout.splitlines(), out):  # compact JSON, one object per line
        assert raw == json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    for o in out:
        assert_output_line(o, o["line"], numbered[o["line"]]["type"])
    refused = {str(o["line"]): o["error"]["code"] for o in out if not o["ok"]}
    assert refused == expected["refused"]
    assert result.exit_code == (1 if expected["refused"] else 0)
    assert result.stderr == ""

    rows, status = cli.json_lines("status", "--json")
    assert status.exit_code == 0
    for row in rows:
        assert set(row) == STATUS_KEYS
    by_id = {r["chat_id"]: r for r in rows}
    for chat_id, state in expected["states"].items():
        assert by_id[chat_id]["execution_state"] == state, chat_id
        # the last successful result for the chat agrees with the status view
        last = [o["result"] for o in out if o["ok"] and o["result"].get("chat_id") == chat_id][-1]
        assert last["version"] <= by_id[chat_id]["version"]
        (one,), _ = cli.json_lines("status", chat_id, "--json")
        assert one == by_id[chat_id]


def test_apply_all_ok_exits_0(cli: LedgerCLI, tmp_path: Path) -> None:
    chat_id, owner = str(uuid4()), str(uuid4())
    org = new_org(cli, owner)
    path = tmp_path / "ok.jsonl"
    path.write_text(jsonl(
        {"type": "create_chat", "chat_id": chat_id, "organization_id": org, "owner_id": owner, "text": "hello"},
        {"type": "commit_step", "chat_id": chat_id, "messages": [{"role": "assistant", "parts": [
            {"type": "text", "text": "hi"}]}]},
        {"type": "finish_turn", "chat_id": chat_id},
    ), encoding="utf-8")
    out, result = cli.json_lines("apply", str(path))
    assert result.exit_code == 0 and [o["ok"] for o in out] == [True, True, True]
    assert [o["result"]["version"] for o in out] == [1, 2, 3]
    assert out[-1]["result"]["execution_state"] == "W"


# -- 2. malformed input ------------------------------------------------------------------------------------

def test_apply_malformed_lines_are_refused_and_record_nothing(cli: LedgerCLI) -> None:
    chat_id, owner = str(uuid4()), str(uuid4())
    org = new_org(cli, owner)
    (created,), _ = cli.json_lines("apply", "-", input=jsonl(
        {"type": "create_chat", "chat_id": chat_id, "organization_id": org, "owner_id": owner, "text": "hello"}))
    assert created["ok"]
    head = cli.head()

    bad = [
        ("this is not json", None, "malformed JSON"),
        ('{"type": "send_message", "chat_id": ', None, "malformed JSON"),
        (json.dumps({"type": "teleport", "chat_id": chat_id}), "teleport", "teleport"),
        (json.dumps({"chat_id": chat_id, "text": "no type"}), None, "type"),
        (json.dumps({"type": "send_message", "chat_id": chat_id, "text": "x", "bogus": 1}), "send_message", "bogus"),
        (json.dumps({"type": "send_message", "chat_id": chat_id, "text": 5}), "send_message", "$.text"),
        (json.dumps({"type": "set_archived", "chat_id": chat_id, "archived": "yes"}), "set_archived", "$.archived"),
        (json.dumps({"type": "send_message", "chat_id": "not-a-uuid", "text": "x"}), "send_message", "UUID"),
        (json.dumps({"type": "create_chat", "organization_id": "zzz", "owner_id": owner, "text": "x"}),
         "create_chat", "$.organization_id"),
        (json.dumps({"type": "send_message", "chat_id": chat_id}), "send_message", "text or message"),
        (json.dumps({"type": "send_message", "chat_id": chat_id, "text": "a",
                     "message": {"role": "user", "parts": [{"type": "text", "text": "b"}]}}), "send_message", "not both"),
        (json.dumps({"type": "commit_step", "chat_id": chat_id, "messages": [
            {"role": "assistant", "parts": [{"type": "video", "url": "x"}]}]}), "commit_step", "$.messages[0].parts[0]"),
        ("[1, 2, 3]", None, "array"),
        ('"just a string"', None, "invalid command"),
    ]
    text = "\n".join(line for line, _, _ in bad[:3]) + "\n\n" + "\n".join(line for line, _, _ in bad[3:]) + "\n"
    out, result = cli.json_lines("apply", "-", input=text)
    numbers = [1, 2, 3] + list(range(5, 5 + len(bad) - 3))  # line 4 is blank: skipped, still counted
    assert [o["line"] for o in out] == numbers
    for o, (line, ctype, words) in zip(out, bad):
        assert_output_line(o, o["line"], ctype)
        assert o["ok"] is False
        assert o["error"]["code"] == "invalid_command", o
        assert words in o["error"]["message"], o
    assert result.exit_code == 1
    assert cli.head() == head


def test_apply_stop_on_error_stops_at_the_first_refusal(cli: LedgerCLI) -> None:
    chat_id, owner = str(uuid4()), str(uuid4())
    org = new_org(cli, owner)
    head = cli.head()
    text = jsonl(
        {"type": "create_chat", "chat_id": chat_id, "organization_id": org, "owner_id": owner, "text": "hello"},
        {"type": "abandon", "chat_id": chat_id},  # refused: not owned
        {"type": "send_message", "chat_id": chat_id, "text": "never applied"},
    )
    out, result = cli.json_lines("apply", "--stop-on-error", "-", input=text)
    assert [(o["line"], o["ok"]) for o in out] == [(1, True), (2, False)]
    assert out[1]["error"]["code"] == "not_owned"
    assert result.exit_code == 1
    assert cli.head() == head + 1  # only the create
    # without the flag every line runs
    out, result = cli.json_lines("apply", "-", input=text.replace(chat_id, str(uuid4())))
    assert [o["ok"] for o in out] == [True, False, True] and result.exit_code == 1


def test_apply_missing_file_is_a_usage_error(cli: LedgerCLI, tmp_path: Path) -> None:
    result = cli.run("apply", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 2
    assert "missing.jsonl" in result.stderr and result.stdout == ""
    assert cli.run("apply").exit_code == 2  # no FILE


# -- 3. show, status, the human commands, init, demo -----------------------------------------------------------

def _tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "text": f"calling {name}"},
                                           {"type": "tool-call", "tool_call_id": call_id, "tool_name": name,
                                            "args": args}]}


@pytest.fixture
def two_chats(cli: LedgerCLI) -> dict[str, str]:
    """Chat C (org O1): an edit soft-deleted messages 3-4, an unresolved call, one queued prompt (v9, R1).
    Chat D (org O2): created waiting."""
    c, d, owner = (str(uuid4()) for _ in range(3))
    o1, o2 = new_org(cli, owner), new_org(cli, owner)
    out, result = cli.json_lines("apply", "-", input=jsonl(
        {"type": "create_chat", "chat_id": c, "organization_id": o1, "owner_id": owner, "text": "first",
         "title": "Chat C"},                                                                           # v1: msg 1
        {"type": "commit_step", "chat_id": c, "messages": [{"role": "assistant", "parts": [
            {"type": "reasoning", "text": "hmm"}, {"type": "text", "text": "answer one"}]}]},               # v2: msg 2
        {"type": "finish_turn", "chat_id": c},                                                         # v3: W
        {"type": "send_message", "chat_id": c, "text": "second"},                                      # v4: msg 3
        {"type": "commit_step", "chat_id": c, "messages": [_tool_call("call_1", "read_file", {"path": "a"})]},  # v5
        {"type": "edit_message", "chat_id": c, "message_id": 3, "text": "second, edited"},             # v6, v7: msg 5
        {"type": "commit_step", "chat_id": c, "messages": [_tool_call("call_2", "search", {"q": "x"})]},  # v8: msg 6
        {"type": "send_message", "chat_id": c, "text": "later"},                                       # v9: queued
        {"type": "create_chat", "chat_id": d, "organization_id": o2, "owner_id": owner, "text": "idle",
         "initial_status": "waiting", "title": "Chat D"},
    ))
    assert result.exit_code == 0, out
    assert out[7]["result"]["version"] == 9
    return {"c": c, "d": d, "o1": o1, "o2": o2, "owner": owner}


def test_show_json_shape(cli: LedgerCLI, two_chats: dict[str, str]) -> None:
    c = two_chats["c"]
    (data,), result = cli.json_lines("show", c, "--json")
    assert result.exit_code == 0
    # docs/commands.md, "CLI"'s four keys, and the facts of other streams as of the same position (now, here)
    assert set(data) == {"chat", "messages", "queue", "unresolved", "facts_as_of", "model", "usage"}
    assert data["facts_as_of"] == {"chat_version": 9, "notification_id": None}
    assert set(data["chat"]) == STATUS_KEYS
    assert data["chat"]["version"] == 9 and data["chat"]["execution_state"] == "R1"
    assert data["chat"]["title"] == "Chat C" and data["chat"]["message_count"] == 6

    messages = data["messages"]
    assert [m["message_id"] for m in messages] == [1, 2, 3, 4, 5, 6]
    for m in messages:
        assert set(m) == MESSAGE_KEYS
        assert m["created_at"].endswith("Z")
    assert [m["deleted"] for m in messages] == [False, False, True, True, False, False]
    assert messages[2]["parts"] == [{"type": "text", "text": "second"}]  # deleted, still shown
    assert messages[4]["parts"] == [{"type": "text", "text": "second, edited"}] and messages[4]["role"] == "user"
    assert messages[1]["parts"][0] == {"type": "reasoning", "text": "hmm"}
    assert messages[5]["parts"][1] == {"type": "tool-call", "tool_call_id": "call_2", "tool_name": "search",
                                       "args": {"q": "x"}}
    assert messages[0]["created_by"] == two_chats["owner"] and messages[0]["turn_id"]

    (queued,) = data["queue"]
    assert set(queued) == QUEUE_KEYS
    assert (queued["chat_id"], queued["queued_message_id"], queued["position"], queued["text"]) == (c, 1, 1, "later")

    (call,) = data["unresolved"]
    assert set(call) == UNRESOLVED_KEYS | {"execution"}  # (show adds the execution as of the chat's position)
    assert (call["tool_call_id"], call["tool_name"], call["kind"], call["assistant_message_id"], call["args"]) == \
        ("call_2", "search", "local", 6, {"q": "x"})
    UUID(call["execution_id"])
    assert call["execution"] == {"status": "unclaimed", "claim_epoch": 0}


def test_show_at_version_returns_the_earlier_state(cli: LedgerCLI, two_chats: dict[str, str]) -> None:
    c = two_chats["c"]
    (at3,), result = cli.json_lines("show", c, "--at", "3", "--json")
    assert result.exit_code == 0
    assert at3["chat"]["version"] == 3 and at3["chat"]["execution_state"] == "W"
    assert [m["message_id"] for m in at3["messages"]] == [1, 2]
    assert at3["queue"] == [] and at3["unresolved"] == []

    (at5,), _ = cli.json_lines("show", c, "--at", "5", "--json")
    assert at5["chat"]["version"] == 5 and at5["chat"]["execution_state"] == "R0"
    assert [m["deleted"] for m in at5["messages"]] == [False] * 4  # the edit came later
    assert [u["tool_call_id"] for u in at5["unresolved"]] == ["call_1"]

    # the human form
    text = cli.run("show", c).stdout
    assert c in text and "messages:" in text and "queue:" in text and "second, edited" in text
    assert "unresolved tool calls:" in text and "call_2" in text


def test_status_filters(cli: LedgerCLI, two_chats: dict[str, str]) -> None:
    c, d = two_chats["c"], two_chats["d"]
    rows, _ = cli.json_lines("status", "--json")
    assert {r["chat_id"] for r in rows} == {c, d} and all(set(r) == STATUS_KEYS for r in rows)

    rows, _ = cli.json_lines("status", "--org", two_chats["o1"], "--json")
    assert [r["chat_id"] for r in rows] == [c]
    rows, _ = cli.json_lines("status", "--status", "waiting", "--json")
    assert [r["chat_id"] for r in rows] == [d]
    rows, result = cli.json_lines("status", "--org", two_chats["o2"], "--status", "running", "--json")
    assert rows == [] and result.exit_code == 0
    (row,), _ = cli.json_lines("status", d, "--json")
    assert row["chat_id"] == d and row["execution_state"] == "W" and row["title"] == "Chat D"

    table = cli.run("status").stdout.splitlines()
    assert table[0].split()[:3] == ["chat_id", "execution_state", "status"]
    assert sorted(line.split()[0] for line in table[1:]) == sorted([c[:8], d[:8]])  # short ids (unique here)
    one = cli.run("status", c).stdout.splitlines()
    assert len(one) == 2 and one[1].split()[:3] == [c[:8], "R1", "running"]
    assert cli.run("status", "--org", str(uuid4())).stdout.strip() == "(none)"
    assert cli.run("status", "--status", "bogus").exit_code == 2  # click validates the choice


def test_human_chat_commands(cli: LedgerCLI) -> None:
    owner = str(uuid4())
    org = new_org(cli, owner)
    (created,), r = cli.json_lines("chat", "create", "--org", org, "--owner", owner, "--text", "Run the tests",
                                   "--title", "Tests", "--allow-tool", "read", "--allow-tool", "exec", "--json")
    assert r.exit_code == 0
    assert_result_shape(created)
    chat_id = created["chat_id"]
    assert created["execution_state"] == "R0" and created["version"] == 1 and created["message_ids"] == [1]

    (sent,), _ = cli.json_lines("chat", "send", chat_id, "--text", "and lint", "--json")
    assert sent["execution_state"] == "R1" and sent["queued_message_id"] == 1 and sent["version"] == 2

    # the same key twice: one prompt, the first result again
    (k1,), _ = cli.json_lines("chat", "send", chat_id, "--text", "and docs", "--idempotency-key", "docs", "--json")
    (k2,), _ = cli.json_lines("chat", "send", chat_id, "--text", "and docs", "--idempotency-key", "docs", "--json")
    assert k1 == k2 and k1["version"] == 3 and k1["queue_length"] == 2

    # human output: one line with the id, the state and what was inserted
    human = cli.run("chat", "send", chat_id, "--text", "and format")
    assert human.exit_code == 0
    assert human.stdout.startswith(f"{chat_id}  R1  status=running  v4") and "queue=3" in human.stdout
    assert "queued=3" in human.stdout

    # unowned running chat: the interrupt finishes at once and promotes the queue head
    (interrupted,), _ = cli.json_lines("chat", "interrupt", chat_id, "--reason", "stop", "--json")
    assert interrupted["execution_state"] == "R1" and interrupted["promoted_queued_message_id"] == 1
    assert interrupted["queue_length"] == 2

    (row,), _ = cli.json_lines("status", chat_id, "--json")
    assert row["version"] == interrupted["version"] and row["title"] == "Tests"
    assert row["hook_allowed_tools"] == ["read", "exec"] and row["organization_id"] == org

    waiting = cli.run("chat", "create", "--org", org, "--owner", owner, "--text", "later", "--waiting")
    assert waiting.exit_code == 0 and "  W  status=waiting  v1" in waiting.stdout


def test_env_var_selects_the_database(cli: LedgerCLI) -> None:
    owner = str(uuid4())
    org = new_org(cli, owner)
    assert cli.run("chat", "create", "--org", org, "--owner", owner, "--text", "via --db").exit_code == 0
    rows, result = cli.json_lines("status", "--json", db=False, env={"CHAT_LEDGER_DB": cli.url})
    assert result.exit_code == 0 and [r["organization_id"] for r in rows] == [org]


def test_init_creates_the_ledger(cli: LedgerCLI) -> None:
    result = cli.run("init")
    assert result.exit_code == 0 and result.stdout.startswith("ledger ready at ")
    assert cli.head() == 0
    assert cli.run("init").exit_code == 0  # idempotent


def test_init_redacts_the_password(pg_url: str) -> None:
    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:sekrit@", 1)
    assert url != pg_url
    result = LedgerCLI(url).run("init")
    assert result.exit_code == 0, result.output
    assert "sekrit" not in result.output and "postgres:***@" in result.stdout


def test_demo_runs_twice_on_a_fresh_sqlite_file(tmp_path: Path) -> None:
    cli = LedgerCLI(f"sqlite:///{tmp_path / 'demo.db'}")
    first = cli.run("demo")
    assert first.exit_code == 0, first.output
    assert f"Recording {len(SCENARIOS)} scenarios" in first.stdout
    assert "UNEXPECTED" not in first.stdout and "as the scenario expects" in first.stdout
    head = cli.head()
    assert head > 0 and f"holds {head} events" in first.stdout
    chats, _ = cli.json_lines("status", "--json")
    assert chats

    second = cli.run("demo")
    assert second.exit_code == 0, second.output
    assert "UNEXPECTED" not in second.stdout
    assert cli.head() > head
    rows, _ = cli.json_lines("status", "--json")  # the same scenarios again, as new chats
    assert len({r["chat_id"] for r in rows}) == len(rows) == 2 * len(chats)
    assert sorted(r["execution_state"] for r in rows) == sorted(2 * [r["execution_state"] for r in chats])


# -- 4. ledger errors on the command line -----------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["status", "{id}"],
    ["show", "{id}"],
    ["show", "{id}", "--json"],
    ["chat", "send", "{id}", "--text", "hello?"],
    ["chat", "interrupt", "{id}", "--json"],
])
def test_unknown_chat_prints_error_and_exits_1(cli: LedgerCLI, args: list[str]) -> None:
    cli.run("init")
    chat = uuid4()
    result = cli.run(*[a.format(id=chat) for a in args])
    assert result.exit_code == 1
    # a read names the chat it did not find; a command answers chatd's own text
    message = "chat not found" if args[0] == "chat" else f"chat {chat} not found"
    if "--json" in args:  # --json: the error as JSON too
        assert json.loads(result.stderr) == {"error": {"code": "chat_not_found", "message": message}}
    else:
        assert result.stderr == f"error: chat_not_found: {message}\n"
    assert result.stdout == ""


def test_other_ledger_errors_on_the_command_line(cli: LedgerCLI) -> None:
    bad_id = cli.run("show", "not-a-uuid")
    assert bad_id.exit_code == 1 and bad_id.stderr.startswith("error: invalid_command: ")

    bad_url = CliRunner().invoke(main, ["--db", "mysql://root@localhost/x", "status"])
    assert bad_url.exit_code == 1 and bad_url.stderr.startswith("error: invalid_database_url: ")

    owner = str(uuid4())
    (created,), _ = cli.json_lines("chat", "create", "--org", new_org(cli, owner), "--owner", owner, "--text", "x",
                                   "--waiting", "--json")
    refused = cli.run("chat", "interrupt", created["chat_id"])
    assert refused.exit_code == 1
    assert refused.stderr == ("error: transition_not_allowed: chat state transition Interrupt not allowed "
                              "from state W\n")


def test_unreachable_database_on_the_command_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--db", "postgresql://postgres@127.0.0.1:1/x", "status"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: database_unavailable: ") and "127.0.0.1:1" in result.stderr
    missing = CliRunner().invoke(main, ["--db", f"sqlite:///{tmp_path}/nope/x.db", "init"])
    assert missing.exit_code == 1 and missing.stderr.startswith("error: database_unavailable: ")
