"""``explain`` from recorded facts: a tool removed by a narrowed policy, a queued prompt promoted with a
fallback model, a turn; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.store import open_app
from tests.projections.test_chat_views import ACTIONS
from tests.projections.test_chat_views import record as record_steps
from tests.audit.kit import recorded_scenario, ALICE, INTERRUPTED, M1, M2, cli, scenario


_chat = recorded_scenario


def test_explain_a_tool_removed_by_a_narrowed_policy(db_url):
    chat_id, _ = _chat(db_url)
    data = json.loads(cli(db_url, "explain", chat_id, "--tool-call", "c2", "--json").output)
    assert data["tool_name"] == "read" and data["assistant_message_id"] == 6
    assert data["policy_in_force"] == ["execute"]
    assert data["offered_by_policy"] is False
    set_by = data["policy_set_by"]
    assert set_by["version"] == 6 and set_by["type"] == "QueuedPromptPromoted"
    assert set_by["before"] == ["read", "execute"] and set_by["incoming"] == ["execute"]
    assert set_by["removed"] == ["read"]
    assert data["closed"]["how"] == "canceled" and data["closed"]["reason"] == INTERRUPTED
    assert data["closed"]["version"] == 9
    assert data["execution"] is None
    text = cli(db_url, "explain", chat_id, "--tool-call", "c2").output
    assert "read was removed from the policy by that narrowing: the model was not offered this tool" in text
    assert f"reason '{INTERRUPTED}'" in text
    # the same call by its execution UUID
    assert json.loads(cli(db_url, "explain", chat_id, "--tool-call", data["execution_id"], "--json").output)[
        "tool_call_id"] == "c2"
    # a call made before the narrowing was allowed, and closed by its result
    c1 = json.loads(cli(db_url, "explain", chat_id, "--tool-call", "c1", "--json").output)
    assert c1["offered_by_policy"] is True and c1["closed"]["how"] == "result" and c1["closed"]["version"] == 4
    assert [n["version"] for n in c1["later_narrowings"]] == [6]


def test_explain_a_queued_prompt_promoted_with_a_fallback_model(db_url):
    chat_id, _ = _chat(db_url)
    data = json.loads(cli(db_url, "explain", chat_id, "--queued-message", "1", "--json").output)
    assert data["queued"]["version"] == 2 and data["created_by"] == ALICE
    assert data["text"] == "also the flaky test" and len(data["hook_prefix"]) == 1
    assert data["hook_allowed_tools"] == ["execute"] and data["model_config_id"] == M2
    assert data["chat_state_when_queued"] == "R0"
    o = data["outcome"]
    assert o["how"] == "promoted" and o["version"] == 6 and "running turn finished" in o["why"]
    assert o["tool_policy_before"] == ["read", "execute"] and o["tool_policy_after"] == ["execute"]
    assert o["model_resolution"] == {"model_config_id": M1, "source": "fallback_default", "reason": "disabled",
                                     "requested_model_config_id": M2}
    assert o["prefix_message_ids"] == [4]
    text = cli(db_url, "explain", chat_id, "--queued-message", "1").output
    assert f"because the requested model {M2} was disabled" in text


def test_explain_a_turn(db_url):
    chat_id, events = _chat(db_url)
    turn = next(e.turn_id for e in events if type(e).__name__ == "QueuedPromptPromoted")
    data = json.loads(cli(db_url, "explain", chat_id, "--turn", str(turn), "--json").output)
    assert data["started"]["version"] == 6 and data["model_config_id"] == M1
    assert data["model_resolution"]["source"] == "fallback_default"
    assert [c["tool_call_id"] for c in data["tool_calls"]] == ["c2", "c3"]
    assert data["cancellations"][0]["reason"] == INTERRUPTED
    assert data["ended"]["how"] == "interrupted" and data["ended"]["version"] == 10
    first = json.loads(cli(db_url, "explain", chat_id, "--turn", str(events[0].turn_id), "--json").output)
    assert first["ended"]["how"] == "finished" and first["ended"]["version"] == 5
    assert first["model_resolution"]["source"] == "org_default"


def test_explain_errors(db_url):
    chat_id, _ = _chat(db_url)
    assert "error: tool_call_not_found:" in cli(db_url, "explain", chat_id, "--tool-call", "nope", code=1).output
    assert "error: queued_message_not_found:" in cli(db_url, "explain", chat_id, "--queued-message", "7", code=1).output
    assert "error: turn_not_found:" in cli(db_url, "explain", chat_id, "--turn", str(uuid.uuid4()), code=1).output
    assert "error: chat_not_found:" in cli(db_url, "explain", str(uuid.uuid4()), "--turn", str(uuid.uuid4()), code=1).output
    assert cli(db_url, "explain", chat_id, code=2).exit_code == 2
    assert cli(db_url, "explain", chat_id, "--tool-call", "c1", "--queued-message", "1", code=2).exit_code == 2


def test_explain_a_tool_call_with_its_execution_record(db_url):
    """A claimed, run and answered call: the explanation cites its execution stream (claims, response)."""
    app = open_app(db_url)
    try:
        from tests.catalog.kit import run

        chat_id = scenario(app)
        run(app, type="send_message", chat_id=chat_id, text="run the tests")  # W after the interrupt -> R0
        step = run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
            {"type": "tool-call", "tool_call_id": "x1", "tool_name": "execute", "args": {"cmd": "make"}}]}])
        (assistant_id,) = step["message_ids"]
        ref = {"chat_id": chat_id, "assistant_message_id": assistant_id, "tool_call_id": "x1"}
        assert run(app, type="claim_tool_call", tool_name="execute", **ref)["outcome"] == "run"
        assert run(app, type="claim_tool_call", tool_name="execute", **ref)["outcome"] == "saved"
        run(app, type="record_tool_call_response", status=200, body='{"exit_code": 0}', **ref)
    finally:
        app.close()
    data = json.loads(cli(db_url, "explain", chat_id, "--tool-call", "x1", "--json").output)
    execution = data["execution"]
    assert execution is not None and execution["execution_id"] == data["execution_id"]
    assert execution["claims"] == 2
    assert len(execution["events"]) >= 3  # two claims and the response, in order
    text = cli(db_url, "explain", chat_id, "--tool-call", "x1").output
    assert "execution record:" in text and "no tool-call execution was recorded" not in text


# -- every turn at once ----------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.just(0), ACTIONS), max_size=25))
def test_every_turn_explained_in_one_pass_equals_each_explained_alone(memory_app, steps) -> None:
    """``explain_turns`` (the audit page's one fold of the chat) says of each turn what ``explain_turn`` says."""
    from commands.queries import chat_events, chat_ids
    from ledger.audit.explain import explain_turn, explain_turns

    record_steps(memory_app, 1, steps)
    for chat in chat_ids(memory_app):
        events = chat_events(memory_app, chat)
        together = explain_turns(events)
        alone = [explain_turn(events, t["turn_id"]) for t in together]
        assert together == alone and len(together) >= 1
