"""Fences (chatd ``loadChatForTask`` / ``generationAttemptFence``): a worker command whose ``fence`` does not
match the chat as it is now is refused with ``fence_mismatch`` in chatd's words and records nothing; without a
fence it behaves as before; ``next-action --json`` gives the fence a worker sends. Worker events record the
attempt and runner they belong to and the fence they committed under.

The stale worker is produced for real: two attempts are recorded through the handler (a retry took over),
then the first attempt's worker commits — on SQLite and PostgreSQL, and the stored rows are counted.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from commands.cli.main import main
from ledger.chat import decide as d
from ledger.chat.values import Fence
from ledger.chat.state import ChatState
from ledger.errors import LedgerError
from ledger.store import open_app
from tests.chat.helpers import RUNNER, WORKER, chat_in, chat_state, new_running_chat, run, setup_org
from tests.store.rawdb import RawDB

STEP = [{"role": "assistant", "parts": [{"type": "text", "text": "an answer from the first attempt"}]}]


def refused(app: Any, **command: Any) -> LedgerError:
    with pytest.raises(LedgerError) as e:
        run(app, **command)
    return e.value


def test_a_stale_workers_commit_of_an_old_attempt_is_refused_and_nothing_is_recorded(app, db_url):
    chat_id = new_running_chat(app)
    hv = chat_state(app, chat_id).history_version
    first = run(app, type="record_generation_attempt", chat_id=chat_id,
                fence={"runner_id": RUNNER, "history_version": hv, "generation_attempt": 0})
    assert first["generation_attempt"] == 1
    # the first worker stalls; a retry (another worker of the same runner) records the next attempt
    assert run(app, type="record_generation_attempt", chat_id=chat_id,
               fence={"runner_id": RUNNER, "history_version": hv})["generation_attempt"] == 2
    before = chat_state(app, chat_id).version
    rows = RawDB(db_url).rows(uuid.UUID(chat_id))

    e = refused(app, type="commit_step", chat_id=chat_id, messages=STEP,
                fence={"runner_id": RUNNER, "history_version": hv, "generation_attempt": 1})
    assert (e.code, e.message) == ("fence_mismatch", "generation fence mismatch: 2 != 1")
    assert chat_state(app, chat_id).version == before
    assert RawDB(db_url).rows(uuid.UUID(chat_id)) == rows  # not a byte more in the store

    # the same commit without a fence behaves as before the fences existed: accepted
    ok = run(app, type="commit_step", chat_id=chat_id, messages=STEP)
    assert ok["version"] == before + 1
    # and the current attempt's worker, fenced, commits: the event records attempt, runner and fence
    run(app, type="record_generation_attempt", chat_id=chat_id)
    state = chat_state(app, chat_id)
    fence = {"runner_id": RUNNER, "history_version": state.history_version, "generation_attempt": 1}
    run(app, type="commit_step", chat_id=chat_id, messages=STEP, fence=fence)
    step = app.stream(uuid.UUID(chat_id))[-1]
    assert (step.generation_attempt, str(step.runner_id)) == (1, RUNNER)
    assert step.fence == Fence(runner_id=uuid.UUID(RUNNER), history_version=state.history_version,
                               generation_attempt=1)


def test_the_apply_command_reports_the_refusal_in_chatds_words(app, db_url):
    chat_id = new_running_chat(app)
    for _ in range(3):
        run(app, type="record_generation_attempt", chat_id=chat_id)
    line = json.dumps({"type": "commit_step", "chat_id": chat_id, "messages": STEP, "fence": {"generation_attempt": 2}})
    out = CliRunner().invoke(main, ["--db", db_url, "apply", "-"], input=line + "\n")
    assert out.exit_code == 1
    assert json.loads(out.output)["error"] == {"code": "fence_mismatch", "message": "generation fence mismatch: 3 != 2"}


@pytest.mark.parametrize("field, value, message", [
    ("runner_id", "00000000-0000-4000-8000-00000000beef", "chat not owned by task"),
    ("history_version", 1, "chat history version mismatch: {hv} != 1"),
    ("generation_attempt", 5, "generation fence mismatch: 0 != 5"),
])
def test_each_fence_field_is_checked_in_chatds_words(memory_app, field, value, message):
    chat_id = new_running_chat(memory_app)
    hv = chat_state(memory_app, chat_id).history_version
    for command in ({"type": "commit_step", "messages": STEP}, {"type": "finish_turn"},
                    {"type": "finish_error", "error": {"message": "boom"}}, {"type": "enter_requires_action"},
                    {"type": "record_retry_state", "retry_state": {"attempt": 1}}, {"type": "record_generation_attempt"}):
        e = refused(memory_app, chat_id=chat_id, fence={field: value}, **command)
        assert (e.code, e.message) == ("fence_mismatch", message.format(hv=hv)), command["type"]
    assert chat_state(memory_app, chat_id).version == hv  # nothing recorded (the last event inserted history)


def test_the_owner_is_checked_first_and_an_unowned_chat_matches_no_runner(memory_app):
    chat_id = new_running_chat(memory_app, owned=False)
    e = refused(memory_app, type="finish_turn", chat_id=chat_id, fence={"runner_id": RUNNER, "generation_attempt": 9})
    assert e.message == "chat not owned by task"


@pytest.mark.parametrize("state, command, message", [
    ("W", {"type": "commit_step", "messages": STEP}, "chat status mismatch: waiting != running"),
    ("E0", {"type": "finish_turn"}, "chat status mismatch: error != running"),
    ("I0", {"type": "record_generation_attempt"}, "chat status mismatch: interrupting != running"),
    ("R0", {"type": "finish_interruption"}, "chat status mismatch: running != interrupting"),
    ("A0", {"type": "finish_error", "error": {"message": "late"}}, "chat status mismatch: requires_action != running"),
])
def test_a_fenced_command_requires_the_status_chatd_loads_the_task_with(memory_app, state, command, message):
    chat_id = chat_in(memory_app, state)
    version = chat_state(memory_app, chat_id).version
    e = refused(memory_app, chat_id=chat_id, fence={}, **command)  # an empty fence checks the status only
    assert (e.code, e.message) == ("fence_mismatch", message)
    assert chat_state(memory_app, chat_id).version == version


def test_finish_interruption_is_fenced_on_the_interrupting_chat(memory_app):
    chat_id = chat_in(memory_app, "I0")
    s = chat_state(memory_app, chat_id)
    fence = {"runner_id": RUNNER, "history_version": s.history_version, "generation_attempt": s.generation_attempt}
    partial = [{"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": "call_dyn", "tool_name": "ask_user",
                                           "result": "Tool execution interrupted by user", "is_error": True}]}]
    assert run(memory_app, type="finish_interruption", chat_id=chat_id, fence=fence,
               partial_messages=partial)["status"] == "waiting"
    done = [e for e in memory_app.stream(uuid.UUID(chat_id)) if type(e).__name__ == "InterruptionFinished"][-1]
    assert done.fence == Fence(**{**fence, "runner_id": uuid.UUID(RUNNER)}) and str(done.runner_id) == RUNNER


def test_a_malformed_fence_is_an_invalid_command(memory_app):
    chat_id = new_running_chat(memory_app)
    for fence in ({"attempt": 1}, {"generation_attempt": -1}, {"runner_id": "not-a-uuid"}, []):
        assert refused(memory_app, type="finish_turn", chat_id=chat_id, fence=fence).code == "invalid_command"


def test_next_action_reports_the_fence_a_worker_sends(sqlite_url):
    app = open_app(sqlite_url)
    try:
        setup_org(app)
        chat_id = new_running_chat(app)
        run(app, type="commit_step", chat_id=chat_id, messages=[
            {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": "call_dyn", "tool_name": "ask_user",
                                        "result": "ok"}]}])
        run(app, type="record_generation_attempt", chat_id=chat_id)
        s = chat_state(app, chat_id)
    finally:
        app.close()
    out = CliRunner().invoke(main, ["--db", sqlite_url, "next-action", chat_id, "--json"])
    fence = json.loads(out.output)["fence"]
    assert fence == {"runner_id": RUNNER, "history_version": s.history_version, "generation_attempt": 1}
    text = CliRunner().invoke(main, ["--db", sqlite_url, "next-action", chat_id])
    assert f"fence: runner_id {RUNNER}, history_version {s.history_version}, generation_attempt 1" in text.output
    app = open_app(sqlite_url)
    try:  # sent with the next command, it is accepted
        assert run(app, type="commit_step", chat_id=chat_id, messages=STEP, fence=fence)["version"] == s.version + 1
    finally:
        app.close()


def test_worker_events_record_their_attempt_and_runner_without_a_fence(memory_app):
    chat_id = new_running_chat(memory_app)
    run(memory_app, type="record_generation_attempt", chat_id=chat_id)
    run(memory_app, type="record_retry_state", chat_id=chat_id, retry_state={"attempt": 1, "delay_ms": 1000})
    run(memory_app, type="finish_error", chat_id=chat_id, error={"message": "overloaded"})
    retry, failed = memory_app.stream(uuid.UUID(chat_id))[-2:]
    for e in (retry, failed):
        assert (e.generation_attempt, str(e.runner_id), e.fence) == (1, RUNNER, None)


# -- the rule itself, for every combination -----------------------------------------------------------------

STATUSES = ("running", "interrupting", "waiting", "error", "requires_action")
RUNNERS = (None, uuid.UUID(RUNNER), uuid.UUID(WORKER))


@settings(max_examples=300, deadline=None)
@given(status=st.sampled_from(STATUSES), owner=st.sampled_from(RUNNERS), hv=st.integers(0, 3),
       attempt=st.integers(0, 3), archived=st.booleans(), transition=st.sampled_from(sorted(d.FENCED_STATUS)),
       f_runner=st.sampled_from(RUNNERS), f_hv=st.none() | st.integers(0, 3), f_attempt=st.none() | st.integers(0, 3))
def test_a_fence_passes_exactly_when_every_given_field_and_the_status_match(
        status, owner, hv, attempt, archived, transition, f_runner, f_hv, f_attempt):
    s = ChatState(chat_id=uuid.uuid4(), organization_id=uuid.uuid4(), owner_id=uuid.uuid4(), parent_chat_id=None,
                  root_chat_id=uuid.uuid4(), title="t", created_at=None, status=status, archived=archived,  # type: ignore[arg-type]
                  worker_id=owner, runner_id=owner, history_version=hv, generation_attempt=attempt)
    fence = Fence(runner_id=f_runner, history_version=f_hv, generation_attempt=f_attempt)
    mismatches = [
        f_runner is not None and f_runner != owner,
        status != d.FENCED_STATUS[transition],
        archived,
        f_hv is not None and f_hv != hv,
        f_attempt is not None and f_attempt != attempt,
    ]
    try:
        d.check_fence(s, fence, transition)
        passed, message = True, None
    except LedgerError as e:
        passed, message = False, e.message
        assert e.code == "fence_mismatch"
    assert passed == (not any(mismatches))
    if not passed:  # the first mismatch in chatd's order is the one reported
        first = mismatches.index(True)
        assert message == [
            "chat not owned by task", f"chat status mismatch: {status} != {d.FENCED_STATUS[transition]}",
            "chat archived", f"chat history version mismatch: {hv} != {f_hv}",
            f"generation fence mismatch: {attempt} != {f_attempt}"][first]
    d.check_fence(s, None, transition)  # no fence: never refused


def test_explain_and_the_audit_page_show_the_fence_each_step_committed_under(sqlite_url, tmp_path):
    app = open_app(sqlite_url)
    try:
        setup_org(app)
        created = run(app, type="create_chat", organization_id="8a6f4d2e-1b3c-4d5e-8f70-000000000001",
                      owner_id="5b1d7e9a-2c4f-4a6b-9d8e-00000000a11c", text="hello")
        chat_id = created["chat_id"]
        run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
        hv = chat_state(app, chat_id).history_version
        attempt = run(app, type="record_generation_attempt", chat_id=chat_id,
                      fence={"runner_id": RUNNER, "history_version": hv, "generation_attempt": 0})
        run(app, type="commit_step", chat_id=chat_id, messages=STEP,
            fence={"runner_id": RUNNER, "history_version": hv, "generation_attempt": attempt["generation_attempt"]})
        run(app, type="finish_turn", chat_id=chat_id, fence={"runner_id": RUNNER})
    finally:
        app.close()
    out = CliRunner().invoke(main, ["--db", sqlite_url, "explain", chat_id, "--turn", created["turn_id"], "--json"])
    t = json.loads(out.output)
    (step,) = t["step_details"]
    assert step["fence"] == {"runner_id": RUNNER, "history_version": hv, "generation_attempt": 1}
    assert (step["generation_attempt"], step["runner_id"], step["settings_from"]) == (1, RUNNER, "recorded")
    assert t["attempts"][0]["fence"] == {"runner_id": RUNNER, "history_version": hv, "generation_attempt": 0}
    assert t["ended"]["fence"] == {"runner_id": RUNNER}
    text = CliRunner().invoke(main, ["--db", sqlite_url, "explain", chat_id, "--turn", created["turn_id"]]).output
    assert (f"step at version {step['version']} (attempt 1, runner {RUNNER}, fence runner_id {RUNNER}, "
            f"history_version {hv}, generation_attempt 1): model openai/gpt-5") in text
    assert f"it ended at version {t['ended']['version']}" in text and f"(fence runner_id {RUNNER})" in text
    page = tmp_path / "audit.html"
    assert CliRunner().invoke(main, ["--db", sqlite_url, "audit", chat_id, "--html", str(page)]).exit_code == 0
    html = page.read_text()
    assert "<h2>Steps</h2>" in html and f"fence runner_id {RUNNER}, history_version {hv}, generation_attempt 1" in html
    assert "openai/gpt-5 (chat_model)" in html and "recorded by the attempt" in html


def test_the_human_forms_of_worker_commands_take_a_fence(sqlite_url):
    app = open_app(sqlite_url)
    try:
        setup_org(app)
        chat_id = new_running_chat(app)
        hv = chat_state(app, chat_id).history_version
    finally:
        app.close()
    out = CliRunner().invoke(main, ["--db", sqlite_url, "chat", "reply", chat_id, "--text", "late", "--fence-attempt", "5"])
    assert out.exit_code == 1 and "error: fence_mismatch: generation fence mismatch: 0 != 5" in out.output
    ok = CliRunner().invoke(main, ["--db", sqlite_url, "chat", "record-attempt", chat_id, "--json",
                                   "--fence-runner", RUNNER, "--fence-history", str(hv), "--fence-attempt", "0"])
    assert ok.exit_code == 0 and json.loads(ok.output)["generation_attempt"] == 1
    stale = CliRunner().invoke(main, ["--db", sqlite_url, "chat", "finish-turn", chat_id, "--fence-history", "1"])
    assert stale.exit_code == 1 and f"chat history version mismatch: {hv} != 1" in stale.output
