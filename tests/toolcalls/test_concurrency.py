"""Run-once under real concurrency on PostgreSQL: claims of one tool call from several threads and several
processes (each with its own application and connection pool) yield exactly one ``run``; a cancel racing
a claim yields one of the two truthful outcomes, never both."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from typing import Any

import pytest

from commands.handler import command_from_dict, execute
from ledger.errors import LedgerError
from ledger.store import open_app
from tests.chat.helpers import setup_org
from tests.toolcalls.helpers import call_command, new_chat

BARRIER_TIMEOUT = 60


def _attempt(url: str, command: dict[str, Any], barrier: Any, open_lock: Any) -> dict[str, Any]:
    """Open an application, wait for every contender, run ``command``; the result or the refusal.

    Applications are opened one at a time: concurrent first opens of one PostgreSQL schema can fail in
    the DDL (``tuple concurrently updated``), which is not what these tests are about."""
    try:
        with open_lock:
            app = open_app(url)
    except BaseException:
        barrier.abort()
        raise
    try:
        barrier.wait(BARRIER_TIMEOUT)
        try:
            return {"ok": True, "result": execute(app, command_from_dict(command))}
        except LedgerError as e:
            return {"ok": False, "code": e.code}
    finally:
        app.close()


def _process_main(index: int, url: str, command: dict[str, Any], barrier: Any, open_lock: Any, out: Any) -> None:
    try:
        out.put((index, _attempt(url, command, barrier, open_lock)))
    except BaseException as e:  # report, so the parent never waits on a silent child
        out.put((index, {"ok": False, "code": f"crash: {e!r}"}))


def _race(url: str, commands: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Run each (``thread`` | ``process``, command) at once, released together by one barrier; the
    results in command order."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(commands))
    open_lock = ctx.Lock()
    out = ctx.Queue()
    results: dict[int, dict[str, Any]] = {}
    workers: list[Any] = []
    for index, (where, command) in enumerate(commands):
        if where == "process":
            workers.append(ctx.Process(target=_process_main, daemon=True,
                                       args=(index, url, command, barrier, open_lock, out)))
        else:
            def target(index: int = index, command: dict[str, Any] = command) -> None:
                results[index] = _attempt(url, command, barrier, open_lock)
            workers.append(threading.Thread(target=target, daemon=True))
    for w in workers:
        w.start()
    for w in workers:
        w.join(BARRIER_TIMEOUT * 2)
    for _ in range(sum(1 for w in workers if not isinstance(w, threading.Thread))):
        index, result = out.get(timeout=BARRIER_TIMEOUT)
        results[index] = result
    assert sorted(results) == list(range(len(commands))), results
    return [results[i] for i in range(len(commands))]


@pytest.fixture
def pg_chat(pg_url: str) -> tuple[str, str]:
    app = open_app(pg_url)
    try:
        setup_org(app)
        chat_id = new_chat(app, *[(f"c{i}", "execute") for i in range(1, 7)])
    finally:
        app.close()
    return pg_url, chat_id


def test_concurrent_claims_from_threads_and_processes_run_once(pg_chat):
    url, chat_id = pg_chat
    claim = call_command("claim_tool_call", chat_id, "c1", tool_name="execute")
    results = _race(url, [("thread", claim)] * 6 + [("process", claim)] * 4)
    assert all(r["ok"] for r in results), results
    outcomes = sorted(r["result"]["outcome"] for r in results)
    assert outcomes == ["run"] + ["saved"] * 9
    assert sorted(r["result"]["claim_epoch"] for r in results) == list(range(1, 11))
    app = open_app(url)
    try:
        execution_id = uuid.UUID(results[0]["result"]["execution_id"])
        claims = [e for e in app.stream(execution_id) if type(e).__name__ == "ToolCallClaimed"]
        assert [c.outcome for c in claims] == ["run"] + ["saved"] * 9
    finally:
        app.close()


def test_a_cancel_racing_a_claim_gives_one_truthful_outcome(pg_chat):
    url, chat_id = pg_chat
    seen: set[str] = set()
    for i in range(2, 7):
        claim = call_command("claim_tool_call", chat_id, f"c{i}", tool_name="execute")
        cancel = call_command("cancel_tool_call", chat_id, f"c{i}")
        claimed, canceled = _race(url, [("thread", claim), ("thread", cancel)])
        assert canceled["ok"], canceled
        if claimed["ok"]:  # the claim won: it runs, and the cancel says it was received and stopped it
            assert claimed["result"]["outcome"] == "run"
            assert (canceled["result"]["received"], canceled["result"]["outcome"]) == (True, "canceled_while_running")
            seen.add("claim first")
        else:  # the cancel won: nothing runs, and the cancel says so
            assert claimed["code"] == "tool_call_canceled"
            assert (canceled["result"]["received"], canceled["result"]["outcome"]) == (False, "not_run")
            seen.add("cancel first")
    assert seen  # at least one race ran; which side wins is up to the scheduler
