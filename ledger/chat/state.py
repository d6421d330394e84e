"""The chat's compact state: what decisions need, not a copy of every message body.

Message bodies live in the events; the state keeps, per message, its role, flags, turn and the tool-call
ids it carries, which is what queue, cancellation and tool-result rules read. ``ChatState`` is a mutable
Struct: ``evolve`` updates it in place (linear replay); two states compare with ``==``.

Queue editing (docs/chatd.md §4.1, the ``editing_since`` design): at most one queued prompt is
under edit (its ``QueuedPrompt.editing_since`` is set). A head under edit is never promoted:
a busy or error chat whose *head* is under edit classifies as E1P/R1P/I1P/A1P (XE1P archived), and a turn
that ends at such a head leaves the chat ``paused`` (P, idle like W). A row under edit behind the head
changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence
from uuid import UUID

import msgspec

from ledger.chat.index import MessageIndex
from ledger.chat.messageinfo import MessageInfo, ToolCall
from ledger.chat.values import ChatError, QueuedPrompt


class ChatState(msgspec.Struct, kw_only=True):
    chat_id: UUID
    organization_id: UUID
    owner_id: UUID
    parent_chat_id: UUID | None
    root_chat_id: UUID
    title: str
    created_at: datetime
    children: list[UUID] = msgspec.field(default_factory=list)
    status: str = "running"
    archived: bool = False
    worker_id: UUID | None = None
    runner_id: UUID | None = None
    last_error: ChatError | None = None
    retry_state: dict[str, Any] | None = None
    requires_action_deadline_at: datetime | None = None
    compaction_requested_at: datetime | None = None
    hook_allowed_tools: list[str] | None = None
    dynamic_tools: list[str] = msgspec.field(default_factory=list)
    model_config_id: UUID | None = None
    turn_id: UUID | None = None
    generation_attempt: int = 0
    history_version: int = 0
    queue_version: int = 0
    #: one ``MessageInfo`` per message, in chunks (``ledger.chat.index``): a list to every reader
    messages: MessageIndex = msgspec.field(default_factory=MessageIndex)
    queue: list[QueuedPrompt] = msgspec.field(default_factory=list)
    next_queued_message_id: int = 1
    idempotency: dict[str, list[int]] = msgspec.field(default_factory=dict)
    #: chat metadata (docs/commands.md, "Chat metadata"): plan mode, pin, workspace binding, sharing, labels
    title_source: str = "fallback"
    plan_mode: str | None = None
    pinned_at: datetime | None = None
    workspace_id: UUID | None = None
    build_id: UUID | None = None
    agent_id: UUID | None = None
    shared: bool = False
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    #: the files the chat's messages link, first link first (chatd's chat_file_links: links outlive edits)
    attachments: list[str] = msgspec.field(default_factory=list)
    version: int = 0
    updated_at: datetime | None = None

    @property
    def next_message_id(self) -> int:
        return len(self.messages) + 1

    @property
    def execution_state(self) -> str:
        return classify(self.status, bool(self.queue), self.archived, self.head_under_edit)

    @property
    def head_under_edit(self) -> bool:
        """The queue head is under edit (chatd's ``queuePaused``)."""
        q = self.queue
        return bool(q) and q[0].editing_since is not None

    @property
    def editing_queued_message_id(self) -> int | None:
        """The queued prompt under edit (at most one), or None."""
        for q in self.queue:
            if q.editing_since is not None:
                return q.queued_message_id
        return None

    @property
    def owned(self) -> bool:
        return self.worker_id is not None


def classify(status: str, queue_nonempty: bool, archived: bool, head_under_edit: bool = False) -> str:
    """chatd's ClassifyExecutionState (the "1P" classifier): status + queue + archived + whether the
    queue head is under edit -> W, E0 ... XE1P, P, or Invalid.

    Invalid: waiting with a queue; ``paused`` without rows, with a head not under edit, or archived;
    archived busy statuses; any other status."""
    digit = ("1P" if head_under_edit else "1") if queue_nonempty else "0"
    if archived:
        if status == "waiting" and not queue_nonempty:
            return "XW"
        if status == "error":
            return "XE" + digit
        return "Invalid"
    if status == "waiting":
        return "Invalid" if queue_nonempty else "W"
    if status == "paused":
        return "P" if queue_nonempty and head_under_edit else "Invalid"
    prefix = {"error": "E", "running": "R", "interrupting": "I", "requires_action": "A"}.get(status)
    return prefix + digit if prefix else "Invalid"


VALID_STATES = ("W", "E0", "E1", "E1P", "R0", "R1", "R1P", "I0", "I1", "I1P", "A0", "A1", "A1P", "P",
                "XW", "XE0", "XE1", "XE1P")

_STATUS_OF = {"W": "waiting", "E": "error", "R": "running", "I": "interrupting", "A": "requires_action (waiting "
              "for client tool results)", "P": "paused (the queue head is being edited)"}


def describe_state(code: str) -> str:
    """What an execution-state code means, for people: ``R1`` is "running, prompts queued"."""
    archived = code.startswith("X")
    rest = code[1:] if archived else code
    if rest not in {c.lstrip("X") for c in VALID_STATES}:
        return "invalid (status, queue and archived flag do not fit together; `chat reconcile` repairs it)"
    words = [_STATUS_OF[rest[0]]]
    if rest[1:2] == "0":
        words.append("queue empty")
    elif rest[1:2] == "1":
        words.append("prompts queued" + ("; the head is being edited" if rest.endswith("P") else ""))
    if archived:
        words.append("archived")
    return ", ".join(words)


def state_legend() -> list[dict[str, str]]:
    """Every valid execution-state code with its meaning (``chat-ledger states``)."""
    return [{"execution_state": c, "meaning": describe_state(c)} for c in VALID_STATES]


# -- queries over the message index ------------------------------------------------------------------

def active(m: MessageInfo) -> bool:
    return not m.deleted and not m.compressed


def model_output(m: MessageInfo) -> bool:
    """An active assistant message the model wrote (a structured-output receipt is not)."""
    return m.role == "assistant" and not m.deleted and not m.compressed and not m.receipt


def last_assistant_index(state: ChatState) -> int:
    return _last_assistant(state.messages)


def _last_assistant(msgs: Sequence[MessageInfo]) -> int:
    i = len(msgs)
    for m in reversed(msgs):  # (backward iteration: an index reads its chunks only as far as the scan goes)
        i -= 1
        if model_output(m):
            return i
    return -1


def outstanding_tool_calls(state: ChatState, dynamic_only: bool = False,
                           count_own_results: bool = True,
                           messages: Sequence[MessageInfo] | None = None) -> list[ToolCall]:
    """Tool calls of the latest active assistant message with no result yet (docs/chatd.md §5.1).

    Provider-executed calls never count. A result counts when it is in a later active ``tool`` message
    (or, with ``count_own_results``, inside the assistant message itself — the state machine's rule).
    """
    _, calls = _latest_assistant_calls(state.messages if messages is None else messages, count_own_results)
    if dynamic_only:
        dynamic = state.dynamic_tools
        return [c for c in calls if c.tool_name in dynamic]
    return calls


def unresolved_tool_calls(state: ChatState) -> tuple[MessageInfo | None, list[ToolCall]]:
    """The latest active assistant message and its unresolved calls, by GEN's rule (docs/chatd.md §5.1):
    results inside the assistant message itself do not count (``outstanding_tool_calls`` with
    ``count_own_results=False``, and the message too)."""
    return _latest_assistant_calls(state.messages, count_own_results=False)


def _latest_assistant_calls(msgs: Sequence[MessageInfo], count_own_results: bool) -> tuple[MessageInfo | None,
                                                                                       list[ToolCall]]:
    """The latest active assistant message and its calls without a result, in one backward pass."""
    answered: set[str] = set()
    for m in reversed(msgs):
        if m.deleted or m.compressed or m.receipt:
            continue
        if m.role == "tool" or (m.role == "assistant" and count_own_results):
            for r in m.results:
                answered.add(r.tool_call_id)
        if m.role == "assistant":
            return m, [c for c in m.calls if not c.provider_executed and c.tool_call_id not in answered]
    return None, []


def latest_boundary_index(state: ChatState) -> int:
    i = len(state.messages)
    for m in reversed(state.messages):
        i -= 1
        if m.boundary and not m.deleted:
            return i
    return -1


def has_compactable_history(state: ChatState) -> bool:
    """An uncompressed, non-deleted assistant message exists after the latest context boundary."""
    b = latest_boundary_index(state)
    return any(model_output(m) for m in state.messages[b + 1:])


def has_clearable_history(state: ChatState) -> bool:
    """An active model-visible non-system message exists after the latest context boundary."""
    b = latest_boundary_index(state)
    return any(active(m) and m.role != "system" and m.visibility != "user" for m in state.messages[b + 1:])
