"""The conversation through its command handlers and the real store (SQLite and PostgreSQL): results,
idempotency, replay from the store, crash safety of tool-call ids, concurrent writers."""

from __future__ import annotations

import threading
from typing import Any
from uuid import UUID, uuid4

import msgspec
import pytest

from commands import conversation as conv
from ledger.conversation.values import ToolCall
from ledger.errors import LedgerError
from tests.conversation.commands_kit import decode, run_command
from tests.conversation.harness import SESSION

CALL = {"type": "call", "name": "ls", "arguments": "{}"}


def start(do: Any, **fields: Any) -> str:
    return do({"type": "conversation_start", "session": SESSION, **fields})["conversation_id"]


def op(do: Any, cid: str, kind: str, **fields: Any) -> dict[str, Any]:
    return do({"type": f"conversation_{kind}", "conversation_id": cid, **fields})


def stored_ids(app: Any, cid: str) -> list[int]:
    agg = conv.load_conversation(app, UUID(cid))
    return [b.content.tool_call_id.sequence for b in agg.state.boxes if isinstance(b.content, ToolCall)]


def refused_with(code: str, fn: Any) -> LedgerError:
    with pytest.raises(LedgerError) as info:
        fn()
    assert info.value.code == code
    return info.value


# -- a whole conversation -------------------------------------------------------------------------------

def test_a_conversation_through_the_store(app, do, reopen):
    cid = start(do)
    assert op(do, cid, "arrive", arrival={"type": "user", "text": "ask"})["box_id"] == 1
    began = op(do, cid, "begin")
    assert (began["started"], began["job"], began["status"]) == (True, 1, "Running")
    assert began["boxes"] == [{"type": "history", "item": {"box_id": 1, "type": "user", "text": "ask"}}]

    stage = op(do, cid, "prepare_stage", job=1, text="thinking", values=[CALL, CALL])
    assert [c["tool_call_id"] for c in stage["tool_calls"]] == [
        {"session": SESSION, "sequence": 1}, {"session": SESSION, "sequence": 2}]
    assert stage["box_ids"] == [2, 3, 4] and stage["last_sequence"] == 2

    queued = op(do, cid, "arrive", arrival={"type": "tool_return", "result": "files",
                                            "tool_call_id": {"session": SESSION, "sequence": 1}})
    assert (queued["queued"], queued["box_id"], queued["queued_count"]) == (True, None, 1)
    steer = op(do, cid, "prepare_steer", job=1)["steer"]
    assert (steer["job"], steer["generation"], steer["start"], steer["end"]) == (1, 1, 4, 5)
    assert steer["values"][0]["item"]["originating_call"] == 3
    assert op(do, cid, "validate_steer", steer=steer)["valid"] is True
    assert op(do, cid, "commit_steer", steer=steer)["submitted"] == 5
    refused_with("invalid_steer", lambda: op(do, cid, "commit_steer", steer=steer))

    op(do, cid, "arrive", arrival={"type": "user", "text": "one more thing"})
    done = op(do, cid, "complete", job=1, text="here you go")
    assert (done["outcome"], done["error"], done["box_ids"], done["follow_up"]) == ("completed", None, [6, 7], True)
    follow_up = op(do, cid, "begin")
    assert follow_up["job"] == 2 and [b["item"]["box_id"] for b in follow_up["boxes"]] == [7]

    failed = op(do, cid, "fail", job=2, message="provider down", restartable_before_launch=True)
    assert (failed["outcome"], failed["status"], failed["restartable"]) == ("stalled", "Stalled", True)
    assert op(do, cid, "restart")["status"] == "Running"
    resumed = op(do, cid, "begin")
    assert (resumed["job"], resumed["resumed"], len(resumed["boxes"])) == (3, True, 7)

    # a fresh application replays the stream from the store to the same state
    live = conv.load_conversation(app, UUID(cid))
    again = conv.load_conversation(reopen(), UUID(cid))
    assert again.state == live.state and again.version == live.version == resumed["version"]
    show = conv.show_conversation(app, UUID(cid))
    assert show["conversation"]["conversation_id"] == cid and len(show["boxes"]) == 7
    at_start = conv.show_conversation(app, UUID(cid), version=2)
    assert at_start["conversation"]["box_count"] == 1 and at_start["conversation"]["status"] == "Running"


