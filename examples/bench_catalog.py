"""Benchmark: what reading the model catalog costs the commands that resolve a model.

Runs >= 10,000 chat commands through the real handler against a realistic organization (members, several
model configs, a catalog stream of a few hundred events) while an administrator keeps changing the
catalog, and measures the time spent loading catalog-type aggregates (catalog, deployment, claims:
``ChatLedgerApp.load_cached``) against the total command time. Also shows what the same loads would cost
by replaying the catalog stream every time (no cache), and checks that the cached catalog is exactly the
replayed one at the end.

    .venv/bin/python examples/bench_catalog.py                        # SQLite in a temporary folder
    .venv/bin/python examples/bench_catalog.py --db postgresql://postgres@127.0.0.1:5432/postgres?schema=bench
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from commands.handler import command_from_dict, execute  # noqa: E402
from ledger.errors import LedgerError  # noqa: E402
from ledger.store import ChatLedgerApp, open_app  # noqa: E402

WORKER = {"worker_id": str(uuid.UUID(int=1)), "runner_id": str(uuid.UUID(int=2))}


class Timing:
    def __init__(self) -> None:
        self.catalog_s = 0.0
        self.catalog_loads = 0
        self.command_s = 0.0
        self.commands = 0
        self.commands_reading_catalog = 0


def instrument(app: ChatLedgerApp, t: Timing) -> None:
    original = app.load_cached

    def timed(aggregate_id: Any, copy: bool = True) -> Any:
        start = time.perf_counter()
        try:
            return original(aggregate_id, copy)
        finally:
            t.catalog_s += time.perf_counter() - start
            t.catalog_loads += 1

    app.load_cached = timed  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default=None, help="database URL (default: SQLite in a temporary folder)")
    parser.add_argument("--commands", type=int, default=10_000, help="chat commands to run (default 10000)")
    parser.add_argument("--chats", type=int, default=500, help="chats the commands cycle over (default 500)")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = args.db or f"sqlite:///{Path(tmp.name) / 'bench.db'}"
    app = open_app(url)
    t = Timing()
    org = str(uuid.uuid4())
    users = [str(uuid.uuid4()) for _ in range(50)]
    models = [str(uuid.uuid4()) for _ in range(10)]

    def do(**command: Any) -> Any:
        return execute(app, command_from_dict(command))

    # -- a realistic organization: 50 members, 10 configs on 3 providers, some history ----------------------
    for u in users:
        do(type="add_organization_member", organization_id=org, user_id=u)
    for i, m in enumerate(models):
        do(type="create_model_config", organization_id=org, model_config_id=m, provider=f"p{i % 3}",
           model=f"model-{i}", context_limit=100_000 + i * 1000)
    for round_ in range(40):
        m = models[1 + round_ % 9]
        do(type="update_model_config", organization_id=org, model_config_id=m, enabled=False)
        do(type="update_model_config", organization_id=org, model_config_id=m, enabled=True)
        do(type="update_model_config", organization_id=org, model_config_id=m, compression_threshold=60 + round_ % 30)
    do(type="set_deployment_settings", personal_model_overrides_enabled=True)
    for u in users[:10]:
        do(type="set_user_model_override", organization_id=org, user_id=u, context="root", mode="model",
           model_config_id=models[2])
    catalog_events = app.load(uuid.UUID(org)).version
    chats = [do(type="create_chat", organization_id=org, owner_id=users[i % len(users)], text="hello",
                initial_status="waiting")["chat_id"] for i in range(args.chats)]

    # -- the measured run --------------------------------------------------------------------------------
    instrument(app, t)
    cycle = [
        lambda c, i: {"type": "send_message", "chat_id": c, "text": f"question {i}",
                      "model_config_id": models[i % 3] if i % 2 else None},
        lambda c, i: {"type": "acquire", "chat_id": c, **WORKER},
        lambda c, i: {"type": "record_generation_attempt", "chat_id": c},
        lambda c, i: {"type": "send_message", "chat_id": c, "text": "follow-up", "model_config_id": models[4]},
        lambda c, i: {"type": "commit_step", "chat_id": c,
                      "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "answer"}]}]},
        lambda c, i: {"type": "finish_turn", "chat_id": c},  # R1: promotion re-resolves the queued model
        lambda c, i: {"type": "commit_step", "chat_id": c,
                      "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "more"}]}]},
        lambda c, i: {"type": "finish_turn", "chat_id": c},  # R0 -> W
    ]
    admin_changes = 0
    i = 0
    started = time.perf_counter()
    while t.commands < args.commands:
        chat = chats[i % len(chats)]
        for step in cycle:
            command = {k: v for k, v in step(chat, i).items() if v is not None}
            loads_before = t.catalog_loads
            s0 = time.perf_counter()
            try:
                execute(app, command_from_dict(command))
            except LedgerError as e:
                raise SystemExit(f"unexpected refusal of {command['type']}: {e.code}: {e.message}")
            t.command_s += time.perf_counter() - s0
            t.commands += 1
            t.commands_reading_catalog += t.catalog_loads > loads_before
        i += 1
        if i % 100 == 0:  # an administrator keeps changing the catalog: the cache must follow
            m = models[5 + (i // 100) % 5]
            do(type="update_model_config", organization_id=org, model_config_id=m,
               compression_threshold=50 + (i // 100) % 40)
            admin_changes += 1
    wall = time.perf_counter() - started

    # -- what the same loads cost without the cache (replaying the catalog stream) ------------------------
    org_id = uuid.UUID(org)
    n = 200
    s0 = time.perf_counter()
    for _ in range(n):
        app.load(org_id)
    replay_each = (time.perf_counter() - s0) / n
    cached = app.load_cached(org_id, copy=False)
    replayed = app.load(org_id)
    assert cached.version == replayed.version and cached.state == replayed.state, "cached catalog is stale"

    share = t.catalog_s / t.command_s
    print(f"database                      {url.split('?')[0] if args.db else 'sqlite (temporary file)'}")
    print(f"catalog stream                {replayed.version} events ({catalog_events} before the run), "
          f"{len(users)} members, {len(models)} configs; {admin_changes} admin changes during the run")
    print(f"commands                      {t.commands} in {wall:.2f} s ({t.commands / wall:.0f}/s)")
    print(f"commands that read catalog    {t.commands_reading_catalog} ({t.commands_reading_catalog / t.commands:.0%})")
    print(f"catalog-type loads            {t.catalog_loads}, {t.catalog_s * 1e6 / max(t.catalog_loads, 1):.0f} µs each (cached, fast-forwarded)")
    print(f"time in command handling      {t.command_s:.3f} s")
    print(f"time loading catalog          {t.catalog_s:.3f} s = {share:.1%} of command time")
    print(f"uncached: replaying the catalog once costs {replay_each * 1e6:.0f} µs; for these loads that would be "
          f"{replay_each * t.catalog_loads:.2f} s ({replay_each * t.catalog_loads / t.command_s:.0%} of the command time)")
    print("cached catalog == replayed catalog: yes")
    app.close()
    tmp.cleanup()
    if share >= 0.10:
        raise SystemExit(f"catalog loading took {share:.1%} of command time (budget 10%)")


if __name__ == "__main__":
    main()
