"""Limits as deployment settings (issue 24, point 4): each limit of ``set_deployment_settings.limits`` refuses
what exceeds it (recording nothing), 0 means the default, every decision that applies one records the value it
used, and the time-aligned answers (``next-action --at``, ``events verify --decisions``) use the limit in force
then. On SQLite and PostgreSQL (``app``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from commands.next_action import next_action_report
from commands.redecide import check_decisions
from ledger.catalog.values import DEFAULT_LIMITS
from ledger.chat import events as ev
from ledger.errors import LedgerError
from tests.chat.helpers import ORG, OWNER, chat_state, record_raw, run


def _limits(app: Any, **limits: int) -> None:
    run(app, type="set_deployment_settings", limits=limits)


def _chat(app: Any, **kw: Any) -> str:
    return run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, **{"text": "hi", **kw})["chat_id"]


def _refused(app: Any, code: str, **command: Any) -> LedgerError:
    before = app.head()
    with pytest.raises(LedgerError) as e:
        run(app, **command)
    assert e.value.code == code, e.value
    assert app.head() == before, "a refused command recorded something"
    return e.value


def _files(*ids: str) -> list[dict[str, Any]]:
    return [{"type": "file", "file_id": i} for i in ids]


def test_the_queue_cap(app):
    chat_id = _chat(app)
    _limits(app, max_queued_messages_per_chat=1)
    run(app, type="send_message", chat_id=chat_id, text="one")
    e = _refused(app, "queue_full", type="send_message", chat_id=chat_id, text="two")
    assert e.message == "chat message queue is full (max 1)"
    (queued,) = [x for x in app.stream(uuid.UUID(chat_id)) if isinstance(x, ev.PromptQueued)]
    assert queued.limits["max_queued_messages_per_chat"] == 1
    _limits(app)  # 0/absent: chatd's 20
    run(app, type="send_message", chat_id=chat_id, text="two")


def test_prompt_bytes_on_create_send_edit_and_queued_edit(app):
    _limits(app, max_prompt_bytes=5)
    _refused(app, "prompt_too_large", type="create_chat", organization_id=ORG, owner_id=OWNER, text="héllo")
    chat_id = _chat(app)
    e = _refused(app, "prompt_too_large", type="send_message", chat_id=chat_id, text="123456")
    assert "6 bytes" in e.message and "at most 5" in e.message
    _refused(app, "prompt_too_large", type="edit_message", chat_id=chat_id, message_id=1, text="123456")
    run(app, type="send_message", chat_id=chat_id, text="ok")
    _refused(app, "prompt_too_large", type="edit_queued_message", chat_id=chat_id, queued_message_id=1,
             text="123456")
    turn = [x for x in app.stream(uuid.UUID(chat_id)) if isinstance(x, ev.ChatCreated)][0]
    assert turn.limits["max_prompt_bytes"] == 5


def test_dynamic_tools_per_chat(app):
    _limits(app, max_dynamic_tools_per_chat=2)
    e = _refused(app, "invalid_command", type="create_chat", organization_id=ORG, owner_id=OWNER, text="x",
                 dynamic_tools=["a", "b", "c"])
    assert "at most 2" in e.message
    chat_id = _chat(app, dynamic_tools=["a", "b"])
    (created,) = [x for x in app.stream(uuid.UUID(chat_id)) if isinstance(x, ev.ChatCreated)]
    assert created.limits["max_dynamic_tools_per_chat"] == 2


def test_attachments_per_chat_count_each_file_once(app):
    _limits(app, max_attachments_per_chat=2)
    chat_id = _chat(app)
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": _files("f1", "f2")}])
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": _files("f2")}])
    e = _refused(app, "chat_attachment_cap_exceeded", type="commit_step", chat_id=chat_id,
                 messages=[{"role": "assistant", "parts": _files("f3")}])
    assert e.message.startswith("chat attachment cap exceeded")
    assert chat_state(app, chat_id).attachments == ["f1", "f2"]


def test_tool_output_bytes(app):
    _limits(app, max_tool_output_bytes=10)
    chat_id = _chat(app)
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "c1", "tool_name": "execute", "args": {}}]}])
    big = {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": "c1", "tool_name": "execute",
                                      "result": "x" * 20}]}
    e = _refused(app, "tool_output_too_large", type="commit_step", chat_id=chat_id, messages=[big])
    assert "tool call c1 is 22 bytes" in e.message
    small = {**big, "parts": [{**big["parts"][0], "result": "ok"}]}
    run(app, type="commit_step", chat_id=chat_id, messages=[small])


def test_steps_and_retries_with_the_limit_in_force_then(app):
    """next-action decides with the limits of the deployment at the chat's version; the attempt records them."""
    chat_id = _chat(app)
    run(app, type="acquire", chat_id=chat_id, worker_id=str(uuid.uuid4()), runner_id=str(uuid.uuid4()))
    _limits(app, max_steps_per_turn=1, max_generation_retries=2)
    run(app, type="record_generation_attempt", chat_id=chat_id)
    run(app, type="record_generation_attempt", chat_id=chat_id)
    step = run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "r1", "tool_name": "read_file", "args": {}}]}])
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "tool", "parts": [
        {"type": "tool-result", "tool_call_id": "r1", "tool_name": "read_file", "result": "text"}]}])
    then = next_action_report(app, uuid.UUID(chat_id))
    assert (then["action"], then["finish_reason"], then["max_steps"]) == ("finish_turn", "max_steps", 1)
    at_version = chat_state(app, chat_id).version
    _limits(app)  # back to the defaults
    now = next_action_report(app, uuid.UUID(chat_id))
    assert (now["action"], now["max_steps"]) == ("generate_assistant", 1200)
    past = next_action_report(app, uuid.UUID(chat_id), version=at_version)
    assert (past["action"], past["max_steps"]) == ("finish_turn", 1)
    attempts = [x for x in app.stream(uuid.UUID(chat_id)) if isinstance(x, ev.GenerationAttemptRecorded)]
    assert [(a.settings.max_steps_per_turn, a.settings.max_generation_retries) for a in attempts] == [(1, 2), (1, 2)]
    assert step["version"] > attempts[-1].originator_version
    # a retry at attempt 2 with at most 2 attempts: no retry (the limit then); with the defaults, a retry
    assert next_action_report(app, uuid.UUID(chat_id), version=attempts[-1].originator_version)["retry"]["retry"] is False


