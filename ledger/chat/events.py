"""Chat events: fine-grained facts in the past tense, each with a stable topic.

An event carries what an auditor needs without re-running code: the messages it inserted (with their
ids and turn ids), the queued prompt it promoted with the prefix inserted and the tool policy before and
after narrowing, the cancellation reason. ``evolve`` (ledger/chat/evolve.py) gives each its effect.
Schema changes bump ``class_version`` and add an ``upcast_vN_vN+1`` static method (docs/schema-changes.md).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

from ledger.base import LedgerCreated, LedgerEvent
from ledger.catalog.values import EffortLevel, ModelResolution
from ledger.chat.values import AttemptSettings, ChatError, Fence, Message, Part, QueuedPrompt
from ledger.privacy import under


class ChatEvent(LedgerEvent):
    abstract: ClassVar[bool] = True


class WorkerEvent(ChatEvent):
    """An event a worker command records: which generation attempt and which runner it belongs to (the
    chat's when the command ran; None on events recorded before these fields existed, and ``runner_id``
    None when the chat was not owned), and the ``fence`` the command was given (None: no fence)."""

    abstract: ClassVar[bool] = True
    generation_attempt: int | None = dataclasses.field(default=None, kw_only=True)
    runner_id: UUID | None = dataclasses.field(default=None, kw_only=True)
    fence: Fence | None = dataclasses.field(default=None, kw_only=True)


class ChatCreated(LedgerCreated, ChatEvent):
    """A chat was created with its first messages (CreateChat: N -> R0, or W with initial status waiting).

    ``model_resolution`` records how ``model_config_id`` was chosen (explicit, the owner's personal
    override, the organization's default, the parent's model, or a fallback and why).
    """

    TOPIC = "chat-ledger:chat.ChatCreated"
    organization_id: UUID
    owner_id: UUID
    parent_chat_id: UUID | None
    root_chat_id: UUID
    title: str
    status: Literal["running", "waiting"]
    turn_id: UUID
    messages: list[Message]
    model_config_id: UUID | None
    hook_allowed_tools: list[str] | None
    dynamic_tools: list[str]
    model_resolution: ModelResolution | None = None
    #: ``user`` (given with the command) or ``fallback`` (derived from the first message); None on chats
    #: recorded before the field existed (the fold tells them apart by comparing with the derived title)
    title_source: Literal["user", "fallback"] | None = None
    #: the deployment limits this decision applied, with their values then (docs/commands.md, "Limits"); None
    #: on events recorded before limits existed (the defaults applied)
    limits: dict[str, int] | None = None


class ChildChatCreated(ChatEvent):
    """A child chat (subagent) was created under this chat."""

    TOPIC = "chat-ledger:chat.ChildChatCreated"
    child_chat_id: UUID


class TitleSet(ChatEvent):
    """``source``: ``user`` (a person set it) or ``generated`` (an automatic title); None on titles recorded
    before the field existed (set by a person: ``user``)."""

    TOPIC = "chat-ledger:chat.TitleSet"
    title: str
    source: Literal["user", "generated"] | None = None


class PlanModeSet(ChatEvent):
    """The chat's plan mode (``plan``) or none (None): in a plan turn ``propose_plan`` ends the turn and the
    advisor is not offered (docs/chatd.md §7)."""

    TOPIC = "chat-ledger:chat.PlanModeSet"
    class_version: ClassVar[int] = 1
    plan_mode: Literal["plan"] | None


class PinSet(ChatEvent):
    """Pinned (``pinned``) or unpinned. Pins are ordered by when they were made (this event's time): a new
    pin goes last, as chatd appends it. Archiving resets the pin."""

    TOPIC = "chat-ledger:chat.PinSet"
    class_version: ClassVar[int] = 1
    pinned: bool


class WorkspaceBound(ChatEvent):
    """The workspace, build and agent the chat runs in (Coder's ids, recorded as given; None clears)."""

    TOPIC = "chat-ledger:chat.WorkspaceBound"
    class_version: ClassVar[int] = 1
    workspace_id: UUID | None
    build_id: UUID | None = None
    agent_id: UUID | None = None


class SharingSet(ChatEvent):
    """A root chat shared read-only with its organization's members (``shared``), or no longer; its
    children are shared with it."""

    TOPIC = "chat-ledger:chat.SharingSet"
    class_version: ClassVar[int] = 1
    shared: bool


class LabelsSet(ChatEvent):
    """The chat's labels after the change (the whole map)."""

    TOPIC = "chat-ledger:chat.LabelsSet"
    class_version: ClassVar[int] = 1
    labels: dict[str, str]


class TurnStarted(ChatEvent):
    """A user prompt was inserted directly (send from W/E0, or an edit) and the chat runs.

    ``messages`` = hook prefix messages, the prompt, then any suffix messages, in insertion order.
    ``hook_allowed_tools`` is the incoming hook policy; ``tool_policy_before``/``tool_policy`` the chat's
    policy before and after narrowing. ``model_config_id`` is the explicitly chosen model (None keeps the
    chat's); ``model_resolution`` records the model the turn runs on and how it was chosen.
    """

    TOPIC = "chat-ledger:chat.TurnStarted"
    cause: Literal["send", "edit"]
    turn_id: UUID
    prompt_message_id: int
    messages: list[Message]
    hook_allowed_tools: list[str] | None
    tool_policy_before: list[str] | None
    tool_policy: list[str] | None
    model_config_id: UUID | None
    model_resolution: ModelResolution | None = None
    #: the deployment limits this decision applied, with their values then (docs/commands.md, "Limits"); None
    #: on events recorded before limits existed (the defaults applied)
    limits: dict[str, int] | None = None


class MessageEdited(ChatEvent):
    """A user message was edited: it and every later message were soft-deleted, the queue was cleared.

    The replacement prompt follows in a ``TurnStarted`` with cause "edit".
    """

    TOPIC = "chat-ledger:chat.MessageEdited"
    edited_message_id: int
    deleted_message_ids: list[int]
    deleted_queued_message_ids: list[int]


class PromptQueued(ChatEvent):
    """A user prompt was queued behind the running turn, with its hook prefix and tool policy."""

    TOPIC = "chat-ledger:chat.PromptQueued"
    prompt: QueuedPrompt
    #: the deployment limits this decision applied, with their values then (docs/commands.md, "Limits"); None
    #: on events recorded before limits existed (the defaults applied)
    limits: dict[str, int] | None = None


class QueuedPromptDeleted(ChatEvent):
    TOPIC = "chat-ledger:chat.QueuedPromptDeleted"
    queued_message_id: int


class QueuedPromptMovedToHead(ChatEvent):
    """A queued prompt was moved to the head of the queue (``position`` = the old minimum - 1)."""

    TOPIC = "chat-ledger:chat.QueuedPromptMovedToHead"
    queued_message_id: int
    position: int


class QueuedPromptPromoted(ChatEvent):
    """The queue head became the next turn's prompt: its hook prefix (stamped with its turn id) and the
    prompt were inserted, its tool policy applied, its row deleted; the chat runs.

    The prompt's model is re-resolved at promotion (docs/chatd.md §6.3): ``model_config_id`` is the model the
    turn runs on (the chat's model from now on) and ``model_resolution`` how it was chosen — the queued
    model (or the chat's) when usable in the chat's organization, else the organization's usable default
    with the reason.
    """

    TOPIC = "chat-ledger:chat.QueuedPromptPromoted"
    class_version: ClassVar[int] = 2
    queued_message_id: int
    turn_id: UUID
    prompt_message_id: int
    messages: list[Message]
    hook_allowed_tools: list[str] | None
    tool_policy_before: list[str] | None
    tool_policy: list[str] | None
    model_config_id: UUID | None
    model_resolution: ModelResolution | None = None
    #: v2: the reasoning effort the prompt carries into history (an ``edit_queued_message`` override);
    #: None: the chat's
    reasoning_effort: EffortLevel | None = None

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        # v1 could not queue a prompt with a reasoning effort: it carried none.
        state["reasoning_effort"] = None


class QueuedPromptEdited(ChatEvent):
    """The content of a queued prompt was replaced (``edit_queued_message`` with content).

    ``model_config_id`` / ``reasoning_effort`` are the overrides the edit gave (validated; None keeps the
    prompt's). The hook prefix and tool policy the prompt was queued with are kept.
    """

    TOPIC = "chat-ledger:chat.QueuedPromptEdited"
    class_version: ClassVar[int] = 1
    queued_message_id: int
    parts: list[Part]
    model_config_id: UUID | None = None
    reasoning_effort: EffortLevel | None = None
    #: the deployment limits this decision applied, with their values then (docs/commands.md, "Limits"); None
    #: on events recorded before limits existed (the defaults applied)
    limits: dict[str, int] | None = None


class QueuedPromptEditBegun(ChatEvent):
    """The owner began editing a queued prompt (chatd's ``editing_since`` = this event's time). A prompt
    under edit is not promoted until its edit ends; at most one prompt of a chat is under edit (an edit
    begun on another one is ended first, ``QueuedPromptEditEnded`` with cause "moved")."""

    TOPIC = "chat-ledger:chat.QueuedPromptEditBegun"
    class_version: ClassVar[int] = 1
    queued_message_id: int


class QueuedPromptEditEnded(ChatEvent):
    """The edit of a queued prompt ended. ``cause``: "ended" (the owner ended it), "moved" (an edit began
    on another prompt), "promoted" (the prompt was sent now). Ending the edit of a paused chat's head
    ends the pause: a ``ChatResumed`` follows."""

    TOPIC = "chat-ledger:chat.QueuedPromptEditEnded"
    class_version: ClassVar[int] = 1
    queued_message_id: int
    cause: Literal["ended", "moved", "promoted"]


class ChatPaused(ChatEvent):
    """A turn (or an interruption) ended at a queue head under edit: nothing was promoted and the chat
    is ``paused`` (P) until that edit ends, the head is deleted or sent, or the history is edited."""

    TOPIC = "chat-ledger:chat.ChatPaused"
    class_version: ClassVar[int] = 1
    queued_message_id: int


class ChatResumed(ChatEvent):
    """A paused chat resumed. It follows the event that ended the pause, in the same command:
    ``cause`` "edit_ended" (the head's edit ended), "queued_deleted" (the head was deleted),
    "promoted" (a queued prompt was sent now), "message_edited" (a history edit cleared the queue).
    ``status``: ``running`` (the promotion of the ready head follows in the same command) or ``waiting``
    (no queued prompt is left). ``queued_message_id`` names the prompt the cause acted on."""

    TOPIC = "chat-ledger:chat.ChatResumed"
    class_version: ClassVar[int] = 1
    cause: Literal["edit_ended", "queued_deleted", "promoted", "message_edited"]
    status: Literal["running", "waiting"]
    queued_message_id: int | None = None


class OwnershipCleared(ChatEvent):
    """An idle chat (W, E0, E1, E1P or P) resumed into running while a worker owned it: the worker and
    runner are released, so that acquisition admits the chat again under the capacity cap (chatd's
    ``TestResumeFromIdleClearsOwnership``). Recorded last by the command that resumed the chat (a send,
    an edit, a queue promotion, the end of a pause); a resume from a busy state (R, I, A) keeps its owner.
    ``cause`` names that command; ``worker_id``/``runner_id`` are the owner released."""

    TOPIC = "chat-ledger:chat.OwnershipCleared"
    class_version: ClassVar[int] = 1
    cause: str
    worker_id: UUID
    runner_id: UUID | None


class InvalidStateReconciled(ChatEvent):
    """ReconcileInvalidState: a chat found in an invalid execution state (e.g. from an imported or
    legacy log) was put in the error state, unarchived, its queue (and the edit marker) kept.
    ``status_before``/``archived_before`` record the invalid shape it was in."""

    TOPIC = "chat-ledger:chat.InvalidStateReconciled"
    class_version: ClassVar[int] = 1
    last_error: ChatError
    status_before: str
    archived_before: bool


class ToolCallsCanceled(ChatEvent):
    """Synthetic error results were inserted for outstanding tool calls of the latest assistant message."""

    TOPIC = "chat-ledger:chat.ToolCallsCanceled"
    reason: str
    dynamic_only: bool
    messages: list[Message]


class InterruptRequested(ChatEvent):
    """Interrupt: a running chat starts interrupting; a chat requiring action runs again (its pending
    dynamic calls were canceled just before)."""

    TOPIC = "chat-ledger:chat.InterruptRequested"
    reason: str


class InterruptionFinished(WorkerEvent):
    """The interruption ended: partial output committed; waiting, unless a promotion follows."""

    TOPIC = "chat-ledger:chat.InterruptionFinished"
    messages: list[Message]
    unowned: bool = False
    #: the deployment limits this decision applied, with their values then (docs/commands.md, "Limits"); None
    #: on events recorded before limits existed (the defaults applied)
    limits: dict[str, int] | None = None


class TurnFinished(WorkerEvent):
    """The turn ended (terminal messages inserted); waiting, unless a promotion follows."""

    TOPIC = "chat-ledger:chat.TurnFinished"
    messages: list[Message]


class TurnFailed(WorkerEvent):
    """FinishError: the worker hit an unrecoverable error."""

    TOPIC = "chat-ledger:chat.TurnFailed"
    last_error: ChatError
    messages: list[Message]


class IdleChatFailed(ChatEvent):
    """FailIdle: a waiting chat was put in error (no runner ownership needed)."""

    TOPIC = "chat-ledger:chat.IdleChatFailed"
    last_error: ChatError


class RequiresActionEntered(WorkerEvent):
    """The chat waits for client results of its pending dynamic tool calls until ``deadline``."""

    TOPIC = "chat-ledger:chat.RequiresActionEntered"
    deadline: datetime
    tool_call_ids: list[str]


class ToolResultsSubmitted(ChatEvent):
    """CompleteRequiresAction: client results of the pending dynamic calls were inserted; the chat runs."""

    TOPIC = "chat-ledger:chat.ToolResultsSubmitted"
    messages: list[Message]
    #: the deployment limits this decision applied, with their values then (docs/commands.md, "Limits"); None
    #: on events recorded before limits existed (the defaults applied)
    limits: dict[str, int] | None = None


class RequiresActionCanceled(ChatEvent):
    """CancelRequiresAction (the deadline passed): pending dynamic calls were canceled; the chat runs."""

    TOPIC = "chat-ledger:chat.RequiresActionCanceled"
    reason: str


class CompactionRequested(ChatEvent):
    """Manual compaction was requested: one-shot marker set, history epoch granted, ownership released."""

    TOPIC = "chat-ledger:chat.CompactionRequested"


class ContextCleared(ChatEvent):
    """The context was cleared with a boundary triplet; the chat waits."""

    TOPIC = "chat-ledger:chat.ContextCleared"
    messages: list[Message]


class StepCommitted(WorkerEvent):
    """A generation step's messages were committed."""

    TOPIC = "chat-ledger:chat.StepCommitted"
    messages: list[Message]
    consumed_compaction_request: bool = False
    #: the deployment limits this decision applied, with their values then (docs/commands.md, "Limits"); None
    #: on events recorded before limits existed (the defaults applied)
    limits: dict[str, int] | None = None


class GenerationAttemptRecorded(ChatEvent):
    """A generation attempt began (``generation_attempt`` is its number). ``settings`` is what it ran with:
    the resolved model, the context limit, the compaction threshold and trigger limit, the advisor's
    eligibility and remaining uses, the offered tools — passed by the runner or resolved by the ledger at
    this position (None on attempts recorded before the field existed). ``runner_id`` the chat's runner,
    ``fence`` the fence the command was given."""

    TOPIC = "chat-ledger:chat.GenerationAttemptRecorded"
    generation_attempt: int
    settings: AttemptSettings | None = None
    runner_id: UUID | None = None
    fence: Fence | None = None


class RetryStateRecorded(WorkerEvent):
    TOPIC = "chat-ledger:chat.RetryStateRecorded"
    retry_state: dict[str, Any]


class ChatEnded(ChatEvent):
    """EndChat: prefix messages inserted, queue cleared, the chat archived and released."""

    TOPIC = "chat-ledger:chat.ChatEnded"
    messages: list[Message]
    deleted_queued_message_ids: list[int]
    cascaded_from: UUID | None = None
    cascaded_to: list[UUID] = dataclasses.field(default_factory=list)  # descendants ended with it


class ArchivedSet(ChatEvent):
    TOPIC = "chat-ledger:chat.ArchivedSet"
    archived: bool
    cascaded_from: UUID | None = None
    cascaded_to: list[UUID] = dataclasses.field(default_factory=list)  # family members changed with it


class ChatAcquired(ChatEvent):
    TOPIC = "chat-ledger:chat.ChatAcquired"
    worker_id: UUID
    runner_id: UUID


class ChatAbandoned(ChatEvent):
    TOPIC = "chat-ledger:chat.ChatAbandoned"


# -- people's data in these events (issue 28, point 1: ``ledger.privacy``, docs/privacy.md) ----------------------
#
# A message's content is its author's (``created_by``; a model's or tool's message: the chat owner's, as it answers
# the owner's request); titles, labels and error texts are the owner's. What the rules decide on (tool names, call
# ids, limits, policy, codes) is not personal: a decision re-decides the same once content was erased.

_PARTS: dict[str, str] = {"parts[].text": "author", "parts[].args": "author", "parts[].result": "author",
                          "parts[].value": "author", "parts[].error.message": "author", "parts[].file_id": "author"}
_PARTS_NOT: dict[str, str] = {
    "parts[].tool_call_id": "the provider's id of a call (the rules pair calls and results by it)",
    "parts[].tool_name": "a tool's name (the tool policy decides on it)", "parts[].media_type": "a MIME type",
    "parts[].error.code": "a structured-output error code"}
_LISTS_NOT = {"hook_allowed_tools": "tool names (policy)", "dynamic_tools": "tool names (policy)",
              "tool_policy_before": "tool names (policy)", "tool_policy": "tool names (policy)",
              "limits": "limit names and numbers", "tool_call_ids": "the provider's call ids"}


def _lists(cls: type) -> dict[str, str]:  # ``_LISTS_NOT``'s fields that ``cls`` has
    return {k: v for k, v in _LISTS_NOT.items() if k in cls.__dataclass_fields__}  # type: ignore[attr-defined]


_MESSAGES, _MESSAGES_NOT = under("messages[]", _PARTS), under("messages[]", _PARTS_NOT)
_ERROR, _ERROR_NOT = {"last_error.message": "owner"}, {"last_error.kind": "an error's kind (a code)"}
_REASON = {"reason": "owner"}  # a caller's free text: kept as personal

#: event class -> field path -> whose data it is (``ledger.privacy.Whose``)
PERSONAL: dict[type, dict[str, str]] = {
    ChatCreated: {"title": "owner", **_MESSAGES}, TitleSet: {"title": "owner"}, LabelsSet: {"labels": "owner"},
    TurnStarted: _MESSAGES, QueuedPromptPromoted: _MESSAGES, StepCommitted: _MESSAGES, TurnFinished: _MESSAGES,
    InterruptionFinished: _MESSAGES, ToolResultsSubmitted: _MESSAGES, ContextCleared: _MESSAGES,
    ChatEnded: _MESSAGES, ToolCallsCanceled: {**_MESSAGES, **_REASON}, TurnFailed: {**_MESSAGES, **_ERROR},
    IdleChatFailed: _ERROR, InvalidStateReconciled: _ERROR, InterruptRequested: _REASON,
    RequiresActionCanceled: _REASON,
    PromptQueued: {**under("prompt", _PARTS), **under("prompt.hook_prefix[]", _PARTS)},
    QueuedPromptEdited: _PARTS,  # the queued prompt's author's
}
#: event class -> text field path -> why it is not personal
NOT_PERSONAL: dict[type, dict[str, str]] = {
    ChatCreated: {**_MESSAGES_NOT, **_lists(ChatCreated)}, TurnStarted: {**_MESSAGES_NOT, **_lists(TurnStarted)},
    QueuedPromptPromoted: {**_MESSAGES_NOT, **_lists(QueuedPromptPromoted)}, StepCommitted: {**_MESSAGES_NOT, **_lists(StepCommitted)},
    TurnFinished: _MESSAGES_NOT, InterruptionFinished: {**_MESSAGES_NOT, **_lists(InterruptionFinished)},
    ToolResultsSubmitted: {**_MESSAGES_NOT, **_lists(ToolResultsSubmitted)}, ContextCleared: _MESSAGES_NOT, ChatEnded: _MESSAGES_NOT,
    ToolCallsCanceled: _MESSAGES_NOT, TurnFailed: {**_MESSAGES_NOT, **_ERROR_NOT}, IdleChatFailed: _ERROR_NOT,
    InvalidStateReconciled: {**_ERROR_NOT, "status_before": "a status name"},
    PromptQueued: {**under("prompt", _PARTS_NOT), **under("prompt.hook_prefix[]", _PARTS_NOT),
                   "prompt.hook_allowed_tools": "tool names (policy)", **_lists(PromptQueued)},
    QueuedPromptEdited: {**_PARTS_NOT, **_lists(QueuedPromptEdited)},
    RequiresActionEntered: _lists(RequiresActionEntered),
    OwnershipCleared: {"cause": "why the worker's ownership ended (a code)"},
    RetryStateRecorded: {"retry_state": "the worker's retry counters and delays"},
    GenerationAttemptRecorded: {"settings": "the model, tools and limits an attempt ran with (the rules' inputs)"},
}
