"""The chat views under redelivery and crashes: random chat histories applied in random batch sizes,
with crashes mid-batch and re-delivered positions, equal (a) a full rebuild and (b) the rows computed
from the aggregates' replayed states — on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.handler import command_from_dict, execute
from commands.queries import chat_ids
from ledger.chat import events as ev
from ledger.chat.views import queue_row, status_values, unresolved_values
from ledger.errors import LedgerError
from projections import catch_up, maintained_version
from projections.chats import ChatViews
from tests.chat.helpers import record_raw, setup_org
from tests.projections.projection_kit import read_build
from tests.projections.test_projection_exactly_once import drive

ORG = "8a6f4d2e-1b3c-4d5e-8f70-000000000001"
OWNER = "5b1d7e9a-2c4f-4a6b-9d8e-00000000a11c"
VIEWS = (ChatViews,)

ACTIONS = st.sampled_from([
    {"type": "send_message", "text": "more"},
    {"type": "send_message", "text": "now", "busy_behavior": "interrupt"},
    {"type": "send_message", "text": "policy", "hook_allowed_tools": ["read", "ask"],
     "prefix_messages": [{"role": "user", "visibility": "model", "parts": [{"type": "text", "text": "hook"}]}]},
    {"type": "commit_step", "messages": [{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "c1", "tool_name": "read", "args": {"p": 1}},
        {"type": "tool-call", "tool_call_id": "c2", "tool_name": "ask", "args": {}}]}]},
    {"type": "commit_step", "messages": [{"role": "tool", "parts": [
        {"type": "tool-result", "tool_call_id": "c1", "tool_name": "read", "result": "ok"}]}]},
    {"type": "enter_requires_action"},
    {"type": "complete_requires_action", "results": [{"tool_call_id": "c2", "output": "1"}]},
    {"type": "finish_turn"},
    {"type": "interrupt"},
    {"type": "promote_queued_message", "queued_message_id": 2},
    {"type": "delete_queued_message", "queued_message_id": 1},
    {"type": "edit_message", "message_id": 1, "text": "edited"},
    {"type": "acquire", "worker_id": OWNER, "runner_id": OWNER},
    {"type": "finish_error", "error": {"message": "boom"}},
    {"type": "end_chat"},
    # queue editing: begin/end an edit (the head's pauses a turn that ends there), new content, a cap
    {"type": "edit_queued_message", "queued_message_id": 1, "editing": True},
    {"type": "edit_queued_message", "queued_message_id": 2, "editing": True},
    {"type": "edit_queued_message", "queued_message_id": 1, "editing": False, "text": "revised",
     "reasoning_effort": "high"},
    {"type": "edit_queued_message", "queued_message_id": 2, "text": "second, revised"},
    {"type": "send_message", "text": "capped", "max_queue_size": 2},
    {"type": "edit_message", "message_id": 1, "text": "narrowed", "hook_allowed_tools": ["read"]},
    {"type": "complete_requires_action", "results": [{"tool_call_id": "c2", "output": "1"}],
     "suffix_messages": [{"role": "user", "visibility": "model", "parts": [{"type": "text", "text": "post"}]}]},
    {"type": "reconcile_invalid_state"},  # after an imported event leaves the chat Invalid (``record``)
])


def record(app: Any, n_chats: int, steps: list[tuple[int, dict[str, Any]]]) -> None:
    if app.load(uuid.UUID(ORG)) is None:
        setup_org(app, ORG, (OWNER,))
    ids = []
    for i in range(n_chats):
        r = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                            "text": f"chat {i}", "dynamic_tools": ["ask"]}))
        ids.append(r["chat_id"])
    for i, action in steps:
        if action["type"] == "reconcile_invalid_state":
            make_invalid(app, ids[i % n_chats])
        try:
            execute(app, command_from_dict({"chat_id": ids[i % n_chats], **action}))
        except LedgerError:
            pass


def make_invalid(app: Any, chat_id: str) -> None:
    """What an imported log may hold: a chat waiting with queued prompts, or paused without any."""
    if app.load(uuid.UUID(chat_id)).state.queue:
        record_raw(app, chat_id, ev.ChatResumed, cause="edit_ended", status="waiting")
    else:
        record_raw(app, chat_id, ev.ChatPaused, queued_message_id=1)


def renamed(cls: type, app: Any, suffix: str) -> Any:
    return type(f"{cls.__name__}_{suffix}", (cls,), {"name": f"{cls.name}_{suffix}"})(app)


def replayed_rows(app: Any) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """What the views must hold, computed from each chat's state replayed from the store."""
    out: dict[str, list[dict[str, Any]]] = {"chat_status": [], "unresolved_tool_calls": [], "chat_queue": []}
    for cid in chat_ids(app):
        s = app.load(cid).state
        out["chat_status"].append(status_values(s))
        out["unresolved_tool_calls"].extend(unresolved_values(s))
        out["chat_queue"].extend(queue_row(s.chat_id, q) for q in s.queue)
    for table in ChatViews.tables:
        out[table.name] = sorted((table.normalize_row(r) for r in out[table.name]), key=table.key_of)
    return {"chat_views": out}


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    n_chats=st.integers(1, 3),
    steps=st.lists(st.tuples(st.integers(0, 2), ACTIONS), min_size=1, max_size=30),
    schedule=st.lists(st.tuples(st.sampled_from(["batch", "crash", "redeliver"]), st.integers(1, 12)),
                      min_size=1, max_size=10),
)
def test_incremental_views_equal_rebuild_and_replayed_state(app: Any, backend: Any, n_chats: int,
                                                            steps: list[Any], schedule: list[Any]) -> None:
    record(app, n_chats, steps)
    suffix = uuid.uuid4().hex[:6]
    expected = replayed_rows(app)
    for cls in VIEWS:
        p = renamed(cls, app, f"i{suffix}")
        version = maintained_version(p, backend)
        drive(app, backend, p, version, schedule)
        catch_up(app, p, backend, batch_size=5)
        full = renamed(cls, app, f"f{suffix}")
        catch_up(app, full, backend, batch_size=1000)
        incremental = read_build(backend, p, version)
        assert incremental == read_build(backend, full)
        assert incremental == expected[cls.name]