def test_stalls_on_the_completion_path_are_recorded_and_reported(do):
    cid = start(do)
    op(do, cid, "arrive", arrival={"type": "user", "text": "ask"})
    op(do, cid, "begin")
    op(do, cid, "prepare_stage", job=1, values=[CALL])
    result = op(do, cid, "complete", job=1, items=[{"type": "text", "text": "x"},
                                                   {"type": "box", "value": CALL}])
    assert result["outcome"] == "halted" and result["status"] == "Stalled" and not result["restartable"]
    assert result["error"] == {"code": "terminal_output_box", "message": "terminal Codex output contains a box"}
    assert result["stall_message"] == "terminal Codex output contains a box"
    refused_with("not_restartable", lambda: op(do, cid, "restart"))
    recovered = op(do, cid, "recover", force=True)
    assert (recovered["status"], recovered["last_sequence"], recovered["halted"]) == ("Running", 1, False)


def test_refusals_record_nothing(app, do):
    refused_with("conversation_not_found", lambda: op(do, str(uuid4()), "begin"))
    cid = start(do)
    version = op(do, cid, "begin")["version"]
    error = refused_with("stale_stage", lambda: op(do, cid, "prepare_stage", job=1, values=[CALL]))
    assert error.message == "stale Codex inference stage"
    refused_with("malformed_tool_call", lambda: op(do, cid, "prepare_stage", job=1,
                                                   values=[{"type": "malformed_call", "error": "bad"}]))
    refused_with("not_stalled", lambda: op(do, cid, "restart"))
    both = {"text": "a", "items": [{"type": "text", "text": "b"}]}
    refused_with("invalid_command", lambda: op(do, cid, "complete", job=1, **both))
    refused_with("conversation_exists", lambda: do({"type": "conversation_start", "conversation_id": cid}))
    assert conv.load_conversation(app, UUID(cid)).version == version == 1


def test_stale_fail_is_ignored(do):
    cid = start(do)
    result = op(do, cid, "fail", job=7, message="late")
    assert (result["outcome"], result["version"], result["status"]) == ("ignored", 1, "Quiet")


def test_a_persisted_transcript_is_recovered_into_a_new_stream(do):
    transcript = [
        {"id": 1, "content": {"type": "user", "text": "ask"}},
        {"id": 2, "content": {"type": "tool_call", "name": "ls", "arguments": "{}",
                              "tool_call_id": {"session": SESSION, "sequence": 41}}},
    ]
    result = do({"type": "conversation_start", "session": SESSION, "transcript": transcript, "force": True})
    assert (result["box_ids"], result["last_sequence"], result["status"]) == ([1, 2], 41, "Running")
    began = op(do, result["conversation_id"], "begin")
    assert len(began["boxes"]) == 2
    stage = op(do, result["conversation_id"], "prepare_stage", job=1, values=[CALL])
    assert stage["tool_calls"][0]["tool_call_id"]["sequence"] == 42

    foreign = [{"id": 1, "content": {"type": "tool_call", "name": "ls", "arguments": "",
                                     "tool_call_id": {"session": "f" * 24, "sequence": 1}}}]
    error = refused_with("foreign_session_tool_call", lambda: do({"type": "conversation_start", "session": SESSION,
                                                                  "transcript": foreign}))
    assert error.message == "recovered ToolCallId belongs to another session"


# -- idempotency ----------------------------------------------------------------------------------------

