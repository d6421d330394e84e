"""``chat-ledger demo``: record the example scenarios as fresh chats, then a small simulation
(``commands.simulate``, fixed seed, fresh ids), and show what the ledger holds."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import click

from commands.cli import Ctx, apply_lines, main, pass_ctx, print_table, STATUS_COLUMNS
from ledger.chat.views import status_row
from ledger.store import redact

SCENARIOS = Path(__file__).resolve().parent.parent / "examples" / "scenarios"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def scenario_files(folder: Path = SCENARIOS) -> list[Path]:
    return sorted(folder.glob("*.jsonl"))


def fresh_ids(lines: list[str]) -> tuple[list[str], dict[str, str]]:
    """Give the scenario's chats, organizations and model configs new ids, so the demo records new ones on
    every run. The mapping returned is that of the chats."""
    chat_ids: set[str] = set()
    other_ids: set[str] = set()
    for line in lines:
        if not line.strip():
            continue
        obj = json.loads(line)
        if obj.get("type") == "create_chat" and "chat_id" in obj:
            chat_ids.add(obj["chat_id"])
        if obj.get("type") == "create_model_config" and obj.get("model_config_id"):
            other_ids.add(obj["model_config_id"])
        if obj.get("organization_id"):
            other_ids.add(obj["organization_id"])
    mapping = {old: str(uuid.uuid4()) for old in chat_ids}
    every = {**{old: str(uuid.uuid4()) for old in other_ids}, **mapping}
    return [_UUID.sub(lambda m: every.get(m.group(0), m.group(0)), l) for l in lines], mapping


def _expected_refusals(path: Path) -> dict[str, str] | None:
    expected = path.with_name(path.stem + ".expected.json")
    if not expected.exists():
        return None
    return json.loads(expected.read_text(encoding="utf-8")).get("refused", {})


@main.command()
@click.option("--scenarios", "folder", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Folder of *.jsonl scenarios (default: examples/scenarios).")
@click.option("--sim-chats", type=click.IntRange(min=0), default=20, show_default=True,
              help="Chats of the simulation run after the scenarios (0: none).")
@click.option("--sim-seed", type=int, default=42, show_default=True, help="Seed of that simulation.")
@pass_ctx
def demo(c: Ctx, folder: Path | None, sim_chats: int, sim_seed: int) -> None:
    """Record a realistic set of chats from examples/ and a small simulation, and show what the ledger holds."""
    folder = folder or SCENARIOS
    files = scenario_files(folder)
    if not files:
        raise click.ClickException(f"no scenarios found in {folder} (run from a checkout of chat-ledger)")
    app = c.app
    click.echo(f"Recording {len(files)} scenarios into {redact(c.url)}\n")
    recorded: list[str] = []
    for path in files:
        lines, mapping = fresh_ids(path.read_text(encoding="utf-8").splitlines())
        refusals: list[dict[str, Any]] = []
        ok, refused = apply_lines(app, lines, out=lambda r: refusals.append(r) if not r["ok"] else None)
        expected = _expected_refusals(path)
        got = {str(r["line"]): r["error"]["code"] for r in refusals}
        verdict = "as the scenario expects" if expected is None or got == expected else "UNEXPECTED"
        click.echo(f"  {path.stem:<22} {ok:>3} commands applied, {refused} refused {verdict}")
        for r in refusals:
            click.echo(f"      line {r['line']:>2} {r['type']}: {r['error']['code']} — {r['error']['message']}")
        recorded.extend(mapping.values())
    chats = (app.load(uuid.UUID(cid)) for cid in recorded)
    rows = sorted((status_row(ch.state) for ch in chats if ch is not None), key=lambda r: r["title"])
    click.echo("\nChats recorded by this run:")
    print_table(rows, STATUS_COLUMNS)
    if sim_chats:
        from commands.simulate import print_summary, simulate

        click.echo(f"\nA simulation ({sim_chats} chats driven through the same commands by a seeded fake "
                   f"model, seed {sim_seed}):")
        sim = simulate(app, sim_chats, sim_seed, turns=2, steps=4)
        print_summary(sim.summary())
        sample = next((d for d in reversed(sim.decisions) if d["action"] == "execute_local_tools"), None)
    else:
        sample = None
    head = app.head()
    click.echo(f"\nThe ledger now holds {head} events. Try:\n"
               f"  chat-ledger status\n  chat-ledger show {rows[0]['chat_id']}\n"
               f"  chat-ledger show {rows[0]['chat_id']} --at 2 --json")
    if sample is not None:
        click.echo(f"  chat-ledger next-action {sample['chat_id']} --at {sample['version']}   "
                   f"# what the simulated worker did: {sample['action']}")