def test_events_verify_decisions_checks_recorded_limits_against_the_deployment_then(app):
    chat_id = _chat(app)
    _limits(app, max_queued_messages_per_chat=3)
    run(app, type="send_message", chat_id=chat_id, text="queued")
    _limits(app, max_queued_messages_per_chat=7)  # a later change does not make the past decision wrong
    tally = check_decisions(app)
    assert tally.checked["limits"] >= 2 and not tally.anomalies
    # a decision recorded with a limit the deployment never had is named
    record_raw(app, chat_id, ev.QueuedPromptDeleted, queued_message_id=1)
    prompt = chat_state(app, chat_id)
    record_raw(app, chat_id, ev.PromptQueued, limits={"max_queued_messages_per_chat": 99}, prompt=msgspec_prompt(prompt))
    tally = check_decisions(app)
    (bad,) = [a for a in tally.anomalies if a["decision"] == "limits"]
    assert bad["differences"] == [{"field": "max_queued_messages_per_chat", "recorded": 99, "redecided": 7}]


def msgspec_prompt(state: Any) -> Any:
    from datetime import datetime, timezone

    from ledger.chat.values import QueuedPrompt, TextPart

    qid = state.next_queued_message_id
    return QueuedPrompt(queued_message_id=qid, position=qid, parts=[TextPart(text="x")], created_by=state.owner_id,
                        turn_id=uuid.uuid4(), created_at=datetime.now(timezone.utc))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cap=st.integers(0, 4), text=st.text(max_size=12), sends=st.integers(1, 6))
def test_a_limit_refuses_exactly_what_exceeds_it_and_records_its_value(memory_app, cap, text, sends):
    """For any prompt-bytes and queue limit: a send is refused iff its text is longer than the limit in force
    (0: the default) or the queue is at the cap; whatever is accepted records the values it applied."""
    app = memory_app
    _limits(app)
    chat_id = _chat(app)  # (running: every send queues)
    _limits(app, max_prompt_bytes=cap, max_queued_messages_per_chat=cap)
    bytes_cap = cap or DEFAULT_LIMITS["max_prompt_bytes"]
    queue_cap = cap or DEFAULT_LIMITS["max_queued_messages_per_chat"]
    for _ in range(sends):
        queued = len(chat_state(app, chat_id).queue)
        try:
            run(app, type="send_message", chat_id=chat_id, text=text or "x")
        except LedgerError as e:
            size = len((text or "x").encode())
            assert (e.code == "prompt_too_large" and size > bytes_cap) or (e.code == "queue_full" and queued >= queue_cap)
            continue
        assert len((text or "x").encode()) <= bytes_cap and queued < queue_cap
        last = app.stream(uuid.UUID(chat_id))[-1]
        assert last.limits["max_prompt_bytes"] == bytes_cap and last.limits["max_queued_messages_per_chat"] == queue_cap
