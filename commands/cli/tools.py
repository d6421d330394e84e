"""CLI of the tools (``commands.tools``): ``demo``, ``simulate`` and ``bench``."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections import Counter
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from commands.cli.context import STATUS_COLUMNS, Ctx, emit_json, json_option, pass_ctx, print_table, progress_bar
from commands.catalog import find_catalog
from commands.handler import apply_lines
from commands.tools.bench import KINDS, PG_DEFAULT, run_bench
from commands.tools.bench import print_table as print_bench_table
from commands.tools.demo import SCENARIOS, expected_refusals, fresh_ids, scenario_files
from commands.tools.sim_checks import check_chats, check_decisions
from commands.tools.simulate import simulate
from ledger.chat.views import status_row
from ledger.database import resolve_url
from ledger.store import redact

__all__ = ["bench", "demo", "simulate_cmd"]


@click.command()
@click.option("--scenarios", "folder", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Folder of *.jsonl scenarios (default: the bundled examples/scenarios).")
@click.option("--sim-chats", type=click.IntRange(min=0), default=20, show_default=True,
              help="Chats of the simulation run after the scenarios (0: none).")
@click.option("--sim-seed", type=int, default=42, show_default=True, help="Seed of that simulation.")
@json_option("Print what was recorded as one JSON object (scenarios, chats, simulation, head).")
@pass_ctx
def demo(c: Ctx, folder: Path | None, sim_chats: int, sim_seed: int, as_json: bool) -> None:
    """Record a realistic set of chats from examples/ and a small simulation, and show what the ledger holds."""
    folder = folder or SCENARIOS
    files = scenario_files(folder)
    if not files:
        raise click.ClickException(f"no scenarios found in {folder} (run from a checkout of chat-ledger)")
    app = c.app
    say = (lambda _text: None) if as_json else click.echo
    say(f"Recording {len(files)} scenarios into {redact(c.url)}\n")
    recorded: list[str] = []
    scenarios: list[dict[str, Any]] = []
    for path in files:
        lines, mapping = fresh_ids(path.read_text(encoding="utf-8").splitlines(),
                                   keep=lambda org: find_catalog(app, uuid.UUID(org)) is None)
        refusals: list[dict[str, Any]] = []
        ok, refused = apply_lines(app, lines, out=lambda r: refusals.append(r) if not r["ok"] else None)
        expected = expected_refusals(path)
        got = {str(r["line"]): r["error"]["code"] for r in refusals}
        as_expected = expected is None or got == expected
        scenarios.append({"scenario": path.stem, "applied": ok, "refused": refused, "as_expected": as_expected,
                          "refusals": [{"line": r["line"], "type": r["type"], "error": r["error"]} for r in refusals]})
        verdict = "as the scenario expects" if as_expected else "UNEXPECTED"
        say(f"  {path.stem:<22} {ok:>3} commands applied, {refused} refused {verdict}")
        for r in refusals:
            say(f"      line {r['line']:>2} {r['type']}: {r['error']['code']} — {r['error']['message']}")
        recorded.extend(mapping.values())
    chats = (app.load(uuid.UUID(cid)) for cid in recorded)
    rows = sorted((status_row(ch.state) for ch in chats if ch is not None), key=lambda r: r["title"])
    sim: Any = None
    if not as_json:
        click.echo("\nChats recorded by this run:")
        print_table(rows, STATUS_COLUMNS)
    if sim_chats:
        say(f"\nA simulation ({sim_chats} chats driven through the same commands by a seeded fake "
            f"model, seed {sim_seed}):")
        sim = simulate(app, sim_chats, sim_seed, turns=2, steps=4)
        if not as_json:
            print_summary(sim.summary())
    sample = next((d for d in reversed(sim.decisions) if d["action"] == "execute_local_tools"), None) if sim else None
    head = app.head()
    # the organization with the most chats of this run, and its first chat's owner: who to serve it to
    orgs = Counter(r["organization_id"] for r in rows)
    org = orgs.most_common(1)[0][0] if orgs else None
    user = next((r["owner_id"] for r in rows if r["organization_id"] == org), None)
    service = {"org": org, "user": user, "chats": orgs.get(org, 0)} if org else None
    if as_json:
        emit_json({"db": redact(c.url), "scenarios": scenarios, "chats": rows,
                   "simulation": sim.summary() if sim else None, "head": head, "service": service})
        return
    click.echo(f"\nThe ledger now holds {head} events. Try:\n"
               f"  chat-ledger status\n  chat-ledger show {rows[0]['chat_id']}\n"
               f"  chat-ledger show {rows[0]['chat_id']} --at 2 --json")
    if sample is not None:
        click.echo(f"  chat-ledger next-action {sample['chat_id']} --at {sample['version']}   "
                   f"# what the simulated worker did: {sample['action']}")
    if service is not None:
        db = "" if c.url == resolve_url(None) else f" --db '{redact(c.url)}'"
        click.echo(f"\nServe it (organization {org}: {service['chats']} of this run's chats; user {user} owns one):\n"
                   f"  chat-ledger{db} tokens create --user {user} --org {org} --role admin\n"
                   f"  chat-ledger{db} serve --port 8080   # then open http://127.0.0.1:8080/ui/ and sign in "
                   f"with the secret")


def _given(param: str) -> bool:
    """Whether the running command's option ``param`` was given (not its default)."""
    source = click.get_current_context().get_parameter_source(param)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def print_summary(s: dict[str, Any]) -> None:
    click.echo(f"simulated {s['chats']} chats ({s['root_chats']} root, {s['child_chats']} subagent) in "
               f"{s['orgs']} organizations, seed {s['seed']}: {s['seconds']:.1f} s")
    click.echo(f"  commands {s['commands']} ({s['applied']} applied, {s['refused']} refused"
               f"{', ' + str(s['unexpected_refusals']) + ' UNEXPECTED' if s['unexpected_refusals'] else ''}); "
               f"events {s['events']}; worker decisions {s['decisions']}")
    if s["refusals"]:
        click.echo("  refusals: " + ", ".join(f"{k} {v}" for k, v in s["refusals"].items()))
    click.echo("  final states: " + ", ".join(f"{k} {v}" for k, v in s["final_states"].items()))
    act = s["activity"]
    actions = ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in act.items() if k.startswith("action:"))
    click.echo(f"  decisions: {actions}")
    other = ", ".join(f"{k} {v}" for k, v in act.items() if not k.startswith("action:") and k not in ("chats", "child_chats"))
    click.echo(f"  activity: {other}")
    if s["anomalies"]:
        click.echo(f"  ANOMALIES: {s['anomalies']}")


