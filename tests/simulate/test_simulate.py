"""The scripted runner: simulated chats pass the foundation invariants, next-action agrees with what the
simulator did next, and a seed reproduces the run (SQLite and PostgreSQL; determinism in memory)."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from commands.cli.main import main
from commands.tools.sim_base import FIRST_COMMAND
from commands.tools.sim_checks import check_chats, check_decisions
from commands.tools.simulate import simulate
from ledger.store import open_app

CHATS = 30
SEED = 11


def test_simulated_chats_pass_the_invariants_and_agree_with_next_action(db_url: str) -> None:
    app = open_app(db_url)
    try:
        sim = simulate(app, CHATS, SEED, orgs=3, turns=2, steps=4)
        summary = sim.summary()
        assert sim.unexpected == [] and sim.anomalies == []
        assert summary["chats"] == CHATS and summary["child_chats"] > 0
        assert set(summary["final_states"]) <= {"W", "E0", "XW", "XE0"}  # every chat left at rest
        # the mix: each worker action, tool runs and repeats, the users' actions, the deliberate refusals
        act = summary["activity"]
        for key in ("action:generate_assistant", "action:execute_local_tools", "action:finish_turn",
                    "action:compact", "action:enter_requires_action", "claim:run", "claim:saved",
                    "advisor:advice", "exclusive_batches_rejected", "provider_errors", "retries", "edits",
                    "queued_prompts", "interrupts:owned", "interrupts:unowned", "archived", "ended"):
            assert act.get(key, 0) > 0, key
        assert {"model_config_invalid", "model_config_provider_disabled", "transition_not_allowed"} <= set(
            summary["refusals"])

        assert check_chats(app, [c.chat_id for c in sim.chats], db_url) == []
        assert check_decisions(app, sim.decisions, sample=150, seed=SEED) == []
        for d in sim.decisions:
            assert d["did"] and d["did"][0] in FIRST_COMMAND[d["action"]]
    finally:
        app.close()


def test_a_seed_reproduces_the_run(memory_app: Any) -> None:
    from ledger.store import ChatLedgerApp

    other = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    try:
        a = simulate(memory_app, 25, 5, turns=2, steps=4, salt="a")
        b = simulate(other, 25, 5, turns=2, steps=4, salt="b")  # other ids, same decisions
        assert a.log == b.log
        sa, sb = a.summary(), b.summary()
        for s in (sa, sb):
            s.pop("seconds")
        assert sa == sb
        assert [(d["action"], d["version"], d["calls"], d["did"]) for d in a.decisions] == [
            (d["action"], d["version"], d["calls"], d["did"]) for d in b.decisions]
        c = simulate(ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}), 25, 6, turns=2, steps=4)
        assert c.log != a.log  # another seed, another run
    finally:
        other.close()


def test_cli_simulate_check_and_next_action_at_a_decision(sqlite_url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["--db", sqlite_url, "simulate", "--chats", "6", "--seed", "2", "--check", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # (progress lines go to stderr)
    assert summary["chats"] == 6 and summary["check"]["problems"] == 0
    assert summary["commands"] == summary["applied"] + summary["refused"]
    text = runner.invoke(main, ["--db", sqlite_url, "simulate", "--chats", "3", "--seed", "2"])
    assert text.exit_code == 0 and "simulated 3 chats" in text.output and "final states:" in text.output

    # next-action through the CLI, at a decision point of a simulated chat: the action the simulator took
    app = open_app(sqlite_url)
    try:
        sim = simulate(app, 4, 3, turns=1, steps=3)
    finally:
        app.close()
    for d in sim.decisions[:: max(len(sim.decisions) // 6, 1)]:
        out = runner.invoke(main, ["--db", sqlite_url, "next-action", d["chat_id"], "--at", str(d["version"]), "--json"])
        assert out.exit_code == 0, out.output
        got = json.loads(out.output)
        assert got["settings_source"] == "catalog"
        assert (got["action"], [c["tool_call_id"] for c in got["calls"]]) == (d["action"], d["calls"])
