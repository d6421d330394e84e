"""``events verify --decisions``: every recorded decision re-decided with the facts as of its position.

* A 200-chat simulated ledger (``commands.tools.simulate``: fences on every worker command, runner-passed
  and ledger-resolved attempt settings, catalog changes half-way) verifies with no disagreement, and every
  decision the simulator made is re-decided equal (``check_decisions`` on all of them, at the position
  each was made at); then one recorded model is edited in the database with SQL and is reported.
* A property: attempts recorded under random catalog and deployment changes are re-decided equal, and the
  re-decision is the time-aligned one (today's settings would differ).
* Each kind of tampered decision is named: a promotion's model resolution, a claim, a retry delay.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.asof import AsOf
from commands.cli.main import main
from commands.eventlog_transfer import export_lines, import_lines
from commands.eventlog_verify import verify
from commands.next_action import decide_chat
from commands.redecide import check_decisions
from commands.tools.sim_checks import check_decisions as check_simulated
from commands.tools.simulate import simulate
from ledger import positions
from ledger.chat import events as ev
from ledger.chat.views import tool_call_execution_ids
from ledger.store import ChatLedgerApp, open_app
from ledger.toolcalls import events as tev
from tests.chat.helpers import RUNNER, WORKER, run, setup_org
from tests.store.rawdb import RawDB


def verify_cli(url: str) -> tuple[int, dict[str, Any]]:
    out = CliRunner().invoke(main, ["--db", url, "events", "verify", "--no-projections", "--decisions", "--json"])
    return out.exit_code, json.loads(out.stdout)  # (progress lines go to stderr)


def test_a_simulated_ledger_is_re_decided_equal_and_an_edited_model_is_reported(sqlite_url):
    # simulated in memory (fast), then copied byte for byte into SQLite (``events import``) for the SQL edit
    app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    try:
        sim = simulate(app, 200, 3, orgs=3, turns=2, steps=4)
        assert sim.unexpected == [] and sim.anomalies == []
        act = sim.summary()["activity"]
        assert act["stale_commits_refused"] > 0 and sim.refusals["fence_mismatch"] == act["stale_commits_refused"]
        # every decision the simulator made, made again at the version and position it was made at
        assert check_simulated(app, sim.decisions) == []
        attempts = [e for c in sim.chats for e in app.stream(uuid.UUID(c.chat_id))
                    if isinstance(e, ev.GenerationAttemptRecorded)]
        assert {e.settings.source for e in attempts} == {"runner", "ledger"}
        assert all(e.fence is not None for e in attempts)
        copy = open_app(sqlite_url)
        try:
            import_lines(copy, export_lines(app))
        finally:
            copy.close()
    finally:
        app.close()

    code, report = verify_cli(sqlite_url)
    assert code == 0 and report["ok"], report["anomalies"][:3]
    checked = report["decisions"]["checked"]
    assert checked["attempt_settings"] == len(attempts) and report["decisions"]["disagreements"] == 0
    assert report["decisions"]["skipped_chats"] == []
    assert checked["claim"] > 0 and checked["model_resolution"] > 0 and checked["retry_delay"] > 0

    # an attempt that ran on a resolved model: its recorded model is edited in the database
    target = next(e for e in attempts if e.settings.model is not None)
    real = target.settings.model.model

    def edit(payload: dict[str, Any]) -> None:
        payload["settings"]["model"]["model"] = "gpt-4.1-mini"

    RawDB(sqlite_url).rewrite(target.originator_id, target.originator_version, edit)
    code, report = verify_cli(sqlite_url)
    assert code == 1 and not report["ok"]
    (bad,) = [a for a in report["anomalies"] if a["check"] != "chain"]
    # the edit also breaks the stream's hash chain there
    assert [(a["stream_id"], a["version"]) for a in report["anomalies"] if a["check"] == "chain"] == [
        (str(target.originator_id), target.originator_version)]
    assert (bad["stream_id"], bad["version"], bad["check"], bad["decision"]) == (
        str(target.originator_id), target.originator_version, "decision", "attempt_settings")
    assert bad["differences"] == [{"field": "model.model", "recorded": "gpt-4.1-mini", "redecided": real}]
    assert bad["recorded"]["model"]["model"] == "gpt-4.1-mini" and bad["redecided"]["model"]["model"] == real
    text = CliRunner().invoke(main, ["--db", sqlite_url, "events", "verify", "--no-projections", "--decisions"])
    assert text.exit_code == 1
    assert (f"stream {target.originator_id} version {target.originator_version}" in text.output
            and "[decision] attempt_settings re-decided differently: model.model: recorded 'gpt-4.1-mini'" in text.output)


def test_each_kind_of_tampered_decision_is_named(db_url):
    org, owner, m1, m2 = (str(uuid.uuid4()) for _ in range(4))
    app = open_app(db_url)
    try:
        run(app, type="add_organization_member", organization_id=org, user_id=owner)
        run(app, type="create_model_config", organization_id=org, model_config_id=m1, provider="openai",
            model="gpt-5", context_limit=100_000, is_default=True)
        run(app, type="create_model_config", organization_id=org, model_config_id=m2, provider="openai",
            model="gpt-5-mini", context_limit=50_000)
        chat_id = run(app, type="create_chat", organization_id=org, owner_id=owner, text="hi")["chat_id"]
        run(app, type="acquire", chat_id=chat_id, worker_id=WORKER, runner_id=RUNNER)
        run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
            {"type": "tool-call", "tool_call_id": "c1", "tool_name": "read_file", "args": {}}]}])
        ids = dict(chat_id=chat_id, assistant_message_id=2, tool_call_id="c1")
        run(app, type="claim_tool_call", **ids, tool_name="read_file")
        run(app, type="record_tool_call_response", **ids, status=200, body="{}")
        run(app, type="claim_tool_call", **ids, tool_name="read_file")  # epoch 2: saved
        run(app, type="send_message", chat_id=chat_id, text="next", model_config_id=m2)
        run(app, type="record_generation_attempt", chat_id=chat_id)
        run(app, type="record_retry_state", chat_id=chat_id, retry_state={"attempt": 1, "delay_ms": 1000})
        run(app, type="update_model_config", organization_id=org, model_config_id=m2, enabled=False)
        run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "tool", "parts": [
            {"type": "tool-result", "tool_call_id": "c1", "tool_name": "read_file", "result": {}}]}])
        promoted = run(app, type="finish_turn", chat_id=chat_id)  # m2 disabled since it was queued: fallback
        assert promoted["model_resolution"]["source"] == "fallback_default"
        stream = app.stream(uuid.UUID(chat_id))
        (execution,) = executions_of(chat_id, "c1")
    finally:
        app.close()
    assert verify_cli(db_url)[0] == 0

    raw = RawDB(db_url)
    promotion = next(e for e in stream if isinstance(e, ev.QueuedPromptPromoted))
    retry = next(e for e in stream if isinstance(e, ev.RetryStateRecorded))
    raw.rewrite(promotion.originator_id, promotion.originator_version,
                lambda p: p.update(model_resolution={"model_config_id": m2, "source": "explicit"}))
    raw.rewrite(retry.originator_id, retry.originator_version, lambda p: p["retry_state"].update(delay_ms=250))
    raw.rewrite(execution, 4, lambda p: p.update(outcome="run"))  # the re-claim recorded as a second run
    code, report = verify_cli(db_url)
    assert code == 1
    got = {(a["decision"], a["stream_id"], a["version"]): a["differences"] for a in report["anomalies"]
           if a["check"] == "decision"}
    assert got[("model_resolution", chat_id, promotion.originator_version)] == [
        {"field": "model_config_id", "recorded": m2, "redecided": m1},
        {"field": "source", "recorded": "explicit", "redecided": "fallback_default"},
        {"field": "reason", "recorded": None, "redecided": "disabled"},
        {"field": "requested_model_config_id", "recorded": None, "redecided": m2}]
    assert got[("retry_delay", chat_id, retry.originator_version)] == [
        {"field": "delay", "recorded": 0.25, "redecided": ">= 1"}]
    assert got[("claim", str(execution), 4)] == [{"field": "outcome", "recorded": "run", "redecided": "saved"}]
    assert len(got) == 3
    # (the second run also breaks the execution's invariant, which verify reports on its own)
    assert [a["reason"] for a in report["anomalies"] if a["check"] not in ("decision", "chain", "cross_stream")] == [
        "after ToolCallClaimed: claim 2 has outcome run"]
    # ... and the chat's call ran twice (both streams named)
    assert [(a["stream_id"], a["execution_id"], a["execution_version"]) for a in report["anomalies"]
            if a["check"] == "cross_stream"] == [(chat_id, str(execution), 4)]
    # each edited stream's chain breaks at its first edit
    chains = {a["stream_id"]: a["version"] for a in report["anomalies"] if a["check"] == "chain"}
    assert chains == {chat_id: min(promotion.originator_version, retry.originator_version), str(execution): 4}


def executions_of(chat_id: str, call_id: str) -> list[uuid.UUID]:
    """The execution stream of a call of the chat's message 2."""
    return list(tool_call_execution_ids(uuid.UUID(chat_id), 2, [call_id]).values())


