"""``chat-ledger bench``: speed as ratios against a baseline measured in the same run.

* replay: load a 10,000-event chat (decode + fold) vs decoding the same events alone (target >= 0.8);
* rebuild: rebuild the three chat views from N recorded events vs scanning and decoding the same
  notification range (target >= 0.5 on PostgreSQL), with peak RSS of a rebuild at two sizes (flat);
* throughput: a simulated workload's commands through the real handler vs bare ``app.save`` of the very
  events the handler recorded, one save per command, into a fresh database (overhead target <= 1.3x);
* concurrent: 4 writer processes on distinct chats and on 2 contended chats: commands/s, conflict
  retries (counted by wrapping ``UnitOfWork.commit``), refusals;
* chain: the cost of the hash chains: the throughput workload's commands through the handler into a ledger
  with hash chains and one without (the column dropped), interleaved chunk by chunk in one process, and a
  rebuild of the chat views of 5x as many generated events in each (best of 3, alternating); ratios
  (without / with: 1.0 = no cost);
* views: 100,000 small chats, the chat views caught up, then p50/p99 latency of ``backend.query`` as the
  CLI's ``status`` (by chat, by organization) and ``unresolved`` run it.

``--quick`` runs every measurement at toy sizes (a smoke test: its figures mean nothing).

Each measurement runs in a fresh process (so peak RSS is the rebuild's own) on its own database: a new
SQLite file or a new PostgreSQL schema, dropped afterwards.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from typing import Any

import click

from commands.tools.bench_children import _drop, _fresh_url, _sibling

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"
KINDS = ("replay", "rebuild", "throughput", "concurrent", "views", "chain")


def _in_child(kind: str, url: str, events: int, *extra: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "commands.tools.bench_children", kind, url, str(events), *extra],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bench {kind} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_bench(backends: list[str], pg_url: str, rebuild_events: int, small_events: int, replay_events: int,
              only: set[str], throughput_commands: int = 4000, concurrent_commands: int = 300,
              view_chats: int = 100_000, interleave: int = 300) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "started_at": datetime.now(timezone.utc).isoformat(), "settings": {
            "rebuild_events": rebuild_events, "small_events": small_events, "replay_events": replay_events,
            "throughput_commands": throughput_commands, "concurrent_commands_per_process": concurrent_commands,
            "concurrent_processes": 4, "view_chats": view_chats, "interleave": interleave},
        "backends": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            r: dict[str, Any] = {}
            if "replay" in only:
                url = _fresh_url(backend, pg_url, tmp)
                try:
                    r["replay"] = _in_child("replay", url, replay_events)
                finally:
                    _drop(url)
            if "rebuild" in only:
                for label, n, k in (("small", small_events, 1), ("large", rebuild_events, 1),
                                    ("interleaved", small_events, interleave)):
                    if k < 2 and label == "interleaved":
                        continue
                    url = _fresh_url(backend, pg_url, tmp)
                    try:
                        written = _in_child("generate", url, n, str(k))
                        r[f"rebuild_{label}"] = {**_in_child("rebuild", url, n), "write_s": written["write_s"],
                                                 "interleave": k}
                    finally:
                        _drop(url)
            for kind, n in (("throughput", throughput_commands), ("concurrent", concurrent_commands),
                            ("views", view_chats)):
                if kind in only:
                    url = _fresh_url(backend, pg_url, tmp)
                    try:
                        r[kind] = _in_child(kind, url, n)
                    finally:
                        _drop(url)
                        if kind == "throughput":
                            for tag in ("h2", "s1", "s2"):
                                _drop(_sibling(url, tag))
            if "chain" in only:
                r["chain"] = _chain_cost(backend, pg_url, tmp, throughput_commands)
            results["backends"][backend] = r
    return results


def _chain_cost(backend: str, pg_url: str, tmp: str, commands: int) -> dict[str, Any]:
    """Command throughput and a rebuild with hash chains and without, interleaved in one child
    (``bench_children.child_chain``)."""
    url = _fresh_url(backend, pg_url, tmp)
    try:
        return _in_child("chain", url, commands)
    finally:
        for u in (url, *(_sibling(url, tag) for tag in ("nochain", "rh", "ru"))):
            _drop(u)


def print_table(results: dict[str, Any]) -> None:
    click.echo(f"{'backend':<9} {'measure':<34} {'figure':>16} {'baseline':>16} {'ratio':>7} {'target':>7}")
    for backend, r in results["backends"].items():
        if "replay" in r:
            x = r["replay"]
            click.echo(f"{backend:<9} {'replay 10k-event chat (ev/s)':<34} {x['replay_events_per_s']:>16,} "
                       f"{x['decode_events_per_s']:>16,} {x['ratio']:>7.2f} {'>=0.8':>7}")
        for label in ("small", "large", "interleaved"):
            x = r.get(f"rebuild_{label}")
            if x:
                shape = f", {x['interleave']} at once" if label == "interleaved" else ""
                click.echo(f"{backend:<9} {'rebuild views, ' + format(x['events'], ',') + ' ev' + shape:<34} "
                           f"{x['rebuild_events_per_s_per_view']:>16,} {x['raw_scan_decode_events_per_s']:>16,} "
                           f"{x['ratio_per_view']:>7.2f} {'>=0.5':>7}")
        sizes = [r[k] for k in ("rebuild_small", "rebuild_large") if k in r]
        if len(sizes) == 2:
            click.echo(f"{backend:<9} {'peak RSS of a rebuild (MB)':<34} "
                       f"{sizes[0]['events']:>9,} ev: {sizes[0]['peak_rss_mb']:>5.0f}   "
                       f"{sizes[1]['events']:>9,} ev: {sizes[1]['peak_rss_mb']:>5.0f}")
        if "throughput" in r:
            x = r["throughput"]
            click.echo(f"{backend:<9} {'commands, handler vs app.save (cmd/s)':<34} {x['handler_commands_per_s']:>16,} "
                       f"{x['bare_save_commands_per_s']:>16,} {x['overhead']:>7.2f} {'<=1.3x':>7}")
        if "chain" in r:
            x = r["chain"]
            click.echo(f"{backend:<9} {'commands, chains vs none (cmd/s)':<34} {x['commands_per_s']['hashed']:>16,} "
                       f"{x['commands_per_s']['unhashed']:>16,} {x['command_throughput_ratio']:>7.2f} {'':>7}")
            click.echo(f"{backend:<9} {'rebuild ' + format(x['rebuild_events'], ',') + ' ev, chains vs none (s)':<34} "
                       f"{x['rebuild_s']['hashed']:>16} {x['rebuild_s']['unhashed']:>16} {x['rebuild_ratio']:>7.2f} "
                       f"{'':>7}")
        if "concurrent" in r:
            x = r["concurrent"]
            for mode in ("distinct", "contended"):
                y = x[mode]
                label = f"4 writers, {mode}, {y['chats']} chats (cmd/s)"
                click.echo(f"{backend:<9} {label:<34} "
                           f"{y['commands_per_s']:>16,} {'retries ' + format(y['conflict_retries'], ','):>16} "
                           f"{y['retries_per_command']:>7.2f} {'refused ' + str(sum(y['refused'].values())):>7}")
        if "views" in r:
            x = r["views"]
            for q, label in (("status_by_chat", "status by chat"), ("status_by_org_page", "status by org, page of 100"),
                             ("status_by_org_all", "status by org, all rows"), ("unresolved_by_chat", "unresolved by chat"),
                             ("unresolved_all", "unresolved, all rows")):
                y = x[q]
                click.echo(f"{backend:<9} {label + ' (' + format(x['chats'], ',') + ' chats)':<34} "
                           f"{'p50 ' + format(y['p50_ms'], '.2f') + ' ms':>16} {'p99 ' + format(y['p99_ms'], '.2f') + ' ms':>16} "
                           f"{y['rows_per_query']:>7} rows")