@click.command("simulate")
@click.option("--chats", type=click.IntRange(min=1), default=50, show_default=True, help="Chats to simulate (subagent chats included).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the fake model and users.")
@click.option("--orgs", type=click.IntRange(min=1), default=3, show_default=True, help="Organizations.")
@click.option("--concurrency", type=click.IntRange(min=1), default=32, show_default=True,
              help="Chats in flight at once (interleaved).")
@click.option("--salt", default=None,
              help="Id salt: other ids for the same run. Default: the seed's own, so a seed gives the same ids on a "
                   "new ledger (and new ones when this ledger already holds its run).")
@click.option("--check", is_flag=True, help="Then check the invariants on every simulated chat and next-action "
                                            "agreement on a sample of decisions; exit 1 on a problem.")
@click.option("--check-sample", type=click.IntRange(min=0), default=500, show_default=True,
              help="Decision points to re-decide with --check.")
@json_option("Print the summary as JSON.")
@pass_ctx
def simulate_cmd(c: Ctx, chats: int, seed: int, orgs: int, concurrency: int, salt: str | None, check: bool,
                 check_sample: int, as_json: bool) -> None:
    """Drive CHATS chats through the real commands with a deterministic fake model, and summarize."""
    if not as_json:
        click.echo(f"Simulating {chats} chats into {redact(c.url)} ...")
    with progress_bar("simulating chats", chats, threshold=0, unit="chats") as progress:
        sim = simulate(c.app, chats, seed, orgs, salt, concurrency=concurrency, progress=progress)
    summary = sim.summary()
    problems: list[str] = []
    if check:
        t0 = time.perf_counter()
        problems = check_chats(c.app, [x.chat_id for x in sim.chats], c.url)
        problems += check_decisions(c.app, sim.decisions, check_sample, seed)
        problems += [f"unexpected refusal: {u}" for u in sim.unexpected] + sim.anomalies
        summary["check"] = {"chats": len(sim.chats), "decisions_checked": min(check_sample, len(sim.decisions)),
                            "problems": len(problems), "seconds": round(time.perf_counter() - t0, 2),
                            "first_problems": problems[:10]}
    if as_json:
        emit_json(summary)
    else:
        print_summary(summary)
        if check:
            ck = summary["check"]
            click.echo(f"  check: {ck['chats']} chats, {ck['decisions_checked']} decisions re-decided: "
                       f"{ck['problems']} problems ({ck['seconds']:.1f} s)")
            for p in problems[:10]:
                click.echo(f"    {p}")
    if problems:
        raise SystemExit(1)


