"""Where a command's time goes: the throughput bench's command mix (``commands.tools.bench_writes``:
500 chats x 8 commands) through the real handler under cProfile, on a fresh ledger, then the share of each
part of the handler (cumulative times, so parts may nest: "save" holds "SQLite commit").

    .venv/bin/python examples/profile_commands.py [--db sqlite:////tmp/prof.db] [--commands 4000] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time

from commands.handler import execute
from commands.tools.bench_writes import _workload_commands
from commands.tools.workload import setup_catalogs
from ledger.store import open_app

#: (label, substring of a profiled function's "file:line(name)")
PARTS = [
    ("handler (execute)", "handler.py", "(execute)"),
    ("app.save (the baseline's work, and more)", "ledger/store.py", "(save)"),
    ("app.save (the library's, before this branch)", "eventsourcing/application.py", "(save)"),
    ("  recorder insert + commit", "sqlite.py", "(insert_events)"),
    ("  SQLite commit", "", "<method 'commit' of 'sqlite3.Connection' objects>"),
    ("  Protocol checks (collect_events)", "application.py", "(collect_events)"),
    ("  insert statements (+ dependency check)", "recorders/sqlite.py", "(_insert_events)"),
    ("chat loads (Repository.get)", "application.py", "(get)"),
    ("catalog/deployment reads (load_model_facts)", "catalog.py", "(load_model_facts)"),
    ("decide: commit_step", "decide.py", "(commit_step)"),
    ("decide: create_chat", "decide.py", "(create_chat)"),
    ("events applied to the aggregate (record)", "base.py", "(record)"),
    ("result (chat_result)", "chat.py", "(chat_result)"),
    ("snapshots taken after saves", "snapshots.py", "(take_snapshots)"),
    ("Recent.put", "uow.py", "(put)"),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default=None)
    parser.add_argument("--commands", type=int, default=4000)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    url = args.db or f"sqlite:///{tempfile.mkdtemp()}/profile.db"
    cmds = _workload_commands(args.commands)
    app = open_app(url)
    setup_catalogs(app)
    profile = cProfile.Profile()
    t = time.perf_counter()
    profile.enable()
    for c in cmds:
        execute(app, c)
    profile.disable()
    wall = time.perf_counter() - t
    app.close()
    stats = pstats.Stats(profile)
    total = next(v[3] for k, v in stats.stats.items() if k[0].endswith("handler.py") and k[2] == "execute")  # type: ignore[attr-defined]
    print(f"{len(cmds)} commands in {wall:.2f} s under the profiler ({url})")
    print(f"{'part':<46} {'calls':>7} {'cum s':>7} {'share':>6}")
    for label, file_part, name in PARTS:
        for (file, _, func), (_, ncalls, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
            where = f"{os.path.basename(os.path.dirname(file))}/{os.path.basename(file)}({func})" if file != "~" else func
            if (file_part in where if file_part else True) and where.endswith(name):
                print(f"{label:<46} {ncalls:>7} {cum:>7.3f} {cum / total:>6.0%}")
                break
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
