"""``chat-ledger bench``: speed as ratios against a baseline measured in the same run.

* replay: load a 10,000-event chat (decode + fold) vs decoding the same events alone (target >= 0.8);
* rebuild: rebuild the three chat views from N recorded events vs scanning and decoding the same
  notification range (target >= 0.5 on PostgreSQL), with peak RSS of a rebuild at two sizes (flat);
* throughput: a simulated workload's commands through the real handler vs bare ``app.save`` of the very
  events the handler recorded, one save per command, into a fresh database (overhead target <= 1.3x);
* concurrent: 4 writer processes on distinct chats and on 2 contended chats: commands/s, conflict
  retries (counted by wrapping ``UnitOfWork.commit``), refusals;
* service: 8 concurrent HTTP clients recording chats through ``chat-ledger serve`` vs ``apply`` of the same
  commands in one process (target >= 0.8), with p50/p99 latency and the SSE delivery lag p99 (< 100 ms)
  (``commands.tools.bench_service``);
* longchat: the first command on a 50,000-event chat in a fresh process (from its latest snapshot) vs the
  first command on a new chat in a fresh process (target <= 2x), and the long chat's full replay;
* chain: the cost of the hash chains: the throughput workload's commands through the handler into a ledger
  with hash chains and one without (the column dropped), interleaved chunk by chunk in one process, and a
  rebuild of the chat views of 5x as many generated events in each (best of 3, alternating); ratios
  (without / with: 1.0 = no cost);
* writepath (PostgreSQL): pgbench's one-row insert per transaction at 1, 8 and 32 clients beside the handler in
  one process (target >= 0.5 of pgbench at 1 client) and the service at 8 and 32 clients (>= 0.3 of pgbench at
  as many) (``commands.tools.bench_writepath``);
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

from commands.tools.bench_kit import _drop, _fresh_url, _sibling

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"
KINDS = ("replay", "rebuild", "throughput", "concurrent", "views", "service", "longchat", "chain", "search", "startup",
         "writepath", "evidence", "privacy")


def _in_child(kind: str, url: str, events: int, *extra: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "commands.tools.bench_children", kind, url, str(events), *extra],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bench {kind} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_bench(backends: list[str], pg_url: str, rebuild_events: int, small_events: int, replay_events: int,
              only: set[str], throughput_commands: int = 4000, concurrent_commands: int = 300,
              view_chats: int = 100_000, interleave: int = 300, service_commands: int = 2000,
              many_chats: tuple[int, ...] = (2_000, 10_000), workers: int = 2, million: bool = False,
              long_chat_events: int = 50_000) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "started_at": datetime.now(timezone.utc).isoformat(), "settings": {
            "rebuild_events": rebuild_events, "small_events": small_events, "replay_events": replay_events,
            "throughput_commands": throughput_commands, "concurrent_commands_per_process": concurrent_commands,
            "concurrent_processes": 4, "view_chats": view_chats, "interleave": interleave,
            "service_commands": service_commands, "long_chat_events": long_chat_events},
        "backends": {},
    }
    if "startup" in only:  # the CLI's start-up, whole process, beside `python -c pass` (SQLite only)
        from commands.tools.bench_startup import measure

        results["startup"] = measure()
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
            if "rebuild" in only:
                r.update(_streamwise_runs(backend, pg_url, tmp, small_events, rebuild_events, interleave,
                                          many_chats, workers, million))
            for kind, n in (("throughput", throughput_commands), ("concurrent", concurrent_commands),
                            ("views", view_chats), ("service", service_commands),
                            ("longchat", long_chat_events)):
                if kind in only:
                    url = _fresh_url(backend, pg_url, tmp)
                    try:
                        r[kind] = _in_child(kind, url, n)
                    finally:
                        _drop(url)
                        if kind in ("throughput", "service"):
                            for tag in ("h2", "s1", "s2", "inproc"):
                                _drop(_sibling(url, tag))
            if "chain" in only:
                r["chain"] = _chain_cost(backend, pg_url, tmp, throughput_commands)
            if "evidence" in only:  # the Merkle tree and checkpoints (commands/tools/bench_evidence.py)
                url = _fresh_url(backend, pg_url, tmp)
                sizes = ("10000", "100000", *(("1000000",) if million else ()))
                try:
                    r["evidence"] = _in_child("evidence", url, throughput_commands, *sizes)
                finally:
                    for u in (url, _sibling(url, "arm1"), _sibling(url, "arm2"), *(_sibling(url, f"ev{n}") for n in sizes)):
                        _drop(u)
            if "privacy" in only:  # sealing people's data (commands/tools/bench_privacy.py)
                url = _fresh_url(backend, pg_url, tmp)
                try:
                    r["privacy"] = _in_child("privacy", url, throughput_commands)
                finally:
                    for u in (url, _sibling(url, "sealed"), _sibling(url, "gp"), _sibling(url, "gs")):
                        _drop(u)
            if "writepath" in only and backend == "postgres":  # beside pgbench (commands/tools/bench_writepath.py)
                url = _fresh_url(backend, pg_url, tmp)
                try:
                    r["writepath"] = _in_child("writepath", url, service_commands)
                finally:
                    _drop(url)
                    for tag in ("svc8", "svc32", "inproc", "many"):
                        _drop(_sibling(url, tag))
            if "search" in only:  # the search view on a ledger of rebuild_events events (commands/tools/bench_search.py)
                url = _fresh_url(backend, pg_url, tmp)
                try:
                    out = subprocess.run([sys.executable, "-m", "commands.tools.bench_search", url,
                                          str(rebuild_events)], capture_output=True, text=True, check=False)
                    if out.returncode != 0:
                        raise RuntimeError(f"bench search failed:\n{out.stderr[-2000:]}")
                    r["search"] = json.loads(out.stdout.strip().splitlines()[-1])
                finally:
                    _drop(url)
            results["backends"][backend] = r
    return results


def _streamwise_runs(backend: str, pg_url: str, tmp: str, small: int, large: int, interleave: int,
                     many_chats: tuple[int, ...], workers: int, million: bool) -> dict[str, Any]:
    """Stream-wise rebuilds (1 and ``workers`` processes) and a log-order build on each ledger shape, the
    library's ProjectionRunner on the interleaved one (PostgreSQL), and optionally a 1,000,000-event ledger."""
    shapes = [("cac_small", small, 1), ("cac_large", large, 1), ("il_small", small, interleave),
              ("il_large", large, interleave), *((f"il_{k}", large, k) for k in many_chats)]
    if million:
        shapes.append(("il_million", 1_000_000, interleave))
    out: dict[str, Any] = {}
    for label, n, k in shapes:
        url = _fresh_url(backend, pg_url, tmp)
        try:
            written = _in_child("generate", url, n, str(k))
            x = _in_streamwise("streamwise", url, str(workers))
            x.update(interleave=k, write_s=written["write_s"])
            if backend == "postgres" and label == "il_small":
                x["library_projection_runner"] = _in_streamwise("library", url)
            out[f"streamwise_{label}"] = x
        finally:
            _drop(url)
    return out


