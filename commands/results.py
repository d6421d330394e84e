"""The typed results of the Python API (``chat_ledger.Ledger``): msgspec Structs with the fields of the
CLI's ``--json`` shapes (docs/commands.md, "CLI"), read-only, each with ``to_dict()`` for the plain JSON
form. Times are ISO 8601 strings as the JSON gives them; ids are strings. A field the shape may gain later is
kept out of the Struct's required fields (a default), so an old program keeps working on a newer ledger.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T", bound="Result")


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every typed result."""

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]

    @classmethod
    def of(cls: type[T], row: dict[str, Any]) -> T:
        """A result from its plain row (fields this version does not know are ignored)."""
        return msgspec.convert(row, cls, strict=False)


class ChatStatus(Result, frozen=True, kw_only=True):
    """A ``chat_status`` row: where a chat is."""

    chat_id: str
    organization_id: str
    owner_id: str
    parent_chat_id: str | None = None
    root_chat_id: str
    title: str
    status: str
    execution_state: str
    archived: bool
    queue_length: int
    editing_queued_message_id: int | None = None
    last_error: dict[str, Any] | None = None
    requires_action_deadline_at: str | None = None
    compaction_requested_at: str | None = None
    hook_allowed_tools: list[str] | None = None
    model_config_id: str | None = None
    turn_id: str | None = None
    generation_attempt: int = 0
    history_version: int = 0
    worker_id: str | None = None
    runner_id: str | None = None
    message_count: int = 0
    title_source: str = "fallback"
    plan_mode: str | None = None
    pinned_at: str | None = None
    workspace_id: str | None = None
    build_id: str | None = None
    agent_id: str | None = None
    shared: bool = False
    labels: dict[str, str] = {}
    version: int
    updated_at: str | None = None


class UnresolvedCall(Result, frozen=True, kw_only=True):
    """An open tool call of a chat's latest assistant message."""

    chat_id: str
    assistant_message_id: int
    tool_call_id: str
    tool_name: str
    kind: str  # local | dynamic
    execution_id: str | None = None
    args: Any = None
    since: str | None = None


class QueuedPrompt(Result, frozen=True, kw_only=True):
    """A queued prompt of a chat."""

    chat_id: str
    queued_message_id: int
    position: int
    created_by: str
    text: str
    turn_id: str
    hook_prefix: Any = None
    hook_allowed_tools: list[str] | None = None
    model_config_id: str | None = None
    reasoning_effort: str | None = None
    editing_since: str | None = None


class UsageSum(Result, frozen=True, kw_only=True):
    """Sums of messages' usage (``messages``: how many reported one)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0
    total_cost_micros: int = 0
    runtime_ms: int = 0
    messages: int = 0


class TurnUsage(UsageSum, frozen=True, kw_only=True):
    turn_id: str


class ChatUsage(Result, frozen=True, kw_only=True):
    total: UsageSum | None = None
    by_turn: list[TurnUsage] = []


class Message(Result, frozen=True, kw_only=True):
    """A message of a chat, as recorded (deleted ones included, marked)."""

    message_id: int
    role: str
    parts: list[dict[str, Any]]
    visibility: str
    turn_id: str | None = None
    created_by: str | None = None
    model_config_id: str | None = None
    deleted: bool = False
    compressed: bool = False
    created_at: str | None = None
    usage: dict[str, int] | None = None


class ChatView(Result, frozen=True, kw_only=True):
    """One chat whole (``show``): its status, every message, its queue, its open calls, its usage, and the
    model and executions as of the same log position."""

    chat: ChatStatus
    messages: list[Message]
    queue: list[QueuedPrompt]
    unresolved: list[UnresolvedCall]
    usage: ChatUsage = ChatUsage()
    facts_as_of: Any = None
    model: Any = None


class TimelineEntry(Result, frozen=True, kw_only=True):
    """One event of a stream's audit timeline, with the state after it."""

    version: int
    time: str | None
    type: str
    topic: str
    actor: str | None = None
    idempotency_key: str | None = None
    summary: str
    state: dict[str, Any]
    #: what a step's messages cost (only on events that recorded messages with usage)
    usage: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if out["usage"] is None:  # (as the timeline gives it: the key only where there is usage)
            del out["usage"]
        return out


class CommandResult(Result, frozen=True, kw_only=True):
    """What a command returned. The fields every chat command returns are typed; ``data`` holds the whole
    result as documented for its type (docs/commands.md: catalog and conversation commands return others)."""

    chat_id: str | None = None
    execution_state: str | None = None
    status: str | None = None
    version: int | None = None
    data: dict[str, Any]

    @classmethod
    def of(cls, row: dict[str, Any]) -> CommandResult:
        typed = {k: row.get(k) for k in ("chat_id", "execution_state", "status", "version")}
        return cls(**{k: v for k, v in typed.items() if isinstance(v, (str, int))}, data=dict(row))


class NextAction(Result, frozen=True, kw_only=True):
    """What a worker should do next for a chat (``next-action``): ``action`` and the whole decision."""

    action: str | None = None
    fence: dict[str, Any] | None = None
    data: dict[str, Any]

    @classmethod
    def of(cls, row: dict[str, Any]) -> NextAction:
        return cls(action=row.get("action"), fence=row.get("fence"), data=dict(row))


class ModelsView(Result, frozen=True, kw_only=True):
    """An organization's model view (``models``)."""

    organization_id: str
    default_model_config_id: str | None = None
    configs: list[dict[str, Any]] = []
    admin_overrides: Any = None
    data: dict[str, Any]

    @classmethod
    def of(cls, row: dict[str, Any]) -> ModelsView:
        return cls(organization_id=row["organization_id"], default_model_config_id=row.get("default_model_config_id"),
                   configs=row.get("configs") or [], admin_overrides=row.get("admin_overrides"), data=dict(row))