def test_a_repeated_key_returns_the_first_result_and_records_nothing(app, do):
    first = do({"type": "conversation_start", "idempotency_key": "start-1"})
    assert do({"type": "conversation_start", "idempotency_key": "start-1"}) == first  # same derived id
    cid = first["conversation_id"]
    op(do, cid, "arrive", arrival={"type": "user", "text": "ask"}, idempotency_key="a1")
    op(do, cid, "begin", idempotency_key="b1")
    stage = op(do, cid, "prepare_stage", job=1, values=[CALL, CALL], idempotency_key="s1")
    op(do, cid, "arrive", arrival={"type": "user", "text": "later"})
    steer = op(do, cid, "prepare_steer", job=1, idempotency_key="p1")
    version = conv.load_conversation(app, UUID(cid)).version

    assert op(do, cid, "prepare_stage", job=1, values=[CALL, CALL], idempotency_key="s1") == stage
    assert op(do, cid, "prepare_steer", job=1, idempotency_key="p1") == steer  # two events under one key
    assert op(do, cid, "arrive", arrival={"type": "user", "text": "ask"}, idempotency_key="a1")["box_id"] == 1
    assert op(do, cid, "begin", idempotency_key="b1")["job"] == 1
    assert conv.load_conversation(app, UUID(cid)).version == version

    events = app.stream(UUID(cid))
    assert {e.idempotency_key for e in events} >= {"start-1", "a1", "b1", "s1", "p1"}


def test_a_key_reused_by_a_different_command_is_refused(app, do):
    cid = start(do)
    op(do, cid, "arrive", arrival={"type": "user", "text": "ask"}, idempotency_key="k")
    version = conv.load_conversation(app, UUID(cid)).version
    error = refused_with("idempotency_key_reused", lambda: op(do, cid, "begin", idempotency_key="k"))
    assert error.message == "idempotency key was already used by a different command (a conversation_arrive command)"
    assert conv.load_conversation(app, UUID(cid)).version == version


def test_commands_record_the_actor(app, do):
    actor = uuid4()
    cid = do({"type": "conversation_start", "actor": str(actor)})["conversation_id"]
    assert app.stream(UUID(cid))[0].actor == actor


# -- crash safety ---------------------------------------------------------------------------------------

def test_ids_are_durable_before_prepare_stage_returns(do, reopen):
    cid = start(do)
    op(do, cid, "arrive", arrival={"type": "user", "text": "ask"})
    op(do, cid, "begin")
    handed_out = [c["tool_call_id"]["sequence"]
                  for c in op(do, cid, "prepare_stage", job=1, values=[CALL, CALL, CALL])["tool_calls"]]
    # the process dies right after handing the calls to the launcher: another process reads the store
    survivor = reopen()
    assert stored_ids(survivor, cid) == handed_out == [1, 2, 3]
    recovered = run_command(survivor, {"type": "conversation_recover", "conversation_id": cid, "force": True})
    assert recovered["last_sequence"] == 3
    job = run_command(survivor, {"type": "conversation_begin", "conversation_id": cid})["job"]
    again = run_command(survivor, {"type": "conversation_prepare_stage", "conversation_id": cid, "job": job,
                                   "values": [CALL]})
    assert again["tool_calls"][0]["tool_call_id"]["sequence"] == 4


SCRIPT: list[dict[str, Any]] = [
    {"type": "conversation_arrive", "arrival": {"type": "user", "text": "ask"}},
    {"type": "conversation_begin"},
    {"type": "conversation_prepare_stage", "job": 1, "text": "let me look", "values": [CALL, CALL]},
    {"type": "conversation_arrive", "arrival": {"type": "tool_return", "result": "r",
                                                "tool_call_id": {"session": SESSION, "sequence": 1}}},
    {"type": "conversation_prepare_steer", "job": 1},
    {"type": "conversation_prepare_stage", "job": 1, "values": [CALL]},  # refused: steer pending
    {"type": "conversation_complete", "job": 1, "text": "done"},  # stalls: steer uncommitted
    {"type": "conversation_recover", "force": True},
    {"type": "conversation_begin"},
    {"type": "conversation_prepare_stage", "job": 2, "values": [CALL]},
    {"type": "conversation_fail", "job": 2, "message": "boom"},
]