def test_views_follow_new_commands_and_status_shape(app: Any, backend: Any) -> None:
    record(app, 2, [(0, {"type": "send_message", "text": "q"}), (1, {"type": "finish_turn"})])
    for cls in VIEWS:
        catch_up(app, cls(app), backend)
    record(app, 1, [(0, {"type": "commit_step", "messages": [{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "x", "tool_name": "read", "args": {}}]}]})])
    projections = [cls(app) for cls in VIEWS]
    for p in projections:
        catch_up(app, p, backend)
    assert len(backend.query("chat_views", "chat_status")) == 3
    calls = backend.query("chat_views", "unresolved_tool_calls")
    assert [(c["tool_call_id"], c["kind"]) for c in calls] == [("x", "local")]
    assert [q["text"] for q in backend.query("chat_views", "chat_queue")] == ["q"]
    (status,) = [r for r in backend.query("chat_views", "chat_status") if r["queue_length"]]
    assert status["queue_length"] == len(backend.query("chat_views", "chat_queue", where={"chat_id": status["chat_id"]}))
    assert all(p.fold.loads == 0 for p in projections)  # a fresh fold only ever started from creations


def test_an_interleaved_log_in_small_batches_equals_the_replayed_states(app: Any, backend: Any) -> None:
    """Chats recorded live interleave event by event: a batch touches many chats, each a few times."""
    from commands.tools.workload import generate

    generate(app, 1_500, seed=5, chat_events=20, interleave=40)
    first = [e.originator_id for _, e in app.iter_events(0) if type(e).__module__ == "ledger.chat.events"][:40]
    assert len(set(first)) == 40  # the first round: one event of each of the 40 active chats
    p = renamed(ChatViews, app, "il")
    catch_up(app, p, backend, batch_size=64)
    assert read_build(backend, p) == replayed_rows(app)[ChatViews.name]


def test_cli_rebuild_and_catch_up_take_a_batch_size(app: Any, backend: Any, db_url: str) -> None:
    import json

    from click.testing import CliRunner

    from commands.cli.main import main
    from commands.tools.workload import generate

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, ["--db", db_url, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    generate(app, 400, seed=9, chat_events=15, interleave=12)
    out = json.loads(cli("projections", "rebuild", "chat_views", "--batch-size", "7", "--json"))
    assert out["events"] == sum(type(e).__module__ == "ledger.chat.events" for _, e in app.iter_events(0))
    generate(app, 100, seed=10, chat_events=15, interleave=5)
    assert "chat_views:" in cli("projections", "catch-up", "chat_views", "--batch-size", "3")
    live = backend.live_version(ChatViews.name)
    assert backend.position(ChatViews.name, live) == app.head()
    assert read_build(backend, ChatViews(app), live) == replayed_rows(app)[ChatViews.name]
    refused = CliRunner().invoke(main, ["--db", db_url, "projections", "rebuild", "--batch-size", "0"])
    assert refused.exit_code == 2 and "--batch-size" in refused.output


def test_the_views_show_the_row_under_edit_and_the_paused_state(app: Any, backend: Any) -> None:
    """``queue`` rows carry ``editing_since`` (and an edit's ``reasoning_effort``); ``status`` shows
    ``paused``/P and the prompt under edit; every step is caught up in its own batch and compared with
    the replayed state."""
    record(app, 1, [])
    (chat_id,) = [str(c) for c in chat_ids(app)]
    p = renamed(ChatViews, app, f"e{uuid.uuid4().hex[:6]}")
    steps = [{"type": "acquire", "worker_id": OWNER, "runner_id": OWNER},
             {"type": "send_message", "text": "first"}, {"type": "send_message", "text": "second"},
             {"type": "edit_queued_message", "queued_message_id": 1, "editing": True},
             {"type": "finish_turn"},
             {"type": "edit_queued_message", "queued_message_id": 1, "text": "first, revised", "reasoning_effort": "low"},
             {"type": "edit_queued_message", "queued_message_id": 1, "editing": False}]
    seen = []
    for step in steps:
        execute(app, command_from_dict({"chat_id": chat_id, **step}))
        catch_up(app, p, backend, batch_size=1)
        assert read_build(backend, p) == replayed_rows(app)[ChatViews.name]
        (status,) = backend.query(p.name, "chat_status")
        queue = backend.query(p.name, "chat_queue", order_by=["position"])
        seen.append((status["status"], status["execution_state"], status["editing_queued_message_id"],
                     [(q["queued_message_id"], q["editing_since"] is not None, q["reasoning_effort"]) for q in queue]))
    assert seen[3] == ("running", "R1P", 1, [(1, True, None), (2, False, None)])
    assert seen[4] == ("paused", "P", 1, [(1, True, None), (2, False, None)])
    assert seen[5] == ("paused", "P", 1, [(1, True, "low"), (2, False, None)])
    assert seen[6] == ("running", "R1", None, [(2, False, None)])  # the edit ended: resumed, prompt 1 promoted