# -- the property ---------------------------------------------------------------------------------------------

ORG, OWNER, M1, M2 = (str(uuid.UUID(int=0xA000 + i)) for i in range(4))
STEPS = st.lists(st.one_of(
    st.tuples(st.just("threshold"), st.sampled_from([M1, M2]), st.integers(10, 100)),
    st.tuples(st.just("limit"), st.sampled_from([M1, M2]), st.integers(500, 5000)),
    st.tuples(st.just("enable"), st.sampled_from([M1, M2]), st.booleans()),
    st.tuples(st.just("advisor"), st.booleans(), st.integers(0, 3)),
    st.tuples(st.just("compaction_override"), st.sampled_from([M1, M2, None])),
    st.tuples(st.just("step"), st.integers(0, 4000)),
    st.tuples(st.just("attempt"), st.booleans()),
), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_attempts_under_changing_settings_are_re_decided_equal_as_of_their_position(steps):
    app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    try:
        run(app, type="add_organization_member", organization_id=ORG, user_id=OWNER)
        for mid in (M1, M2):
            run(app, type="create_model_config", organization_id=ORG, model_config_id=mid, provider="openai",
                model=f"model-{mid[-1]}", context_limit=2000, is_default=mid == M1)
        run(app, type="set_admin_model_override", organization_id=ORG, context="advisor", model_config_id=M2)
        chat_id = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="go", model_config_id=M1)[
            "chat_id"]
        cid = uuid.UUID(chat_id)
        recorded: list[tuple[int, Any]] = []
        for s in steps:
            kind = s[0]
            try:
                if kind == "threshold":
                    run(app, type="update_model_config", organization_id=ORG, model_config_id=s[1],
                        compression_threshold=s[2])
                elif kind == "limit":
                    run(app, type="update_model_config", organization_id=ORG, model_config_id=s[1],
                        context_limit=s[2])
                elif kind == "enable":
                    run(app, type="update_model_config", organization_id=ORG, model_config_id=s[1], enabled=s[2])
                elif kind == "advisor":
                    run(app, type="set_deployment_settings", advisor_enabled=s[1], advisor_max_uses_per_turn=s[2])
                elif kind == "compaction_override":
                    run(app, type="set_admin_model_override", organization_id=ORG, context="compaction",
                        model_config_id=s[1])
                elif kind == "step":
                    run(app, type="commit_step", chat_id=chat_id, messages=[{"role": "user", "visibility": "model",
                        "parts": [{"type": "text", "text": "tick"}], "usage": {"input_tokens": s[1]}}])
                else:
                    extra = {}
                    if s[1]:  # a runner that passes what next-action told it
                        _, _, info = decide_chat(app, cid)
                        extra["settings"] = info["attempt_settings"]
                    r = run(app, type="record_generation_attempt", chat_id=chat_id, **extra)
                    recorded.append((r["version"], r["settings"]))
            except Exception as e:  # catalog rules may refuse a change (the last default disabled): skipped
                assert getattr(e, "code", None), e
        tally = check_decisions(app)
        assert tally.anomalies == [] and tally.skipped == []
        assert tally.checked["attempt_settings"] == len(recorded)
        for version, ran in recorded:
            # the decision at the version before the attempt, with the facts as of the attempt's position,
            # is what the attempt recorded; with today's facts it may differ (never used)
            _, _, info = decide_chat(app, cid, version - 1, position=positions.notification_id(app.recorder, cid, version))
            assert info["attempt_settings"] == {k: v for k, v in ran.items() if k != "source"}
    finally:
        app.close()