def _in_streamwise(kind: str, url: str, *extra: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "commands.tools.bench_streamwise", kind, url, *extra],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bench {kind} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _chain_cost(backend: str, pg_url: str, tmp: str, commands: int) -> dict[str, Any]:
    """Command throughput and a rebuild with hash chains and without, interleaved in one child
    (``bench_chain.child_chain``)."""
    url = _fresh_url(backend, pg_url, tmp)
    try:
        return _in_child("chain", url, commands)
    finally:
        for u in (url, *(_sibling(url, tag) for tag in ("nochain", "rh", "ru"))):
            _drop(u)


def _row(backend: str, measure: str, figure: Any, baseline: Any = "", ratio: float | None = None,
         target: str = "") -> None:
    """One line of the table: counts with thousands separators, other figures as they are."""
    def cell(v: Any) -> str:
        return format(v, ",") if isinstance(v, int) and not isinstance(v, bool) else str(v)

    shown = "" if ratio is None else format(ratio, ".2f")
    click.echo(f"{backend:<9} {measure:<34} {cell(figure):>16} {cell(baseline):>16} {shown:>7} {target:>7}")


def print_table(results: dict[str, Any]) -> None:
    click.echo(f"{'backend':<9} {'measure':<34} {'figure':>16} {'baseline':>16} {'ratio':>7} {'target':>7}")
    for name, x in results.get("startup", {}).items():
        if name != "python":
            click.echo(f"{'cli':<9} {'start-up s (median of 5), ' + name:<34} {x['median_s']:>16} "
                       f"{'python ' + str(results['startup']['python']['median_s']):>16} {'':>7} "
                       f"{'<' + str(x['target_s']):>7}")
    for backend, r in results["backends"].items():
        if "search" in r:
            x = r["search"]
            click.echo(f"{backend:<9} {'search view rebuild, ' + format(x['events'], ',') + ' ev':<34} "
                       f"{x['rebuild']['events_per_s']:>16,} {x['rebuild']['scan_decode_events_per_s']:>16,} "
                       f"{x['rebuild']['ratio']:>7.2f} {'>=0.5':>7}")
            click.echo(f"{backend:<9} {'  the same, ' + str(x['rebuild']['workers']) + ' workers / 1 (s)':<34} "
                       f"{x['rebuild']['seconds']:>16} {x['rebuild']['one_worker']['seconds']:>16} "
                       f"{x['rebuild']['one_worker']['ratio']:>7.2f} {'':>7}")
            for kind, q in x["queries"].items():
                click.echo(f"{backend:<9} {'  search API p95 ms, ' + kind:<34} {q['p95_ms']:>16} {'p50 ' + str(q['p50_ms']):>16} "
                           f"{'':>7} {'<50':>7}")
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
        for key, x in r.items():
            if not key.startswith("streamwise_"):
                continue
            w = next(k for k in x if k.startswith("streamwise_") and k != "streamwise_1")
            shape = f"{x['events']:,} ev, " + ("chat after chat" if x["interleave"] == 1 else f"{x['interleave']:,} at once")
            for label, target in (("streamwise_1", ">=0.6"), (w, ">=1.0"), ("log_order", "")):
                y = x[label]
                what = {"streamwise_1": "stream-wise, 1 worker", "log_order": "log order (catch-up)"}.get(
                    label, f"stream-wise, {y['workers']} workers")
                click.echo(f"{backend:<9} {what + ', ' + shape:<34} {y['events_per_s']:>16,} "
                           f"{x['raw_scan_decode_events_per_s']:>16,} {y['ratio']:>7.2f} {target:>7}")
            rss = [x["streamwise_1"]["peak_rss_mb"], *x[w]["worker_peak_rss_mb"]]
            click.echo(f"{backend:<9} {'  peak RSS MB (1 worker; each of N)':<34} {', '.join(f'{v:.0f}' for v in rss):>16} "
                       f"{'log/stream-wise':>16} {x['log_order_vs_streamwise_1']:>7.2f} {'<=2x':>7}")
            if "library_projection_runner" in x:
                y = x["library_projection_runner"]
                click.echo(f"{backend:<9} {'  library ProjectionRunner (ev/s)':<34} {y['events_per_s']:>16,} "
                           f"{x['raw_scan_decode_events_per_s']:>16,} "
                           f"{y['events_per_s'] / x['raw_scan_decode_events_per_s']:>7.2f}")
        sizes = [r[k] for k in ("rebuild_small", "rebuild_large") if k in r]
        if len(sizes) == 2:
            click.echo(f"{backend:<9} {'peak RSS of a rebuild (MB)':<34} "
                       f"{sizes[0]['events']:>9,} ev: {sizes[0]['peak_rss_mb']:>5.0f}   "
                       f"{sizes[1]['events']:>9,} ev: {sizes[1]['peak_rss_mb']:>5.0f}")
        if "throughput" in r:
            x = r["throughput"]
            click.echo(f"{backend:<9} {'commands, handler vs app.save (cmd/s)':<34} {x['handler_commands_per_s']:>16,} "
                       f"{x['bare_save_commands_per_s']:>16,} {x['overhead']:>7.2f} {'<=1.3x':>7}")
        if "longchat" in r:
            x = r["longchat"]
            label = f"1st cmd, {x['events']:,}-ev chat vs new (ms)"
            click.echo(f"{backend:<9} {label:<34} {x['first_command_long_ms']:>16,.1f} "
                       f"{x['first_command_new_ms']:>16,.1f} {x['ratio']:>7.2f} {'<=2x':>7}")
        if "chain" in r:
            x = r["chain"]
            click.echo(f"{backend:<9} {'commands, chains vs none (cmd/s)':<34} {x['commands_per_s']['hashed']:>16,} "
                       f"{x['commands_per_s']['unhashed']:>16,} {x['command_throughput_ratio']:>7.2f} {'':>7}")
            click.echo(f"{backend:<9} {'rebuild ' + format(x['rebuild_events'], ',') + ' ev, chains vs none (s)':<34} "
                       f"{x['rebuild_s']['hashed']:>16} {x['rebuild_s']['unhashed']:>16} {x['rebuild_ratio']:>7.2f} "
                       f"{'':>7}")
        if "evidence" in r:
            x = r["evidence"]
            for arm, ratio in x["command_throughput_ratio"].items():
                _row(backend, f"commands, checkpoint {arm} vs none", x["commands_per_s"][arm],
                     x["commands_per_s"]["none"], ratio, ">=0.9")
            for n, z in x["sizes"].items():
                ev = format(int(n), ",")
                if "rebuild_ratio" in z:
                    _row(backend, f"rebuild s, tree vs none, {ev}", z["rebuild_s"]["with_tree"],
                         z["rebuild_s"]["without_tree"], z["rebuild_ratio"], "~1")
                _row(backend, f"first checkpoint s, {ev} ev", z["first_checkpoint_s"], f"scan {z['scan_decode_s']}")
                _row(backend, f"next checkpoint s (+1,000 ev), {ev}", z["next_checkpoint_s"], target="<2")
                _row(backend, f"inclusion / consistency ms, {ev}", z["inclusion_ms_median"], z["consistency_ms_median"])
                _row(backend, f"  proof nodes (incl/cons), {ev}", z["inclusion_nodes_max"], z["consistency_nodes_max"],
                     target="log n")
        if "privacy" in r:
            x = r["privacy"]
            p, s = x["ledgers"]["plain"], x["ledgers"]["sealed"]
            _row(backend, f"commands, sealed vs plain (cmd/s; median of {x['rounds']} rounds, totals "
                          f"{x['command_total_ratio']:.2f})", x["commands_per_s"]["sealed"],
                 x["commands_per_s"]["plain"], x["command_throughput_ratio"], ">=0.85")
            _row(backend, f"rebuild {p['events']:,} ev, every projection, sealed vs plain (s)", s["rebuild_s"],
                 p["rebuild_s"], x["rebuild_ratio"], ">=0.85")
            for name, ratio in x.get("rebuild_each_ratio", {}).items():
                _row(backend, f"  {name} alone (s)", s["rebuild_each_s"][name], p["rebuild_each_s"][name], ratio)
            _row(backend, "scan+decode, sealed vs plain (s)", s["scan_decode_s"], p["scan_decode_s"],
                 x["scan_decode_ratio"])
            _row(backend, "stored bytes, sealed vs plain", s["stored_bytes"], p["stored_bytes"], x["stored_size_ratio"])
            e = x["erasure"]
            _row(backend, f"erase a user of {e['chats']:,} chats vs record them (s)", e["erase_s"], e["record_s"],
                 e["record_vs_erase_ratio"], "seconds")
        if "concurrent" in r:
            x = r["concurrent"]
            for mode in ("distinct", "contended"):
                y = x[mode]
                label = f"4 writers, {mode}, {y['chats']} chats (cmd/s)"
                click.echo(f"{backend:<9} {label:<34} "
                           f"{y['commands_per_s']:>16,} {'retries ' + format(y['conflict_retries'], ','):>16} "
                           f"{y['retries_per_command']:>7.2f} {'refused ' + str(sum(y['refused'].values())):>7}")
        if "service" in r:
            x = r["service"]
            h, b = x["http"], x["in_process"]
            click.echo(f"{backend:<9} {str(h['clients']) + ' HTTP clients vs apply (cmd/s)':<34} "
                       f"{h['commands_per_s']:>16,} {b['commands_per_s']:>16,} {x['ratio']:>7.2f} {'>=0.8':>7}")
            click.echo(f"{backend:<9} {'  latency HTTP / in-process':<34} "
                       f"{'p50 ' + format(h['p50_ms'], '.1f') + ' ms':>16} {'p50 ' + format(b['p50_ms'], '.1f') + ' ms':>16}")
            click.echo(f"{backend:<9} {'':<34} "
                       f"{'p99 ' + format(h['p99_ms'], '.1f') + ' ms':>16} {'p99 ' + format(b['p99_ms'], '.1f') + ' ms':>16}")
            s = h["sse"]
            click.echo(f"{backend:<9} {'  SSE lag, ' + format(s['events'], ',') + ' events':<34} "
                       f"{'p50 ' + format(s['p50_ms'], '.1f') + ' ms':>16} {'p99 ' + format(s['p99_ms'], '.1f') + ' ms':>16} "
                       f"{'':>7} {'<100ms':>7}")
        if "writepath" in r:
            x = r["writepath"]
            p = x["pgbench"]
            click.echo(f"{backend:<9} {'write path: handler vs pgbench, 1 cl':<34} {x['handler']['commands_per_s']:>16,} "
                       f"{str(p.get('clients_1')):>16} {str(x['ratios']['handler_vs_pgbench_1']):>7} {'>=0.5':>7}")
            f = x["floors"]
            for what, key in (("  psycopg: one INSERT per tx (/s)", "psycopg_insert_per_s"),
                              ("  the recorder alone: saves/s", "recorder_saves_per_s")):
                click.echo(f"{backend:<9} {what:<34} {f[key]:>16,} {str(p.get('clients_1')):>16} "
                           f"{f[key] / p['clients_1'] if isinstance(p.get('clients_1'), int) else 0:>7.2f}")
            for n in (8, 32):
                s = x["service"][f"clients_{n}"]
                click.echo(f"{backend:<9} {f'  service vs pgbench, {n} clients':<34} {s['commands_per_s']:>16,} "
                           f"{str(p.get(f'clients_{n}')):>16} {str(x['ratios'][f'service_{n}_vs_pgbench_{n}']):>7} "
                           f"{'>=0.3':>7}")
            m = x["many_servers"]
            label = f"  {m['servers']} servers, {m['clients']} clients (cmd/s)"
            click.echo(f"{backend:<9} {label:<34} "
                       f"{m['commands_per_s']:>16,} {'p99 ' + format(m['p99_ms'], '.1f') + ' ms':>16}")
        if "views" in r:
            x = r["views"]
            for q, label in (("status_by_chat", "status by chat"), ("status_by_org_page", "status by org, page of 100"),
                             ("status_by_org_all", "status by org, all rows"), ("unresolved_by_chat", "unresolved by chat"),
                             ("unresolved_all", "unresolved, all rows")):
                y = x[q]
                click.echo(f"{backend:<9} {label + ' (' + format(x['chats'], ',') + ' chats)':<34} "
                           f"{'p50 ' + format(y['p50_ms'], '.2f') + ' ms':>16} {'p99 ' + format(y['p99_ms'], '.2f') + ' ms':>16} "
                           f"{y['rows_per_query']:>7} rows")
