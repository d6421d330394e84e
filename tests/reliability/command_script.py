"""A command script that writes with every command type, and the tools to compare two runs of it.

``script(tag)`` returns the steps of one organization's life: catalog and deployment commands, two chats
(a root and its child) taken through every chat command, tool-call executions on the root's calls, a
conversation through every conversation command, and a legal hold and a retention policy (every command but
``erase_subject``, which needs a sealed ledger: ``NEEDS_SEALING``). Ids are derived from ``tag``, so scripts of different
tags touch different streams (only the deployment is shared). A step is a command object, or a function
of the results so far that returns one (a conversation steer carries the token a previous command
returned). ``keyed`` gives every command an idempotency key.

``normalized_log`` is a store's whole log with the parts that differ between two runs of one script
taken out (times), for comparing a faulty run with a fault-free one.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Callable

from tests.chat.helpers import OWNER, RUNNER, WORKER

Step = dict[str, Any] | Callable[[list[Any]], dict[str, Any]]

NAMESPACE = uuid.UUID("6f1d2c3b-4a59-4e7d-8c6b-5a4f3e2d1c0b")
OTHER_USER = "5b1d7e9a-2c4f-4a6b-9d8e-00000000a12d"
SESSION = "00112233445566778899aabb"
CALL = {"type": "call", "name": "ls", "arguments": "{}"}


#: command types the script cannot run, and why: they need a ledger opened with a master key (tests/privacy)
NEEDS_SEALING = frozenset({"erase_subject"})


def ids(tag: str, *names: str) -> list[str]:
    return [str(uuid.uuid5(NAMESPACE, f"{tag}/{name}")) for name in names]


def _assistant(*parts: dict[str, Any], **fields: Any) -> list[dict[str, Any]]:
    return [{"role": "assistant", "parts": list(parts), **fields}]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "tool-call", "tool_call_id": call_id, "tool_name": name, "args": {"path": "a.py"}}


def _result(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "tool-result", "tool_call_id": call_id, "tool_name": name, "result": {"ok": True}}


def _steer_of(results: list[Any]) -> dict[str, Any]:
    """The token of the latest ``conversation_prepare_steer`` result."""
    for outcome, value in reversed(results):
        if outcome == "ok" and "steer" in value and value["steer"] is not None:
            return value["steer"]
    raise AssertionError("no steer prepared before this step")


def script(tag: str, dynamic: bool = True) -> list[Step]:
    """The steps (see the module docstring); ``dynamic=False`` leaves out the conversation's steer (its
    token is an earlier result), for a command file written in advance."""
    org, m1, m2, m3, root, child, conversation = ids(tag, "org", "m1", "m2", "m3", "root", "child", "conv")
    # the deployment is one stream for every script: each tag sets its own values
    n = int(uuid.UUID(org)) % 1000

    def on(chat: str, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "chat_id": chat, **fields}

    def call(kind: str, call_id: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "chat_id": root, "assistant_message_id": 2, "tool_call_id": call_id, **fields}

    def conv(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": f"conversation_{kind}", "conversation_id": conversation, **fields}

    catalog: list[Step] = [
        {"type": "add_organization_member", "organization_id": org, "user_id": OWNER},
        {"type": "add_organization_member", "organization_id": org, "user_id": OTHER_USER},
        {"type": "remove_organization_member", "organization_id": org, "user_id": OTHER_USER},
        {"type": "create_model_config", "organization_id": org, "model_config_id": m1, "provider": "openai",
         "model": "gpt-5", "context_limit": 200_000, "is_default": True},
        {"type": "create_model_config", "organization_id": org, "model_config_id": m2, "provider": "anthropic",
         "model": "claude", "context_limit": 100_000},
        {"type": "create_model_config", "organization_id": org, "model_config_id": m3, "provider": "openai",
         "model": "gpt-4", "context_limit": 8_000},
        {"type": "update_model_config", "organization_id": org, "model_config_id": m2, "display_name": "Claude"},
        {"type": "delete_model_config", "organization_id": org, "model_config_id": m3},
        {"type": "set_default_model_config", "organization_id": org, "model_config_id": m2},
        {"type": "set_provider", "organization_id": org, "provider": "anthropic", "enabled": True,
         "credentials_available": True},
        {"type": "set_admin_model_override", "organization_id": org, "context": "explore", "model_config_id": m1},
        {"type": "set_deployment_settings", "personal_model_overrides_enabled": True,
         "advisor_max_uses_per_turn": n},
        {"type": "set_user_model_override", "organization_id": org, "user_id": OWNER, "context": "root",
         "mode": "model", "model_config_id": m1},
    ]
    chats: list[Step] = [
        {"type": "create_chat", "organization_id": org, "owner_id": OWNER, "chat_id": root, "text": "hello",
         "dynamic_tools": ["ask_user"]},
        {"type": "create_chat", "organization_id": org, "owner_id": OWNER, "chat_id": child, "parent_chat_id": root,
         "text": "sub task"},
        on(root, "acquire", worker_id=WORKER, runner_id=RUNNER),
        on(root, "record_generation_attempt"),
        on(root, "record_retry_state", retry_state={"attempt": 1, "delay_ms": 250}),
        on(root, "commit_step", messages=_assistant(_text("looking"), _call("c1", "execute"), _call("c2", "execute"))),
        call("claim_tool_call", "c1", tool_name="execute"),
        call("record_tool_call_process", "c1", claim_epoch=1, process_id="proc-1"),
        call("record_tool_call_response", "c1", status=200, body='{"exit_code": 0}'),
        call("cancel_tool_call", "c2"),
        on(root, "commit_step", messages=[{"role": "tool", "parts": [_result("c1", "execute"),
                                                                      _result("c2", "execute")]}]),
        on(root, "send_message", text="queued one"),
        on(root, "send_message", text="queued two", model_config_id=m1),
        on(root, "edit_queued_message", queued_message_id=1, text="queued one, edited", editing=True),
        on(root, "edit_queued_message", queued_message_id=1, editing=False),
        on(root, "promote_queued_message", queued_message_id=2),
        on(root, "finish_interruption"),
        on(root, "delete_queued_message", queued_message_id=1),
        on(root, "commit_step", messages=_assistant(_text("asking"), _call("d1", "ask_user"))),
        on(root, "enter_requires_action"),
        on(root, "complete_requires_action", results=[{"tool_call_id": "d1", "output": '"yes"'}]),
        on(root, "commit_step", messages=_assistant(_call("d2", "ask_user"))),
        on(root, "enter_requires_action"),
        on(root, "cancel_requires_action"),
        on(root, "send_message", text="stop and do this", busy_behavior="interrupt"),
        on(root, "finish_interruption", partial_messages=_assistant(_text("partial"))),
        on(root, "interrupt", reason="user stop"),
        on(root, "finish_interruption"),
        on(root, "clear_context"),
        on(root, "fail_idle", error="worker lost"),
        on(root, "send_message", text="again"),
        on(root, "commit_step", messages=_assistant(_text("answer"))),
        on(root, "finish_error", error={"message": "provider down"}),
        on(root, "request_compaction"),
        on(root, "commit_step", messages=_assistant(_text("summary"), compressed=True),
           consume_compaction_request=True),
        on(root, "finish_turn"),
        on(root, "edit_message", message_id=1, text="hello, edited"),
        on(root, "acquire", worker_id=WORKER, runner_id=RUNNER),
        on(root, "abandon"),
        on(root, "set_title", title="the root chat"),
        on(root, "set_plan_mode", plan_mode="plan"),
        on(root, "pin_chat"),
        on(root, "unpin_chat"),
        on(root, "set_workspace_binding", workspace_id=WORKER, agent_id=RUNNER),
        on(root, "share_chat"),
        on(root, "unshare_chat"),
        on(root, "set_labels", labels={"env": "prod"}),
        on(root, "finish_turn"),
        on(child, "finish_turn"),
        on(root, "set_archived", archived=True),
        on(root, "set_archived", archived=False),
        on(root, "end_chat", prefix_messages=_assistant(_text("bye"))),
    ]
    conversation_steps: list[Step] = [
        conv("start", session=SESSION),
        conv("arrive", arrival={"type": "user", "text": "ask"}),
        conv("begin"),
        conv("prepare_stage", job=1, text="thinking", values=[CALL, CALL]),
        conv("arrive", arrival={"type": "tool_return", "result": "files",
                                "tool_call_id": {"session": SESSION, "sequence": 1}}),
    ]
    steer: list[Step] = [
        conv("prepare_steer", job=1),
        lambda results: conv("validate_steer", steer=_steer_of(results)),
        lambda results: conv("commit_steer", steer=_steer_of(results)),
    ]
    rest: list[Step] = [
        conv("arrive", arrival={"type": "user", "text": "one more thing"}),
        conv("complete", job=1, text="here you go"),
        conv("begin"),
        conv("fail", job=2, message="provider down", restartable_before_launch=True),
        conv("restart"),
        conv("begin"),
        conv("prepare_stage", job=3, values=[CALL]),
        conv("fail", job=3, message="boom"),
        conv("recover", force=True),
    ]
    # people's data (erase_subject needs a sealed ledger, which these runs are not: tests/privacy run it)
    protection: list[Step] = [
        {"type": "set_legal_hold", "target": root, "hold": True, "reason": "litigation"},
        {"type": "set_legal_hold", "target": root, "hold": False, "reason": "settled"},
        {"type": "set_retention_policy", "organization_id": org, "content_days": 30 + n},
    ]
    return catalog + chats + conversation_steps + (steer if dynamic else []) + rest + protection


def with_key(command: dict[str, Any], key: str) -> dict[str, Any]:
    return {**command, "idempotency_key": key}


#: RFC 3339 times as the codec writes them
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?$")


#: fields that hold a duration read from the clock (tool-call executions: wall time, what is left of a timeout)
_DURATIONS = frozenset({"wall_duration_ms", "remaining_ms"})


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "<duration>" if k in _DURATIONS and v is not None else _untimed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    if isinstance(value, str) and _TIME.match(value):
        return "<time>"
    return value


def untimed(value: Any) -> Any:
    """``value`` with every time in it replaced by ``"<time>"`` (and every clock-read duration by
    ``"<duration>"``): two ledgers that ran the same commands at other times differ there and nowhere else."""
    return _untimed(value)


def normalized_log(app: Any) -> list[tuple[str, int, str, Any]]:
    """Every stored event in notification order: stream, version, topic and the payload without times."""
    log = []
    for n in app.notifications(0, 1_000_000):
        log.append((str(n.originator_id), n.originator_version, n.topic, untimed(json.loads(n.state))))
    return log
