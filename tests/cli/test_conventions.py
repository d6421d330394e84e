"""Issue 16 point 3: the CLI's conventions, through click's CliRunner on SQLite and PostgreSQL.

-h, global options after the subcommand, JSON errors, the same not-found everywhere, ``-``/``--output``,
``--at`` bounds, ordered listings with ``--limit``/``--since``/``--until``, no Python reprs, the
execution-state legend, tables within 100 columns, short ids (shown and accepted), blue/green digests of
the compared rows, the switch log and rollback, follow's and simulate's progress lines.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import given, strategies as st

from commands.cli.main import hoist_global_options
from ledger import ids
from ledger.errors import LedgerError
from tests.cli.test_cli import LedgerCLI, jsonl, new_org


@pytest.fixture
def cli(db_url: str) -> LedgerCLI:
    return LedgerCLI(db_url)


def chat(cli: LedgerCLI, org: str, owner: str, chat_id: str | None = None, **fields: Any) -> str:
    out, result = cli.json_lines("apply", "-", input=jsonl({
        "type": "create_chat", "organization_id": org, "owner_id": owner, "text": "hello",
        **({"chat_id": chat_id} if chat_id else {}), **fields}))
    assert result.exit_code == 0, out
    return out[0]["result"]["chat_id"]


def with_calls(cli: LedgerCLI, chat_id: str, names: list[str]) -> None:
    """An assistant step with these tool calls, in this order (ids call_<name>)."""
    parts = [{"type": "tool-call", "tool_call_id": f"call_{n}", "tool_name": n, "args": {"n": n}} for n in names]
    out, result = cli.json_lines("apply", "-", input=jsonl(
        {"type": "commit_step", "chat_id": chat_id, "messages": [{"role": "assistant", "parts": parts}]}))
    assert result.exit_code == 0, out


@pytest.fixture
def ledger(cli: LedgerCLI) -> dict[str, str]:
    me = str(uuid4())
    org = new_org(cli, me)
    return {"org": org, "me": me, "chat": chat(cli, org, me)}


# -- -h, global options anywhere, the environment variable in --help ------------------------------------------

def test_help_short_option_and_env_var(cli: LedgerCLI) -> None:
    top = cli.run("-h", db=False)
    assert top.exit_code == 0 and "CHAT_LEDGER_DB" in top.stdout and "completion" in top.stdout
    sub = cli.run("projections", "rebuild", "-h", db=False)
    assert sub.exit_code == 0 and "--blue-green" in sub.stdout


def test_global_options_after_the_subcommand(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    after = cli.run("status", ledger["chat"], "--db", cli.url, db=False)
    assert after.exit_code == 0 and ledger["chat"][:8] in after.stdout
    joined = cli.run("status", ledger["chat"], f"--db={cli.url}", db=False)
    assert joined.stdout == after.stdout
    before = cli.run("--json", "status", ledger["chat"])
    assert json.loads(before.stdout)["chat_id"] == ledger["chat"]
    # a `--` ends the options: what follows is left where it is
    assert hoist_global_options(["show", "x", "--", "--db", "y"]) == ["show", "x", "--", "--db", "y"]
    assert hoist_global_options(["show", "x", "--db", "u", "--json"]) == ["--db", "u", "--json", "show", "x"]


# -- JSON errors; not found is the same everywhere ----------------------------------------------------------------

@pytest.mark.parametrize("args, code", [
    (["queue", "{missing}"], "chat_not_found"),
    (["unresolved", "{missing}"], "chat_not_found"),
    (["show", "{missing}"], "chat_not_found"),
    (["status", "{missing}"], "chat_not_found"),
    (["next-action", "{missing}"], "chat_not_found"),
    (["resolve-model", "{missing}"], "chat_not_found"),
    (["explain", "{missing}", "--turn", "{missing}"], "chat_not_found"),
    (["models", "--org", "{missing}"], "organization_not_found"),
    (["conversation", "show", "{missing}"], "conversation_not_found"),
    (["audit", "{missing}"], "stream_not_found"),
    (["show", "{chat}", "--at", "0"], "version_not_found"),
    (["show", "{chat}", "--at", "999"], "version_not_found"),
    (["audit", "{chat}", "--at", "999"], "version_not_found"),
    (["next-action", "{chat}", "--at", "0"], "version_not_found"),
    (["resolve-model", "{chat}", "--at", "999"], "version_not_found"),
    (["explain", "{chat}", "--turn", "{missing}", "--at", "0"], "version_not_found"),
])
def test_errors_are_json_with_json_and_not_found_is_exit_1(cli: LedgerCLI, ledger: dict[str, str],
                                                         args: list[str], code: str) -> None:
    argv = [a.format(missing=str(uuid4()), chat=ledger["chat"]) for a in args]
    human = cli.run(*argv)
    assert human.exit_code == 1 and human.stderr.startswith(f"error: {code}: "), human.output
    assert human.stdout == ""
    for where in ("after", "before"):
        result = cli.run(*argv, "--json") if where == "after" else cli.run("--json", *argv)
        assert result.exit_code == 1
        error = json.loads(result.stderr)["error"]
        assert error["code"] == code and error["message"] and set(error) == {"code", "message"}


def test_usage_errors_exit_2_and_events_import_json(cli: LedgerCLI, ledger: dict[str, str], tmp_path: Any) -> None:
    assert cli.run("show", ledger["chat"], "--at", "x", "--json").exit_code == 2
    assert cli.run("status", "--limit", "-1").exit_code == 2
    export = tmp_path / "log.jsonl"
    assert cli.run("events", "export", "-o", str(export)).exit_code == 0
    other = LedgerCLI(f"sqlite:///{tmp_path / 'copy.db'}")
    done = other.run("events", "import", str(export), "--json")
    assert done.exit_code == 0 and json.loads(done.stdout) == {"imported": cli.head()}
    again = other.run("events", "import", str(export), "--json")
    assert again.exit_code == 1 and "code" in json.loads(again.stderr)["error"]


# -- - and --output for file options ------------------------------------------------------------------------------

def test_dash_is_standard_output_for_every_file_option(cli: LedgerCLI, ledger: dict[str, str], tmp_path: Any) -> None:
    page = cli.run("audit", ledger["chat"], "--html", "-")
    assert page.exit_code == 0 and page.stdout.startswith("<!DOCTYPE html>")
    assert cli.run("audit", ledger["chat"], "--html").stdout == page.stdout  # no FILE: standard output
    target = tmp_path / "page.html"
    for argv in (["--html", str(target)], ["--html", "-o", str(target)], ["--html", "--output", str(target)]):
        target.unlink(missing_ok=True)
        wrote = cli.run("audit", ledger["chat"], *argv)
        assert wrote.exit_code == 0 and target.read_text(encoding="utf-8") == page.stdout
    text = tmp_path / "audit.txt"
    assert cli.run("audit", ledger["chat"], "-o", str(text)).stdout == ""
    assert text.read_text(encoding="utf-8") == cli.run("audit", ledger["chat"]).stdout
    exported = cli.run("events", "export", "-o", "-")
    assert exported.exit_code == 0 and len(exported.stdout.splitlines()) == cli.head() + 1


# -- listings: ordered, --limit, --since/--until ------------------------------------------------------------------

def test_unresolved_calls_come_in_message_order(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    names = ["zeta", "alpha", "mu", "beta", "omega"]  # neither sorted nor reverse-sorted
    with_calls(cli, ledger["chat"], names)
    rows, _ = cli.json_lines("unresolved", ledger["chat"], "--json")
    assert [r["tool_name"] for r in rows] == names
    shown, _ = cli.json_lines("show", ledger["chat"], "--json")
    assert [u["tool_name"] for u in shown[0]["unresolved"]] == names
    two, _ = cli.json_lines("unresolved", ledger["chat"], "--json", "--limit", "2")
    assert [r["tool_name"] for r in two] == names[:2]


def test_status_limit_since_until(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    more = [chat(cli, ledger["org"], ledger["me"]) for _ in range(3)]
    rows, _ = cli.json_lines("status", "--org", ledger["org"], "--json")
    assert [r["chat_id"] for r in rows] == [ledger["chat"], *more]  # least recently updated first
    assert [r["chat_id"] for r in cli.json_lines("status", "--org", ledger["org"], "--json", "--limit", "2")[0]] \
        == [more[2], more[1]]  # --limit: the chats updated last, newest first
    assert [r["chat_id"] for r in cli.json_lines("status", "--org", ledger["org"], "--json", "--limit", "2",
                                                 "--sort", "oldest")[0]] == [ledger["chat"], more[0]]
    middle = rows[1]["updated_at"]
    since, _ = cli.json_lines("status", "--org", ledger["org"], "--json", "--since", middle)
    until, _ = cli.json_lines("status", "--org", ledger["org"], "--json", "--until", middle)
    assert [r["chat_id"] for r in since] == [r["chat_id"] for r in rows[1:]]
    assert [r["chat_id"] for r in until] == [r["chat_id"] for r in rows[:2]]
    bad = cli.run("status", "--since", "yesterday")
    assert bad.exit_code == 1 and bad.stderr.startswith("error: invalid_time: ")
    queued = cli.run("queue", ledger["chat"], "--limit", "1")
    assert queued.exit_code == 0 and queued.stdout == "(none)\n"


# -- output for people: no reprs, the legend, 100 columns -----------------------------------------------------------

REPR = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|\{'|\['|Struct\(")


def test_no_python_reprs_in_human_output(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    with_calls(cli, ledger["chat"], ["read"])
    for argv in (["show", ledger["chat"]], ["audit", ledger["chat"]], ["audit", ledger["org"]],
                 ["models", "--org", ledger["org"], "--user", ledger["me"]], ["events", "verify"],
                 ["status"], ["unresolved"], ["next-action", ledger["chat"]], ["projections", "status"]):
        out = cli.run(*argv).stdout
        assert out and not REPR.search(out), (argv, REPR.search(out), out)
    assert "tool policy: all tools" in cli.run("show", ledger["chat"]).stdout


def test_states_legend_and_status_help(cli: LedgerCLI) -> None:
    legend = cli.run("states", db=False)
    assert legend.exit_code == 0
    codes = {line.split()[0] for line in legend.stdout.splitlines()[1:]}
    assert {"W", "E0", "R1", "A0", "P", "XW", "XE1"} <= codes
    assert "R1" in cli.run("status", "--help", db=False).stdout and "prompts queued" in legend.stdout
    rows, _ = cli.json_lines("states", "--json", db=False)
    assert {r["execution_state"] for r in rows} == codes


def test_tables_fit_the_terminal_and_are_whole_when_piped(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    """Issue 30, point 6: piped, a table is never cut (a script or a pager gets every character); on a
    terminal (a real pseudo-terminal, 100 columns) it fits the terminal's width."""
    import os
    import pty
    import subprocess
    import sys

    title = "a title long enough to push any table past one hundred columns " * 2
    chat(cli, ledger["org"], ledger["me"], title=title)
    with_calls(cli, ledger["chat"], ["read"])
    assert title.strip() in cli.run("status").stdout  # piped: whole
    for argv in (["status"], ["unresolved"], ["models", "--org", ledger["org"]], ["events", "stats"],
                 ["projections", "status"], ["states"]):
        parent, child = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "commands.cli.main", "--db", cli.url, *argv],
                                stdout=child, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                env={**os.environ, "COLUMNS": "100", "LINES": "40"})
        os.close(child)
        seen = b""
        while True:
            try:
                chunk = os.read(parent, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=120) == 0
        lines = seen.decode().replace("\r", "").splitlines()
        assert lines and max(len(line) for line in lines) <= 100, (argv, lines)