@settings(max_examples=60, deadline=None)
@given(writes=st.lists(st.integers(0, 3), min_size=1, max_size=40), probes=st.lists(st.integers(0, 45), max_size=10))
def test_log_positions_agree_with_the_log(writes, probes):
    """(stream, version) -> notification id and back, against the log read in order (in memory; the same
    queries on both databases are exercised by the tests above)."""
    app = ChatLedgerApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    try:
        chats = []
        run(app, type="add_organization_member", organization_id=ORG, user_id=OWNER)
        run(app, type="create_model_config", organization_id=ORG, model_config_id=M1, provider="openai",
            model="m", context_limit=2000)
        for i in range(4):
            chats.append(run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text=f"c{i}")["chat_id"])
        for w in writes:
            run(app, type="set_title", chat_id=chats[w], title=f"t{w}")
        log = [(n.id, n.originator_id, n.originator_version) for n in app.notifications(0, 1000)]
        indexed, direct = AsOf(app, index=True), AsOf(app)
        for chat in map(uuid.UUID, chats):
            mine = [(v, nid) for nid, sid, v in log if sid == chat]
            assert positions.positions(app.recorder, chat) == mine
            for v, nid in mine:
                assert positions.notification_id(app.recorder, chat, v) == nid
            for p in probes + [nid for _, nid in mine]:
                want = max((v for v, nid in mine if nid <= p), default=0)
                assert indexed.version(chat, p) == direct.version(chat, p) == want
                agg = indexed.load(chat, p)
                assert (agg.version if agg is not None else 0) == want
    finally:
        app.close()