@click.command("bench")
@click.option("--backend", "backends", multiple=True, type=click.Choice(["sqlite", "postgres"]),
              help="Default: both.")
@click.option("--pg", "pg_url", default=lambda: os.environ.get("CHAT_LEDGER_BENCH_PG", PG_DEFAULT), show_default="local")
@click.option("--events", "rebuild_events", type=int, default=200_000, show_default=True, help="Rebuild size.")
@click.option("--small-events", type=int, default=100_000, show_default=True, help="Second rebuild size (memory).")
@click.option("--replay-events", type=int, default=10_000, show_default=True)
@click.option("--throughput-commands", type=int, default=4000, show_default=True)
@click.option("--concurrent-commands", type=int, default=300, show_default=True, help="Per writer process.")
@click.option("--view-chats", type=int, default=100_000, show_default=True)
@click.option("--service-commands", type=int, default=2000, show_default=True,
              help="Commands the 8 HTTP clients send (and apply runs in process).")
@click.option("--interleave", type=int, default=300, show_default=True,
              help="Chats recorded at once in the interleaved rebuild ledger (of --small-events events; 1: skip it).")
@click.option("--many-chats", default="2000,10000", show_default=True,
              help="Chats at once of the extra interleaved stream-wise rebuild ledgers (comma-separated).")
@click.option("--workers", type=click.IntRange(1, 256), default=lambda: os.cpu_count() or 1,
              show_default="the number of CPUs", help="Worker processes of the N-worker stream-wise rebuilds.")
@click.option("--million", is_flag=True, help="Also rebuild a 1,000,000-event interleaved ledger stream-wise, and (evidence) "
                                            "checkpoint and prove one.")
@click.option("--long-chat-events", type=int, default=50_000, show_default=True,
              help="Length of the long chat whose first command in a fresh process is timed (longchat).")
@click.option("--only", multiple=True, type=click.Choice(KINDS), help="Default: all.")
@click.option("--quick", is_flag=True, help="Small sizes, for a smoke test (figures are not meaningful).")
@click.option("--output", "-o", "--out", "out", type=click.Path(dir_okay=False, allow_dash=True),
              default="bench-results.json", show_default=True, help="The JSON results' file (- for standard output).")
@json_option("Print the results as JSON on standard output (the table goes to standard error; no file unless "
             "--output is given).")
def bench(backends: tuple[str, ...], pg_url: str, rebuild_events: int, small_events: int, replay_events: int,
          throughput_commands: int, concurrent_commands: int, view_chats: int, service_commands: int,
          interleave: int, many_chats: str, workers: int, million: bool, long_chat_events: int,
          only: tuple[str, ...], quick: bool, out: str, as_json: bool) -> None:
    """Measure replay, rebuild, command throughput, concurrent writers, view queries, the service and the
    first command on a long chat against same-run baselines; print a table, write JSON."""
    chats = tuple(int(k) for k in many_chats.split(",") if k.strip())
    if quick:
        rebuild_events, small_events, replay_events = 4000, 2000, 1000
        throughput_commands, concurrent_commands, view_chats, service_commands = 400, 40, 2000, 200
        long_chat_events = 3000
        chats = tuple(min(k, 200) for k in chats)
    try:
        results = run_bench(list(backends) or ["sqlite", "postgres"], pg_url, rebuild_events, small_events,
                            replay_events, set(only) or set(KINDS), throughput_commands, concurrent_commands,
                            view_chats, interleave, service_commands, chats, workers, million, long_chat_events)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None
    results["settings"]["quick"] = quick
    if as_json:  # the JSON on standard output, everything else on standard error
        with redirect_stdout(sys.stderr):
            print_bench_table(results)
        click.echo(json.dumps(results, indent=2))
        if not _given("out") or out == "-":
            return
    else:
        print_bench_table(results)
        if out == "-":
            click.echo(json.dumps(results, indent=2))
            return
    with open(out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    click.echo(f"\nwrote {out}", err=as_json)
