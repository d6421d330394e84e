"""Issue 30, point 5: the usage a worker sends with a step is shown — in ``show --json`` (each message, the chat,
each turn), ``audit --json`` (each step, the chat, each turn), the audit page, and the usage view that an
organization sums (``chat-ledger usage``). The view, under crashes and redelivery, equals its rebuild, and its
sums equal the usage of every message recorded (deleted ones included), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.api import execute
from commands.cli.main import main
from commands.handler import command_from_dict
from commands.queries import chat_ids
from ledger.chat.values import USAGE_FIELDS
from projections import catch_up, maintained_version
from projections.usage import UsageView
from tests.projections.projection_kit import read_build
from tests.projections.test_chat_views import ORG, OWNER, renamed, setup_org
from tests.projections.test_projection_exactly_once import drive

usages = st.fixed_dictionaries({}, optional={name: st.integers(0, 10**6) for name in USAGE_FIELDS})


def step(app: Any, chat: str, usage: dict[str, int] | None, text: str = "working") -> None:
    message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "text": text}]}
    if usage is not None:
        message["usage"] = usage
    execute(app, command_from_dict({"type": "commit_step", "chat_id": chat, "messages": [message]}))


def new_chat(app: Any, text: str = "go") -> str:
    if app.load(uuid.UUID(ORG)) is None:
        setup_org(app, ORG, (OWNER,))
    return execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                           "text": text}))["chat_id"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    plan=st.lists(st.tuples(st.integers(0, 2), st.one_of(st.none(), usages)), min_size=1, max_size=15),
    schedule=st.lists(st.tuples(st.sampled_from(["batch", "crash", "redeliver"]), st.integers(1, 12)),
                      min_size=1, max_size=8),
)
def test_incremental_usage_view_equals_rebuild_and_sums_every_message(app: Any, backend: Any, plan: list[Any],
                                                                      schedule: list[Any]) -> None:
    chats = [new_chat(app, f"chat {i}") for i in range(3)]
    for i, usage in plan:
        step(app, chats[i], usage)
    suffix = uuid.uuid4().hex[:6]
    p = renamed(UsageView, app, f"i{suffix}")
    version = maintained_version(p, backend)
    drive(app, backend, p, version, schedule)
    catch_up(app, p, backend, batch_size=4)
    full = renamed(UsageView, app, f"f{suffix}")
    catch_up(app, full, backend, batch_size=1000)
    rows = read_build(backend, p, version)["chat_usage"]
    assert rows == read_build(backend, full)["chat_usage"]
    by_chat = {r["chat_id"]: r for r in rows}
    assert set(by_chat) == {str(c) for c in chat_ids(app)}  # a row per chat, used or not
    for chat in chats:  # the sums are the recorded messages' usage, field by field
        recorded = [m.usage for e in app.stream(uuid.UUID(chat)) for m in (getattr(e, "messages", None) or ())
                    if m.usage is not None]
        assert by_chat[chat]["messages"] == len(recorded)
        for name in USAGE_FIELDS:
            assert by_chat[chat][name] == sum(getattr(u, name) for u in recorded), name


def test_usage_is_shown_everywhere_and_an_organization_sums_it(db_url: str, tmp_path: Any) -> None:
    from ledger.store import open_app

    app = open_app(db_url)
    try:
        chat = new_chat(app)
        step(app, chat, {"input_tokens": 1200, "output_tokens": 300, "cache_read_tokens": 1000,
                         "reasoning_tokens": 120, "total_tokens": 1500, "total_cost_micros": 4500,
                         "runtime_ms": 2300})
        step(app, chat, None, "no usage reported")
        step(app, chat, {"input_tokens": 800, "output_tokens": 100, "total_cost_micros": 1500, "runtime_ms": 700})
        other = new_chat(app, "another")
        step(app, other, {"input_tokens": 10, "output_tokens": 5, "total_cost_micros": 1})
    finally:
        app.close()

    def cli(*args: str) -> Any:
        out = CliRunner().invoke(main, ["--db", db_url, *args], catch_exceptions=False)
        assert out.exit_code == 0, out.output
        return out.stdout

    shown = json.loads(cli("show", chat, "--json"))
    assert [m["usage"]["runtime_ms"] for m in shown["messages"] if m["usage"]] == [2300, 700]
    total = shown["usage"]["total"]
    assert (total["input_tokens"], total["total_cost_micros"], total["runtime_ms"], total["messages"]) == \
        (2000, 6000, 3000, 2)
    assert [t["total_cost_micros"] for t in shown["usage"]["by_turn"]] == [6000]  # one turn
    timeline = [json.loads(line) for line in cli("audit", chat, "--json").splitlines()]
    steps = [e for e in timeline if e.get("type") == "StepCommitted"]
    assert [e.get("usage", {}).get("reasoning_tokens") for e in steps] == [120, None, 0]
    page = tmp_path / "chat.html"
    cli("audit", chat, "--html", str(page))
    html = page.read_text()
    assert 'id="usage"' in html and "2,000 in / 400 out tokens" in html and "cost 0.006000" in html
    assert "usage: 1,200 in / 300 out tokens" in html  # the first step's own line in the timeline
    summed = json.loads(cli("usage", "--org", ORG, "--json"))
    assert summed["chats"] == 2 and summed["total"]["total_cost_micros"] == 6001
    assert [r["chat_id"] for r in summed["by_chat"]] == [chat, other]  # most expensive first
    assert "total of 2 chats" in cli("usage", "--org", ORG)