def test_verify_without_the_flag_does_not_re_decide(sqlite_url):
    app = open_app(sqlite_url)
    try:
        simulate(app, 3, 1, turns=1, steps=2)
        report = verify(app)
        assert "decisions" not in report
        assert verify(app, decisions=True)["decisions"]["disagreements"] == 0
    finally:
        app.close()


def test_claims_are_decided_again_on_the_state_before_their_command(memory_app):
    setup_org(memory_app)
    chat_id = run(memory_app, type="create_chat", organization_id="8a6f4d2e-1b3c-4d5e-8f70-000000000001",
                  owner_id="5b1d7e9a-2c4f-4a6b-9d8e-00000000a11c", text="x")["chat_id"]
    run(memory_app, type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "k", "tool_name": "execute", "args": {}}]}])
    ids = dict(chat_id=chat_id, assistant_message_id=2, tool_call_id="k")
    for _ in range(3):
        run(memory_app, type="claim_tool_call", **ids, tool_name="execute")
    tally = check_decisions(memory_app)
    assert tally.checked["claim"] == 3 and tally.anomalies == []
    (eid,) = executions_of(chat_id, "k")
    claims = [e for e in memory_app.stream(eid) if isinstance(e, tev.ToolCallClaimed)]
    assert [(c.claim_epoch, c.outcome) for c in claims] == [(1, "run"), (2, "saved"), (3, "saved")]


def test_a_chat_that_does_not_decode_is_skipped_and_named_by_verify(sqlite_url):
    app = open_app(sqlite_url)
    try:
        setup_org(app)
        chat_id = run(app, type="create_chat", organization_id="8a6f4d2e-1b3c-4d5e-8f70-000000000001",
                      owner_id="5b1d7e9a-2c4f-4a6b-9d8e-00000000a11c", text="x")["chat_id"]
        run(app, type="set_title", chat_id=chat_id, title="t")
    finally:
        app.close()
    RawDB(sqlite_url).set_state(uuid.UUID(chat_id), 2, b'{"title": 7}')
    code, report = verify_cli(sqlite_url)
    assert code == 1 and report["decisions"]["skipped_chats"] == [chat_id]
    assert [(a["check"], a["version"]) for a in report["anomalies"]] == [("chain", 2), ("decode", 2)]