# -- short ids ----------------------------------------------------------------------------------------------------------

def test_short_ids_shown_and_accepted(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    twins = [chat(cli, ledger["org"], ledger["me"], chat_id=f"abcdef12-3456-4{n}00-8000-000000000000") for n in "12"]
    table = cli.run("status", "--org", ledger["org"]).stdout
    assert "abcdef12-3456-41" in table and "abcdef12-3456-42" in table  # unique only that long
    assert re.search(rf"^{ledger['chat'][:8]}\s", table, re.M)  # the others at 8 characters
    shown = cli.run("show", twins[0][:16], "--json")
    assert json.loads(shown.stdout)["chat"]["chat_id"] == twins[0]
    ambiguous = cli.run("show", "abcdef12")
    assert ambiguous.exit_code == 1 and ambiguous.stderr.startswith("error: ambiguous_id: ")
    assert twins[0] in ambiguous.stderr and twins[1] in ambiguous.stderr
    assert cli.run("show", "abcdef1299").stderr == "error: chat_not_found: no chat id starts with abcdef1299\n"
    assert cli.run("show", "ab").stderr.startswith("error: invalid_command: invalid chat id")
    # every kind of id: org and user in models, a turn and a tool call in explain, a stream in audit
    models = json.loads(cli.run("models", "--org", ledger["org"][:9], "--user", ledger["me"][:8], "--json").stdout)
    assert models["organization_id"] == ledger["org"] and "effective" in models
    with_calls(cli, ledger["chat"], ["read"])
    turn = json.loads(cli.run("show", ledger["chat"], "--json").stdout)["chat"]["turn_id"]
    explained = cli.run("explain", ledger["chat"][:8], "--turn", turn[:8], "--json")
    assert explained.exit_code == 0, explained.output
    execution = json.loads(cli.run("unresolved", ledger["chat"], "--json").stdout)["execution_id"]
    by_prefix = json.loads(cli.run("explain", ledger["chat"], "--tool-call", execution[:10], "--json").stdout)
    assert by_prefix["tool_call_id"] == "call_read" and by_prefix["execution_id"] == execution
    assert cli.run("audit", ledger["org"][:8]).stdout.startswith("catalog ")
    sent = cli.run("chat", "send", ledger["chat"][:8], "--text", "more", "--json")
    assert json.loads(sent.stdout)["chat_id"] == ledger["chat"]


@given(st.sets(st.uuids().map(str), min_size=1, max_size=40), st.integers(min_value=4, max_value=12))
def test_shortest_unique_prefixes_name_their_ids(values: set[str], min_len: int) -> None:
    short = ids.shortest_unique(values, min_len)
    assert set(short) == values
    for full, prefix in short.items():
        assert full.startswith(prefix) and len(prefix) >= min(min_len, len(full))
        assert ids.resolve_prefix(prefix, values) == full  # unique: it names exactly its id
    shorter = {full: prefix[:-1] for full, prefix in short.items() if len(prefix) > min_len}
    for full, prefix in shorter.items():  # one character less and it is ambiguous
        with pytest.raises(LedgerError) as e:
            ids.resolve_prefix(prefix, values)
        assert e.value.code == "ambiguous_id" and full in e.value.message


# -- blue/green digests, the switch log, rollback -----------------------------------------------------------------------

def test_blue_green_digest_switch_log_and_rollback(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    empty = hashlib.sha256(b"").hexdigest()
    assert json.loads(cli.run("projections", "catch-up", "chat_views", "--json").stdout)["caught_up"]
    first = json.loads(cli.run("projections", "rebuild", "chat_views", "--blue-green", "--json").stdout)
    assert first["switched"] and first["diff"]["equal"]
    d1 = first["diff"]
    assert d1["digest"] != empty and d1["live_rows_digest"] == d1["new_rows_digest"] != empty
    chat(cli, ledger["org"], ledger["me"])
    cli.run("projections", "catch-up", "chat_views")  # (builds are compared at the live build's position)
    second = json.loads(cli.run("projections", "rebuild", "chat_views", "--blue-green", "--json").stdout)
    assert second["diff"]["new_rows_digest"] != d1["new_rows_digest"]  # other rows, another digest
    log, _ = cli.json_lines("projections", "switches", "chat_views", "--json")
    assert [s["mode"] for s in log][-2:] == ["blue_green", "blue_green"]
    assert log[-1]["diff_digest"] == second["diff"]["digest"]
    assert "blue_green" in cli.run("projections", "switches", "chat_views").stdout
    back = json.loads(cli.run("projections", "rollback", "chat_views", "--json").stdout)
    assert (back["from_version"], back["to_version"], back["mode"]) == (second["to_version"], second["from_version"],
                                                                      "rollback")
    # the build rolled back to catches up and answers: the chat recorded after its switch is there
    assert len(cli.json_lines("status", "--org", ledger["org"], "--json")[0]) == 2
    assert cli.run("projections", "prune", "chat_views").exit_code == 0
    gone = cli.run("projections", "rollback", "chat_views")
    assert gone.exit_code == 1 and gone.stderr.startswith("error: no_previous_build: "), gone.output
    unknown = cli.run("projections", "switches", "nope")
    assert unknown.exit_code == 2


def test_projection_names_complete_without_a_ledger() -> None:
    from commands.cli.views import PROJECTION_NAMES, _complete_projection
    from commands.views import all_projections
    from ledger.store import open_app

    app = open_app("sqlite:///:memory:")
    try:
        assert tuple(p.name for p in all_projections(app)) == PROJECTION_NAMES
    finally:
        app.close()
    assert _complete_projection(None, None, "c") == ["chat_views", "conversations"]


# -- progress when not on a terminal -------------------------------------------------------------------------------------

def test_follow_logs_a_line_per_batch_and_simulate_reports_progress(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    sim = cli.run("simulate", "--chats", "3", "--seed", "4", "--json")
    assert sim.exit_code == 0 and "simulating chats: 3/3 chats" in sim.stderr
    followed = cli.run("projections", "follow", "--for", "0.5", "--batch-size", "50")
    batches = [line for line in followed.stderr.splitlines() if "notifications applied" in line]
    assert followed.exit_code == 0 and len(batches) >= 2, followed.stderr


# -- --json on every command; ids of people and model configs by prefix -----------------------------------------

def _leaf_commands(cmd: Any, path: tuple[str, ...] = ()) -> Any:
    import click

    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):  # (main loads its commands on first use: ask it for each)
            yield from _leaf_commands(cmd.get_command(ctx, name), (*path, name))
    else:
        yield path, cmd


def test_every_command_takes_json() -> None:
    from commands.cli.main import main

    missing = [" ".join(path) for path, cmd in _leaf_commands(main)
               if not any("--json" in getattr(p, "opts", ()) for p in cmd.params)]
    assert missing == []


def test_follow_and_demo_speak_json(cli: LedgerCLI, ledger: dict[str, str], tmp_path: Any) -> None:
    followed = cli.run("projections", "follow", "--for", "0.5", "--batch-size", "1", "--json")
    lines = [json.loads(line) for line in followed.stdout.splitlines()]
    assert followed.exit_code == 0 and lines, followed.output
    assert {"time", "projection", "applied", "total", "head"} <= set(lines[0])
    assert all(line["applied"] <= line["total"] for line in lines)
    demo = LedgerCLI(f"sqlite:///{tmp_path / 'demo.db'}").run("demo", "--sim-chats", "2", "--json")
    summary = json.loads(demo.stdout)  # the whole of standard output is one object
    assert demo.exit_code == 0 and summary["scenarios"] and summary["head"] > 0
    assert all(s["as_expected"] for s in summary["scenarios"]), summary["scenarios"]
    assert summary["simulation"]["chats"] >= 2 and summary["chats"][0]["chat_id"]


def test_people_and_model_configs_by_prefix(cli: LedgerCLI, ledger: dict[str, str]) -> None:
    org, me, chat_id = ledger["org"], ledger["me"], ledger["chat"]
    other = "beefbeef-0000-4000-8000-000000000001"
    added = cli.run("catalog", "add-member", "--org", org[:8], "--user", other, "--actor", me[:8], "--json")
    assert added.exit_code == 0, added.output
    config = json.loads(cli.run("models", "--org", org, "--json").stdout)["configs"][0]["model_config_id"]
    sent = cli.run("chat", "send", chat_id[:8], "--text", "hi", "--by", other[:10], "--model", config[:8],
                   "--actor", me[:8], "--json")
    assert sent.exit_code == 0, sent.output
    shown = json.loads(cli.run("show", chat_id, "--json").stdout)
    sent_prompt = (shown["messages"] + shown["queue"])[-1]  # queued or sent, as the chat was
    assert (sent_prompt["created_by"], sent_prompt["model_config_id"]) == (other, config)  # recorded whole
    audited = [json.loads(line) for line in cli.run("audit", chat_id, "--json").stdout.splitlines()]
    assert audited[-1]["actor"] == me
    resolved = cli.run("resolve-model", chat_id, "--user", other[:8], "--json")
    assert resolved.exit_code == 0, resolved.output
    # a prefix of nobody in the organization, and a prefix of two of its people, are refused; nothing recorded
    head = cli.head()
    stranger = cli.run("chat", "send", chat_id, "--text", "x", "--by", "0123abcd")
    assert stranger.exit_code == 1 and stranger.stderr.startswith("error: user_not_found: "), stranger.stderr
    twin = "beefbeef-0000-4000-8000-000000000002"
    cli.run("catalog", "add-member", "--org", org, "--user", twin)
    head = cli.head()
    ambiguous = cli.run("chat", "send", chat_id, "--text", "x", "--by", "beefbeef")
    assert ambiguous.exit_code == 1 and ambiguous.stderr.startswith("error: ambiguous_id: ")
    assert other in ambiguous.stderr and twin in ambiguous.stderr
    unknown_model = cli.run("chat", "send", chat_id, "--text", "x", "--model", "fedcba98")
    assert unknown_model.stderr == "error: model_config_not_found: model config not found\n"
    assert cli.head() == head


def test_bench_json_is_the_results_on_standard_output(tmp_path: Any) -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "commands.cli.main", "bench", "--quick", "--only", "replay",
                          "--backend", "sqlite", "--json"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)
    assert results["settings"]["quick"] is True and "replay" in run.stderr  # the table on standard error
    assert list(tmp_path.iterdir()) == []  # no file unless --output is given
