"""Cross-stream truth (issue 14 point 4), on SQLite and PostgreSQL: ``events verify`` checks each chat's
committed tool results against the tool-call executions — an untruthful interruption result for a call
recorded as not run, a result contradicting the saved response, a second run — naming both streams and
versions (exit 1); and ``claim_tool_call`` of a tool the chat's policy in force does not allow is refused
with ``tool_not_allowed``, recording nothing."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, strategies as st

from ledger.errors import LedgerError
from ledger.store import open_app
from tests.audit.kit import cli
from tests.chat.helpers import ORG, OWNER, RUNNER, WORKER, run, setup_org
from tests.store.rawdb import RawDB
from tests.toolcalls import core
from tests.toolcalls.helpers import call_command, cancel, claim, respond


def _owned_chat_with(app, *calls: tuple[str, str], policy: list[str] | None = None) -> str:
    chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="do it",
                  hook_allowed_tools=policy)["chat_id"]
    run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
    parts = [{"type": "tool-call", "tool_call_id": cid, "tool_name": name, "args": {}} for cid, name in calls]
    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": parts}])
    return chat_id


def _result(cid: str, tool: str, result, is_error: bool = False) -> dict:
    return {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": cid, "tool_name": tool,
                                       "result": result, "is_error": is_error}]}


def _verify(db_url: str, code: int) -> dict:
    return json.loads(cli(db_url, "events", "verify", "--json", "--no-projections", code=code).stdout)


def _interrupted(db_url: str, committed_result) -> tuple[str, str]:
    """An owned chat calls ``execute`` (c1); the user interrupts before it runs; the worker cancels it
    (recorded as not run) and finishes the interruption committing ``committed_result``."""
    app = open_app(db_url)
    try:
        setup_org(app)
        chat_id = _owned_chat_with(app, ("c1", "execute"))
        run(app, type="interrupt", chat_id=chat_id)
        canceled = cancel(app, chat_id)
        assert canceled["outcome"] == "not_run" and canceled["received"] is False
        result = canceled["result"] if committed_result is None else committed_result
        run(app, type="finish_interruption", chat_id=chat_id,
            partial_messages=[_result("c1", "execute", result, is_error=True)])
    finally:
        app.close()
    return chat_id, canceled["execution_id"]


def test_an_untruthful_interruption_result_is_reported_with_both_streams(db_url):
    chat_id, execution_id = _interrupted(db_url, "SOMETHING UNTRUTHFUL")
    report = _verify(db_url, 1)
    (bad,) = report["anomalies"]
    raw = RawDB(db_url)
    finished = len(raw.rows(uuid.UUID(chat_id)))  # the interruption's event is the chat's last
    assert (bad["check"], bad["stream_id"], bad["version"]) == ("cross_stream", chat_id, finished)
    assert (bad["execution_id"], bad["execution_version"]) == (execution_id, 2)  # opened, canceled
    assert "'SOMETHING UNTRUTHFUL'" in bad["reason"] and "canceled before it ran" in bad["reason"]
    text = cli(db_url, "events", "verify", "--no-projections", code=1).output
    assert f"stream {chat_id} version {finished}" in text and "[cross_stream]" in text


def test_the_truthful_interruption_result_verifies(db_url):
    _interrupted(db_url, None)
    assert _verify(db_url, 0)["ok"]


def test_a_result_contradicting_the_saved_response_is_reported(db_url):
    app = open_app(db_url)
    try:
        setup_org(app)
        chat_id = _owned_chat_with(app, ("c1", "read_file"), ("c2", "execute"))
        for cid, tool in (("c1", "read_file"), ("c2", "execute")):
            claim(app, chat_id, cid, tool)
        respond(app, chat_id, "c1", body='{"content": "x = 1"}')
        ok = respond(app, chat_id, "c2", status=500, body='{"error": "exit 2"}')
        run(app, type="commit_step", chat_id=chat_id, messages=[
            _result("c1", "read_file", {"content": "x = 1"}),                 # true
            _result("c2", "execute", {"exit_code": 0, "output": "all good"})])  # the response said it failed
    finally:
        app.close()
    (bad,) = _verify(db_url, 1)["anomalies"]
    assert bad["check"] == "cross_stream" and bad["stream_id"] == chat_id
    assert (bad["execution_id"], bad["execution_version"]) == (ok["execution_id"], 3)  # opened, claimed, response
    assert "status 500" in bad["reason"] and "'c2'" in bad["reason"]


def test_a_second_run_is_reported_with_the_chat(db_url):
    app = open_app(db_url)
    try:
        setup_org(app)
        chat_id = _owned_chat_with(app, ("c1", "execute"))
        first = claim(app, chat_id)
        respond(app, chat_id)
        claim(app, chat_id)  # saved
        run(app, type="commit_step", chat_id=chat_id, messages=[_result("c1", "execute", {"exit_code": 0})])
    finally:
        app.close()
    RawDB(db_url).rewrite(uuid.UUID(first["execution_id"]), 4, lambda p: p.update(outcome="run"))
    report = _verify(db_url, 1)
    cross = [a for a in report["anomalies"] if a["check"] == "cross_stream"]
    assert [(a["stream_id"], a["execution_id"], a["execution_version"]) for a in cross] == [
        (chat_id, first["execution_id"], 4)]
    assert cross[0]["version"] == len(RawDB(db_url).rows(uuid.UUID(chat_id)))  # the result's chat version
    assert "ran 2 times" in cross[0]["reason"]


def test_a_claim_of_a_tool_the_policy_does_not_allow_is_refused(db_url):
    app = open_app(db_url)
    try:
        setup_org(app)
        chat_id = _owned_chat_with(app, ("c1", "execute"), ("c2", "read_file"), ("c3", "advisor"),
                                   policy=["read_file"])
        before = app.head()
        with pytest.raises(LedgerError) as err:
            claim(app, chat_id, "c1", "execute")
        assert err.value.code == "tool_not_allowed"
        assert err.value.message == ("tool 'execute' is not allowed by the chat's tool policy in force (read_file); "
                                     "it will not run")
        assert app.head() == before
        assert claim(app, chat_id, "c2", "read_file")["outcome"] == "run"
        assert claim(app, chat_id, "c3", "advisor")["outcome"] == "run"  # offered whatever the policy
        # a cancel of the refused call still records the truth: it never ran
        assert cancel(app, chat_id, "c1")["outcome"] == "not_run"
    finally:
        app.close()


@given(policy=st.one_of(st.none(), st.lists(st.sampled_from(["execute", "read_file", "write_file"]), unique=True)),
       tool=st.sampled_from(["execute", "read_file", "write_file", "advisor"]),
       claimed_before=st.booleans())
def test_the_claim_rule_refuses_exactly_a_run_the_policy_does_not_allow(policy, tool, claimed_before):
    s = core.Stream(core.facts(tool))
    if claimed_before:
        s.claim()
    allowed = policy is None or tool in policy or tool == "advisor"
    try:
        events = s.claim_policy(policy)
    except LedgerError as e:
        assert e.code == "tool_not_allowed" and not allowed and not claimed_before
        assert s.state is None or s.state.claim_epoch == 1
        return
    assert allowed or claimed_before
    assert events[-1].outcome == ("saved" if claimed_before else "run")


def test_cli_apply_names_the_refusal(sqlite_url, tmp_path):
    app = open_app(sqlite_url)
    try:
        setup_org(app)
        chat_id = _owned_chat_with(app, ("c1", "execute"), policy=["read_file"])
    finally:
        app.close()
    path = tmp_path / "claim.jsonl"
    path.write_text(json.dumps(call_command("claim_tool_call", chat_id, "c1", tool_name="execute")) + "\n")
    out = cli(sqlite_url, "apply", str(path), code=1).output
    assert '"tool_not_allowed"' in out
