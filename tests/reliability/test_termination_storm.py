"""A termination storm (issue 13 point 1): a real ``chat-ledger apply`` of a 5,000-line command file on
PostgreSQL while the test terminates that process's backends (``pg_terminate_backend``) again and again.
A connection killed between the server's commit and the client reading its reply is an in-doubt save;
one killed earlier is a save that recorded nothing. Afterwards the store holds exactly the events of the
accepted results: the lines the storm accepted, run again without faults on a fresh schema (with the
lines it refused for the domain's reasons, which record nothing either way), give the same results line
for line and the same log, event for event (times aside). No command recorded twice, none reported
refused that was recorded, none reported applied that was not.

Every line carries its own ``actor``, recorded on each of its events, so a difference can be traced to
its line; the lines of every other script run use idempotency keys.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from commands.handler import command_from_dict, execute
from ledger.errors import LedgerError
from ledger.store import open_app
from tests.reliability.command_script import normalized_log, script, untimed, with_key
from tests.reliability.kit import schema_backends, terminate

ROOT = Path(__file__).resolve().parents[2]
LINES = 5_000
MIN_TERMINATIONS = 65
#: refusals that say the database failed (nothing recorded), not that the command was wrong
UNAVAILABLE = {"database_unavailable"}
ACTORS = uuid.UUID("0d1e2f3a-4b5c-4d6e-8f70-81920a1b2c3d")


def actor(line: int) -> str:
    return str(uuid.uuid5(ACTORS, str(line)))


def command_file(path: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    run = 0
    while len(lines) < LINES:
        for i, step in enumerate(script(f"storm{run}", dynamic=False)):
            assert isinstance(step, dict)
            command = with_key(step, f"s{run}-{i}") if run % 2 else dict(step)
            lines.append({**command, "actor": actor(len(lines) + 1)})
        run += 1
    lines = lines[:LINES]
    path.write_text("".join(json.dumps(c) + "\n" for c in lines))
    return lines


def actors_in_store(app: Any) -> Counter[str]:
    return Counter(str(e.actor) for _, e in app.iter_events(0) if getattr(e, "actor", None) is not None)


def test_a_termination_storm_records_exactly_the_accepted_commands(pg_url: str, clean_pg_url: str,
                                                                  tmp_path: Path) -> None:
    path = tmp_path / "commands.jsonl"
    commands = command_file(path)
    storm_url = pg_url
    open_app(storm_url).close()  # the schema and tables exist before the storm starts
    out, err = tmp_path / "results.jsonl", tmp_path / "stderr.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:  # files: a full pipe would stall the child
        proc = subprocess.Popen([sys.executable, "-c", "from commands.cli.main import main; main()", "--db", storm_url,
                                 "apply", str(path)], cwd=ROOT, stdout=stdout, stderr=stderr)
        killed = 0
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            killed += terminate(storm_url, schema_backends(storm_url))
            time.sleep(0.05)  # the storm's pace: a kill every 50 ms
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert proc.returncode in (0, 1) and len(results) == LINES, err.read_text()[-2000:]
    assert killed >= MIN_TERMINATIONS, f"only {killed} backends terminated while apply ran"

    storm = open_app(storm_url)
    try:
        storm_log = normalized_log(storm)
        recorded_by = actors_in_store(storm)
    finally:
        storm.close()
    codes = Counter(r["error"]["code"] for r in results if not r["ok"])
    unknown = [r for r in results if not r["ok"] and r["error"]["code"] == "outcome_unknown"]
    # a line whose outcome could not be told counts as accepted if its events are there
    replayed = [(r, c) for r, c in zip(results, commands)
                if r["ok"] or (r["error"]["code"] not in UNAVAILABLE | {"outcome_unknown"})
                or (r["error"]["code"] == "outcome_unknown" and recorded_by[c["actor"]])]
    for r, c in zip(results, commands):
        if not r["ok"] and r["error"]["code"] in UNAVAILABLE:
            assert recorded_by[c["actor"]] == 0, f"line {r['line']} reported {r['error']} but was recorded"

    clean = open_app(clean_pg_url)
    try:
        for r, c in replayed:
            try:
                again: dict[str, Any] = {"ok": True, "result": execute(clean, command_from_dict(c))}
            except LedgerError as e:
                again = {"ok": False, "error": e.to_dict()}
            expected = {"ok": r["ok"], **({"result": r["result"]} if r["ok"] else {"error": r["error"]})}
            assert untimed(again) == untimed(expected), f"line {r['line']}: storm {expected}, fault-free {again}"
        clean_log = normalized_log(clean)
        clean_by = actors_in_store(clean)
    finally:
        clean.close()
    twice = {a: n for a, n in recorded_by.items() if n != clean_by.get(a)}
    assert twice == {}, f"lines recorded a different number of events than without faults: {twice}"
    assert storm_log == clean_log
    accepted = sum(r["ok"] for r in results)
    assert accepted >= LINES * 0.9, (accepted, codes)
    print(f"\nstorm: {killed} backends terminated, {accepted} of {LINES} lines applied, refusals {dict(codes)}, "
          f"{len(unknown)} outcome_unknown")
