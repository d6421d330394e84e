"""Chat command messages (docs/commands.md, "Chat commands"): one Struct per command type, decoded from JSON (a tagged union
assembled by ``commands.handler``). Their handlers are in ``commands.chat``."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

import msgspec

from commands.base import Command
from ledger.catalog.values import EffortLevel
from ledger.chat.values import AttemptSettingsInput, ChatError, Fence, MessageInput, TextPart
from ledger.errors import invalid_command


class ToolResultInput(msgspec.Struct, forbid_unknown_fields=True):
    tool_call_id: str
    output: str
    is_error: bool = False


class _WithUserMessage(Command, kw_only=True):
    text: str | None = None
    message: MessageInput | None = None

    def user_message(self) -> MessageInput:
        message = self.given_message()
        if message is None:
            raise invalid_command("a user message is required: give text or message")
        return message

    def given_message(self) -> MessageInput | None:
        """The message given (``text`` is shorthand for one user text part), or None."""
        if self.message is not None and self.text is not None:
            raise invalid_command("give either text or message, not both")
        if self.message is not None:
            return self.message
        if self.text is None:
            return None
        return MessageInput(role="user", parts=[TextPart(text=self.text)])


class CreateChat(_WithUserMessage, tag="create_chat", kw_only=True):
    organization_id: UUID
    #: required — except over HTTP, where it defaults to the token's user (``commands.access.as_caller`` fills
    #: it in before the handler, which refuses a command still without one, as the decoder used to)
    owner_id: UUID | None = None
    chat_id: UUID | None = None
    parent_chat_id: UUID | None = None
    title: str | None = None
    model_config_id: UUID | None = None
    hook_allowed_tools: list[str] | None = None
    dynamic_tools: list[str] = []
    #: ``running`` or ``waiting`` (empty: running); anything else is refused by CreateChat itself
    #: (``transition_not_allowed``, as chatd words it), not by the decoder
    initial_status: str = "running"
    turn_id: UUID | None = None


class SendMessage(_WithUserMessage, tag="send_message", kw_only=True):
    chat_id: UUID
    created_by: UUID | None = None
    #: ``queue`` or ``interrupt``; anything else is refused by SendMessage (``invalid BusyBehavior``)
    busy_behavior: str = "queue"
    prefix_messages: list[MessageInput] = []
    hook_allowed_tools: list[str] | None = None
    model_config_id: UUID | None = None
    turn_id: UUID | None = None
    #: the queue cap of this send (default 20), read only when the prompt is queued
    max_queue_size: int | None = None


class EditMessage(_WithUserMessage, tag="edit_message", kw_only=True):
    chat_id: UUID
    message_id: int
    created_by: UUID | None = None
    prefix_messages: list[MessageInput] = []
    suffix_messages: list[MessageInput] = []
    hook_allowed_tools: list[str] | None = None
    model_config_id: UUID | None = None
    turn_id: UUID | None = None


class EditQueuedMessage(_WithUserMessage, tag="edit_queued_message", kw_only=True):
    """Content (``text`` or ``message``) with optional model and reasoning-effort overrides, and/or
    ``editing``: true begins an edit (the prompt is not promoted while under edit), false ends it."""

    chat_id: UUID
    queued_message_id: int
    model_config_id: UUID | None = None
    reasoning_effort: EffortLevel | None = None
    editing: bool | None = None


class ReconcileInvalidState(Command, tag="reconcile_invalid_state", kw_only=True):
    chat_id: UUID
    error: ChatError | None = None
    cancellation_reason: str | None = None


class DeleteQueuedMessage(Command, tag="delete_queued_message", kw_only=True):
    chat_id: UUID
    queued_message_id: int


class PromoteQueuedMessage(Command, tag="promote_queued_message", kw_only=True):
    chat_id: UUID
    queued_message_id: int


class Interrupt(Command, tag="interrupt", kw_only=True):
    chat_id: UUID
    reason: str | None = None


class CompleteRequiresAction(Command, tag="complete_requires_action", kw_only=True):
    chat_id: UUID
    results: list[ToolResultInput]
    created_by: UUID | None = None
    suffix_messages: list[MessageInput] = []


class CancelRequiresAction(Command, tag="cancel_requires_action", kw_only=True):
    chat_id: UUID
    reason: str | None = None


class RequestCompaction(Command, tag="request_compaction", kw_only=True):
    chat_id: UUID


class ClearContext(Command, tag="clear_context", kw_only=True):
    chat_id: UUID


class _WorkerCommand(Command, kw_only=True):
    """A worker command (docs/commands.md, "Fences"): ``fence`` refuses it with ``fence_mismatch`` when the chat is not as
    the worker expects (``ledger.chat.decide.check_fence``); without one it is not checked."""

    chat_id: UUID
    fence: Fence | None = None


class EnterRequiresAction(_WorkerCommand, tag="enter_requires_action", kw_only=True):
    pass


class FinishTurn(_WorkerCommand, tag="finish_turn", kw_only=True):
    """``terminal_messages``: chatd's structured-output receipts, recorded with the turn's end."""

    terminal_messages: list[MessageInput] = []


class Abandon(Command, tag="abandon", kw_only=True):
    chat_id: UUID


class RecordGenerationAttempt(_WorkerCommand, tag="record_generation_attempt", kw_only=True):
    """``settings``: what the runner runs this attempt with (recorded as given, ``source: runner``); left out,
    the ledger resolves them from the catalog and the deployment now (``source: ledger``)."""

    settings: AttemptSettingsInput | None = None


class CommitStep(_WorkerCommand, tag="commit_step", kw_only=True):
    messages: list[MessageInput]
    consume_compaction_request: bool = False


class FinishInterruption(_WorkerCommand, tag="finish_interruption", kw_only=True):
    partial_messages: list[MessageInput] = []
    terminal_messages: list[MessageInput] = []


class FinishError(_WorkerCommand, tag="finish_error", kw_only=True):
    error: ChatError
    terminal_messages: list[MessageInput] = []


class FailIdle(Command, tag="fail_idle", kw_only=True):
    chat_id: UUID
    error: str


class RecordRetryState(_WorkerCommand, tag="record_retry_state", kw_only=True):
    retry_state: dict[str, Any]


class EndChat(Command, tag="end_chat", kw_only=True):
    chat_id: UUID
    prefix_messages: list[MessageInput] = []


class SetArchived(Command, tag="set_archived", kw_only=True):
    chat_id: UUID
    archived: bool


class Acquire(Command, tag="acquire", kw_only=True):
    chat_id: UUID
    worker_id: UUID
    runner_id: UUID


class SetTitle(Command, tag="set_title", kw_only=True):
    chat_id: UUID
    title: str
    source: Literal["user", "generated"] = "user"


class SetPlanMode(Command, tag="set_plan_mode", kw_only=True):
    chat_id: UUID
    plan_mode: Literal["plan"] | None


class PinChat(Command, tag="pin_chat", kw_only=True):
    chat_id: UUID


class UnpinChat(Command, tag="unpin_chat", kw_only=True):
    chat_id: UUID


class SetWorkspaceBinding(Command, tag="set_workspace_binding", kw_only=True):
    chat_id: UUID
    workspace_id: UUID | None
    build_id: UUID | None = None
    agent_id: UUID | None = None


class ShareChat(Command, tag="share_chat", kw_only=True):
    chat_id: UUID


class UnshareChat(Command, tag="unshare_chat", kw_only=True):
    chat_id: UUID


class SetLabels(Command, tag="set_labels", kw_only=True):
    chat_id: UUID
    labels: dict[str, str]