@pytest.mark.parametrize("crash_after", range(len(SCRIPT) + 1))
def test_recovery_after_a_crash_at_any_point_never_reissues_an_id(do, reopen, crash_after):
    cid = start(do)
    handed_out: list[int] = []
    for command in SCRIPT[:crash_after]:
        try:
            result = do({**command, "conversation_id": cid})
        except LedgerError:
            continue
        handed_out += [c["tool_call_id"]["sequence"] for c in result.get("tool_calls", [])]
    # crash: the first process is gone; a new one recovers from the store and keeps staging calls
    survivor = reopen()
    assert stored_ids(survivor, cid) == handed_out
    state = run_command(survivor, {"type": "conversation_recover", "conversation_id": cid, "force": True})
    assert state["last_sequence"] == max(handed_out, default=0)
    reissued: list[int] = []
    for _ in range(2):
        job = run_command(survivor, {"type": "conversation_begin", "conversation_id": cid})["job"]
        stage = run_command(survivor, {"type": "conversation_prepare_stage", "conversation_id": cid, "job": job,
                                       "values": [CALL, CALL]})
        reissued += [c["tool_call_id"]["sequence"] for c in stage["tool_calls"]]
        run_command(survivor, {"type": "conversation_fail", "conversation_id": cid, "job": job, "message": "x"})
        run_command(survivor, {"type": "conversation_recover", "conversation_id": cid, "force": True})
    assert not set(reissued) & set(handed_out)
    assert reissued == list(range(max(handed_out, default=0) + 1, max(handed_out, default=0) + 5))


def test_a_stage_lost_before_it_is_saved_hands_out_nothing(app, do, reopen, monkeypatch):
    """Crash between deciding a stage and saving it: the handler never returns, so no id was handed
    out, and the store holds no trace of the stage."""
    cid = start(do)
    op(do, cid, "arrive", arrival={"type": "user", "text": "ask"})
    op(do, cid, "begin")

    def crash(*_: Any, **__: Any) -> Any:
        raise SystemExit("power cut")

    monkeypatch.setattr(app, "save", crash)
    with pytest.raises(SystemExit):
        op(do, cid, "prepare_stage", job=1, values=[CALL])
    survivor = reopen()
    assert stored_ids(survivor, cid) == []
    assert conv.load_conversation(survivor, UUID(cid)).state.sequence == 0


# -- concurrency ----------------------------------------------------------------------------------------

def test_concurrent_stages_get_distinct_ids(do, reopen):
    cid = start(do)
    op(do, cid, "arrive", arrival={"type": "user", "text": "ask"})
    op(do, cid, "begin")
    apps = [reopen() for _ in range(4)]
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def stage(app: Any) -> None:
        try:
            for _ in range(3):
                r = run_command(app, {"type": "conversation_prepare_stage", "conversation_id": cid, "job": 1,
                                      "values": [CALL, CALL]})
                results.append([c["tool_call_id"]["sequence"] for c in r["tool_calls"]])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=stage, args=(a,)) for a in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    allocated = sorted(i for ids in results for i in ids)
    assert allocated == list(range(1, 25))
    assert stored_ids(apps[0], cid) == allocated


# -- command messages -----------------------------------------------------------------------------------

def test_command_types_and_shapes():
    tags = [cls.__struct_config__.tag for cls in conv.CONVERSATION_COMMANDS]
    assert tags == ["conversation_start", "conversation_arrive", "conversation_begin", "conversation_prepare_stage",
                    "conversation_prepare_steer", "conversation_validate_steer", "conversation_commit_steer",
                    "conversation_complete", "conversation_fail", "conversation_restart", "conversation_recover"]
    with pytest.raises(msgspec.ValidationError):
        decode({"type": "conversation_begin", "conversation_id": str(uuid4()), "bogus": 1})
    with pytest.raises(msgspec.ValidationError):
        decode({"type": "conversation_start", "session": "not-hex"})
    cmd = decode({"type": "conversation_complete", "conversation_id": str(uuid4()), "job": 1,
                  "items": [{"type": "text", "text": "a"}, {"type": "box", "value": {"type": "history", "item": {}}}]})
    assert len(cmd.items) == 2
