"""The rest of a chat's state (issue 24, point 5): plan mode, pinning, workspace binding, sharing, labels and
title source — each an event, in the chat_status view and on the audit page, with chatd's refusals. On SQLite
and PostgreSQL (``app``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ledger.chat import events as ev
from ledger.chat.views import status_values
from ledger.errors import LedgerError
from ledger.policy.generation import GenerationSettings, next_action
from ledger.policy.tools import AdvisorSettings
from tests.chat.helpers import ORG, OWNER, chat_in, chat_state, run


def _chat(app: Any, **kw: Any) -> str:
    return run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="plan a migration", **kw)["chat_id"]


def _events(app: Any, chat_id: str, kind: type) -> list[Any]:
    return [e for e in app.stream(uuid.UUID(chat_id)) if isinstance(e, kind)]


def test_plan_mode_is_an_event_in_the_view_and_a_no_op_records_nothing(app):
    chat_id = _chat(app)
    run(app, type="set_plan_mode", chat_id=chat_id, plan_mode="plan")
    run(app, type="set_plan_mode", chat_id=chat_id, plan_mode="plan")
    assert [e.plan_mode for e in _events(app, chat_id, ev.PlanModeSet)] == ["plan"]
    assert status_values(chat_state(app, chat_id))["plan_mode"] == "plan"
    run(app, type="set_plan_mode", chat_id=chat_id, plan_mode=None)
    assert chat_state(app, chat_id).plan_mode is None
    with pytest.raises(LedgerError) as e:
        run(app, type="set_plan_mode", chat_id=chat_id, plan_mode="build")
    assert e.value.code == "invalid_command"


def test_a_plan_turn_offers_no_advisor_and_propose_plan_ends_it(app):
    chat_id = _chat(app)
    advisor = GenerationSettings(advisor=AdvisorSettings(enabled=True, model_usable=True))
    assert next_action(chat_state(app, chat_id), advisor).advisor.eligible
    run(app, type="set_plan_mode", chat_id=chat_id, plan_mode="plan")
    status = next_action(chat_state(app, chat_id), advisor).advisor
    assert (status.eligible, status.reason, status.tool_offered) == (False, "plan_mode", False)
    call = {"type": "tool-call", "tool_call_id": "p1", "tool_name": "propose_plan", "args": {"path": "/plan.md"}}
    result = {"type": "tool-result", "tool_call_id": "p1", "tool_name": "propose_plan", "result": {"ok": True}}
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [call]},
                                                            {"role": "tool", "parts": [result]}])
    decision = next_action(chat_state(app, chat_id), GenerationSettings())
    assert (decision.action, decision.finish_reason) == ("finish_turn", "stop_after_tool")
    run(app, type="set_plan_mode", chat_id=chat_id, plan_mode=None)  # out of plan mode the model goes on
    assert next_action(chat_state(app, chat_id), GenerationSettings()).action == "generate_assistant"


def test_pins_in_chatds_words_and_archiving_resets_the_pin(app):
    chat_id = _chat(app)
    run(app, type="pin_chat", chat_id=chat_id)
    run(app, type="pin_chat", chat_id=chat_id)  # (already pinned: nothing recorded)
    assert len(_events(app, chat_id, ev.PinSet)) == 1
    assert status_values(chat_state(app, chat_id))["pinned_at"] is not None
    child = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="sub", parent_chat_id=chat_id)
    with pytest.raises(LedgerError, match="Cannot pin a child chat.") as e:
        run(app, type="pin_chat", chat_id=child["chat_id"])
    assert e.value.code == "not_root_chat"
    run(app, type="end_chat", chat_id=child["chat_id"])
    run(app, type="finish_turn", chat_id=chat_id)
    run(app, type="set_archived", chat_id=chat_id, archived=True)
    assert chat_state(app, chat_id).pinned_at is None
    with pytest.raises(LedgerError, match="Cannot pin an archived chat.") as e:
        run(app, type="pin_chat", chat_id=chat_id)
    assert e.value.code == "chat_archived"
    run(app, type="unpin_chat", chat_id=chat_id)  # (not pinned: nothing recorded)
    assert len(_events(app, chat_id, ev.PinSet)) == 1


def test_new_pins_go_last(app):
    first, second = _chat(app), _chat(app)
    run(app, type="pin_chat", chat_id=second)
    run(app, type="pin_chat", chat_id=first)
    pins = sorted((chat_state(app, c).pinned_at, c) for c in (first, second))
    assert [c for _, c in pins] == [second, first]


def test_workspace_binding(app):
    chat_id = _chat(app)
    ws, build, agent = (str(uuid.uuid4()) for _ in range(3))
    run(app, type="set_workspace_binding", chat_id=chat_id, workspace_id=ws, build_id=build, agent_id=agent)
    row = status_values(chat_state(app, chat_id))
    assert (row["workspace_id"], row["build_id"], row["agent_id"]) == (ws, build, agent)
    with pytest.raises(LedgerError, match="need a workspace_id"):
        run(app, type="set_workspace_binding", chat_id=chat_id, workspace_id=None, agent_id=agent)
    run(app, type="set_workspace_binding", chat_id=chat_id, workspace_id=None)
    assert status_values(chat_state(app, chat_id))["workspace_id"] is None
    assert len(_events(app, chat_id, ev.WorkspaceBound)) == 2


def test_sharing_is_for_root_chats(app):
    chat_id = _chat(app)
    child = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="sub", parent_chat_id=chat_id)
    with pytest.raises(LedgerError) as e:
        run(app, type="share_chat", chat_id=child["chat_id"])
    assert e.value.code == "not_root_chat"
    run(app, type="share_chat", chat_id=chat_id)
    assert status_values(chat_state(app, chat_id))["shared"] is True
    run(app, type="unshare_chat", chat_id=chat_id)
    assert [e.shared for e in _events(app, chat_id, ev.SharingSet)] == [True, False]


def test_labels_and_title_source(app):
    derived, titled = _chat(app), _chat(app, title="Q3 migration")
    assert chat_state(app, derived).title_source == "fallback"
    assert chat_state(app, titled).title_source == "user"
    run(app, type="set_title", chat_id=derived, title="Migration plan", source="generated")
    assert status_values(chat_state(app, derived))["title_source"] == "generated"
    run(app, type="set_labels", chat_id=derived, labels={"team": "infra", "env": "prod"})
    assert status_values(chat_state(app, derived))["labels"] == {"env": "prod", "team": "infra"}
    for bad in ({"": "x"}, {"a b": "x"}, {"k": "v" * 257}, {f"k{i}": "v" for i in range(65)}):
        with pytest.raises(LedgerError) as e:
            run(app, type="set_labels", chat_id=derived, labels=bad)
        assert e.value.code == "invalid_command"
    assert len(_events(app, derived, ev.LabelsSet)) == 1


def test_the_audit_page_shows_the_metadata(app):
    from commands.audit_page import page_data
    from commands.queries import audit_timeline, chat_events

    chat_id = _chat(app)
    run(app, type="set_plan_mode", chat_id=chat_id, plan_mode="plan")
    run(app, type="pin_chat", chat_id=chat_id)
    run(app, type="share_chat", chat_id=chat_id)
    run(app, type="set_labels", chat_id=chat_id, labels={"env": "prod"})
    events = chat_events(app, uuid.UUID(chat_id))
    page = page_data(app, uuid.UUID(chat_id), events, None, audit_timeline(app, uuid.UUID(chat_id), events, None))
    md = page["metadata"]
    assert (md["plan_mode"], md["pinned"], md["shared"], md["labels"]) == ("plan", True, True, {"env": "prod"})
    summaries = [e["summary"] for e in page["events"]]
    assert {"plan mode on", "pinned", "shared read-only with the organization", "labels: env=prod"} <= set(summaries)


# -- the rules, by property ------------------------------------------------------------------------------------

metadata_commands = st.sampled_from([
    ("set_plan_mode", {"plan_mode": "plan"}), ("set_plan_mode", {"plan_mode": None}),
    ("pin_chat", {}), ("unpin_chat", {}), ("share_chat", {}), ("unshare_chat", {}),
    ("set_labels", {"labels": {"a": "1"}}), ("set_labels", {"labels": {}}),
    ("set_workspace_binding", {"workspace_id": "00000000-0000-4000-8000-0000000000aa"}),
])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=st.sampled_from(["W", "R0", "R1", "E1", "A0", "P", "XW"]), commands=st.lists(metadata_commands, max_size=6))
def test_metadata_never_changes_the_execution_state_or_the_history(memory_app, state, commands):
    """Whatever metadata a chat is given, in any state, its execution state, queue and history stay as they
    were; a pin of an archived chat is the only refusal among these, and a refusal records nothing. (Each
    example makes its own chat on the shared in-memory ledger.)"""
    app = memory_app
    chat_id = chat_in(app, state)
    before = chat_state(app, chat_id)
    frozen = (before.execution_state, len(before.queue), before.history_version, len(before.messages))
    for kind, fields in commands:
        version = chat_state(app, chat_id).version
        try:
            run(app, type=kind, chat_id=chat_id, **fields)
        except LedgerError as e:
            assert (kind, e.code) == ("pin_chat", "chat_archived")
            assert chat_state(app, chat_id).version == version
    after = chat_state(app, chat_id)
    assert (after.execution_state, len(after.queue), after.history_version, len(after.messages)) == frozen
    assert after.pinned_at is None or not after.archived
