"""decide: (state, command input) -> events, or a LedgerError and nothing recorded.

One function per transition of chatd's state machine (spec/chatd-reference.md §3). Each checks the
transition matrix first, then the transition's own preconditions, then builds its events with an
``Emitter`` (consecutive versions, the command's timestamp). Ids are decided here, deterministically:
message ids continue the chat's sequence, default turn ids are uuid5 of the chat and the message (or
queued prompt) that starts the turn, so replay never needs a clock or a random source.

Model configs (reference §6): decide reads no other stream. A command that may resolve a model (create;
an explicit model on send/edit; a queue promotion) takes ``models``, the ``ModelFacts`` its handler read
(the chat organization's catalog, the deployment, the owners of foreign ids). When a command turns out
to resolve a model and was given no facts, decide raises ``ModelFactsNeeded``; the handler reads them and
decides again, so commands that resolve nothing never touch the catalog. Every resolution is recorded in
the event that uses it (``model_resolution``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid5

import msgspec

from ledger.base import Emitter
from ledger.catalog.resolve import (
    ModelFacts, ModelFactsNeeded, resolve_kept, select_for_create, validate_explicit,
)
from ledger.catalog.values import ModelResolution
from ledger.chat import events as ev
from ledger.chat.state import (
    MAX_QUEUE_SIZE,
    ChatState,
    MessageInfo,
    ToolCall,
    has_clearable_history,
    has_compactable_history,
    last_assistant_index,
    message_info,
    outstanding_tool_calls,
)
from ledger.chat.values import (
    AttemptSettings,
    ChatError,
    Fence,
    Message,
    MessageInput,
    Part,
    QueuedPrompt,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    edited_prompt,
)
from ledger.errors import LedgerError, invalid_command, transition_not_allowed

# -- reference §2.1: cancellation reasons (exact texts) -----------------------------------------------
NEW_USER_MESSAGE = "Tool execution interrupted by new user message"
QUEUED_PROMOTION = "Tool execution interrupted by queued message promotion"
USER_MESSAGE = "Tool execution interrupted by user message"
MESSAGE_EDIT = "Tool execution interrupted by message edit"
INTERRUPTED_BY_USER = "Tool execution interrupted by user"
TIMED_OUT = "Tool execution timed out"
CHAT_ENDED = "Tool execution interrupted because the chat was ended"
INVALID_STATE_CANCELED = "Tool execution canceled due to invalid chat state"
#: ReconcileInvalidState's default ``last_error`` (chatd-queue-editing.md §7)
INVALID_STATE_ERROR = "chat was in an invalid state; send a new message or edit history to continue"
PAUSED_HEAD_UNDER_EDIT = ("paused_queued_head_under_edit",
                          "chat is paused at a queued message under edit; finish editing, send, or remove it first")

REQUIRES_ACTION_TIMEOUT = timedelta(minutes=5)
TITLE_MAX = 200
TURN_NAMESPACE = UUID("6f0b7c8e-2d4b-5c1e-9a57-3f1c2b0d9e41")
NIL_CHAT_ID = UUID(int=0)

_LIVE = ("W", "E0", "E1", "R0", "R1", "I0", "I1", "A0", "A1")
#: busy or error states whose queue head is under edit ("1P")
_HEAD_UNDER_EDIT = ("E1P", "R1P", "I1P", "A1P")

#: transition -> {from execution state: allowed resulting states} (reference §3, CONTRACT §2, and the
#: "1P" matrix of chatd-queue-editing.md §2: a 1P state admits what its "1" sibling admits, P is idle)
MATRIX: dict[str, dict[str, tuple[str, ...]]] = {
    "SetArchived": {"W": ("XW",), "E0": ("XE0",), "E1": ("XE1",), "E1P": ("XE1P",),
                    "XW": ("W",), "XE0": ("E0",), "XE1": ("E1",), "XE1P": ("E1P",)},
    "SendMessage": {"W": ("R0",), "E0": ("R0",), "E1": ("R1", "R1P"), "E1P": ("E1P",), "R0": ("R1",),
                    "R1": ("R1",), "R1P": ("R1P",), "I0": ("I1",), "I1": ("I1",), "I1P": ("I1P",),
                    "A0": ("A1",), "A1": ("A1",), "A1P": ("A1P",), "P": ("P",)},
    "SendMessageInterrupt": {"W": ("R0",), "E0": ("R0",), "E1": ("R1", "R1P"), "E1P": ("E1P",),
                             "R0": ("I1",), "R1": ("I1",), "R1P": ("I1P",), "I0": ("I1",), "I1": ("I1",),
                             "I1P": ("I1P",), "A0": ("R1",), "A1": ("R1",), "A1P": ("R1P",), "P": ("P",)},
    "EditMessage": {s: ("R0",) for s in _LIVE + _HEAD_UNDER_EDIT + ("P",)},
    "RequestCompaction": {"W": ("R0",), "E0": ("R0",), "E1": ("R1",), "E1P": ("R1P",)},
    "ClearContext": {"W": ("W",), "E0": ("W",)},
    "DeleteQueuedMessage": {"E1": ("E0", "E1", "E1P"), "E1P": ("E0", "E1", "E1P"),
                            "R1": ("R0", "R1", "R1P"), "R1P": ("R0", "R1", "R1P"),
                            "I1": ("I0", "I1", "I1P"), "I1P": ("I0", "I1", "I1P"),
                            "A1": ("A0", "A1", "A1P"), "A1P": ("A0", "A1", "A1P"),
                            "P": ("P", "W", "R0", "R1")},
    "PromoteQueuedMessage": {"E1": ("R0", "R1", "R1P"), "E1P": ("R0", "R1", "R1P"), "R1": ("I1",),
                             "R1P": ("I1",), "I1": ("I1",), "I1P": ("I1",), "A1": ("R0", "R1", "R1P"),
                             "A1P": ("R0", "R1", "R1P"), "P": ("R0", "R1", "R1P")},
    "EditQueuedMessage": {"E1": ("E1", "E1P"), "E1P": ("E1", "E1P"), "R1": ("R1", "R1P"),
                          "R1P": ("R1", "R1P"), "I1": ("I1", "I1P"), "I1P": ("I1", "I1P"),
                          "A1": ("A1", "A1P"), "A1P": ("A1", "A1P"), "P": ("P", "R0", "R1")},
    "Interrupt": {"R0": ("I0",), "R1": ("I1",), "R1P": ("I1P",), "A0": ("R0",), "A1": ("R1",),
                  "A1P": ("R1P",)},
    "CompleteRequiresAction": {"A0": ("R0",), "A1": ("R1",), "A1P": ("R1P",)},
    "CancelRequiresAction": {"A0": ("R0",), "A1": ("R1",), "A1P": ("R1P",)},
    "RecordGenerationAttempt": {"R0": ("R0",), "R1": ("R1",), "R1P": ("R1P",)},
    "RecordRetryState": {"R0": ("R0",), "R1": ("R1",), "R1P": ("R1P",)},
    "CommitStep": {"R0": ("R0",), "R1": ("R1",), "R1P": ("R1P",)},
    "EnterRequiresAction": {"R0": ("A0",), "R1": ("A1",), "R1P": ("A1P",)},
    "FinishTurn": {"R0": ("W",), "R1": ("R0", "R1", "R1P"), "R1P": ("P",)},
    "FinishInterruption": {"I0": ("W",), "I1": ("R0", "R1", "R1P"), "I1P": ("P",)},
    "FinishError": {"W": ("E0",), "R0": ("E0",), "R1": ("E1",), "R1P": ("E1P",)},
    "FailIdle": {"W": ("E0",)},
    # Inferred (chatd-queue-editing.md §4): EndChat from a 1P state clears the queue with its edit marker
    # like any queue; P hosts no turn, so no hook outcome can end it.
    "EndChat": {s: ("XW",) for s in _LIVE + _HEAD_UNDER_EDIT},
    "ReconcileInvalidState": {"Invalid": ("E0", "E1", "E1P")},
}
#: Transition names as they appear in error messages.
TRANSITION_NAME = {"SendMessageInterrupt": "SendMessage"}


def require(state: ChatState, transition: str) -> str:
    """The chat's execution state, if ``transition`` is allowed from it; else the matrix error. From
    Invalid only ReconcileInvalidState is allowed (every other transition: ``invalid_state``)."""
    st = state.execution_state
    if st == "Invalid" and transition != "ReconcileInvalidState":
        raise LedgerError("invalid_state", "chat is in an invalid execution state")
    if st not in MATRIX[transition]:
        reason = "reconcile is only valid for invalid states" if transition == "ReconcileInvalidState" else None
        raise transition_not_allowed(TRANSITION_NAME.get(transition, transition), st, reason)
    return st


# -- fences (chatd ``loadChatForTask`` / ``verifyTaskFence`` / ``generationAttemptFence``) ----------------

#: the status each worker command requires of the chat when it carries a fence (chatd loads the chat for
#: the task with that status: the generation task runs on ``running``, the interrupt task on ``interrupting``)
FENCED_STATUS = {
    "CommitStep": "running", "FinishTurn": "running", "FinishError": "running", "EnterRequiresAction": "running",
    "RecordRetryState": "running", "RecordGenerationAttempt": "running", "FinishInterruption": "interrupting",
}


def fence_mismatch(message: str) -> LedgerError:
    return LedgerError("fence_mismatch", message)


def check_fence(state: ChatState, fence: Fence | None, transition: str) -> None:
    """Refuse a worker command whose fence does not match the chat as it is, with chatd's wording and in
    chatd's order: the owner, the status the task requires, not archived, the history version, then the
    generation attempt (``<stored> != <given>``). No fence: nothing is checked (the command behaves as
    without fences)."""
    if fence is None:
        return
    if fence.runner_id is not None and (state.worker_id is None or state.runner_id != fence.runner_id):
        raise fence_mismatch("chat not owned by task")
    status = FENCED_STATUS[transition]
    if state.status != status:
        raise fence_mismatch(f"chat status mismatch: {state.status} != {status}")
    if state.archived:
        raise fence_mismatch("chat archived")
    if fence.history_version is not None and state.history_version != fence.history_version:
        raise fence_mismatch(f"chat history version mismatch: {state.history_version} != {fence.history_version}")
    if fence.generation_attempt is not None and state.generation_attempt != fence.generation_attempt:
        raise fence_mismatch(f"generation fence mismatch: {state.generation_attempt} != {fence.generation_attempt}")


def fence_of(state: ChatState) -> Fence:
    """The fence a worker acting on the chat as it is now sends with its next command (``next-action``)."""
    return Fence(runner_id=state.runner_id, history_version=state.history_version,
                 generation_attempt=state.generation_attempt)


def worker_facts(state: ChatState, fence: Fence | None) -> dict[str, Any]:
    """What a worker event records of the command: the attempt and runner it belongs to, and its fence."""
    return {"generation_attempt": state.generation_attempt, "runner_id": state.runner_id, "fence": fence}


class SettingsNeeded(Exception):
    """Raised by ``record_generation_attempt`` when no settings were given and the checks passed: the
    handler resolves what the attempt runs with at this position and decides again with them."""


def turn_id_for(chat_id: UUID, kind: str, number: int) -> UUID:
    return uuid5(TURN_NAMESPACE, f"{chat_id}/{kind}/{number}")


def fallback_title(parts: list[Part]) -> str:
    text = " ".join("".join(p.text for p in parts if isinstance(p, TextPart)).split())
    if not text:
        return "New chat"
    return text if len(text) <= 80 else text[:79].rstrip() + "…"


def normalize_title(title: str) -> str:
    title = title.strip()
    if not title:
        raise invalid_command("Title cannot be empty.")
    if len(title) > TITLE_MAX:
        raise invalid_command(f"Title must be at most {TITLE_MAX} characters.")
    return title


def narrow_tool_policy(current: list[str] | None, incoming: list[str] | None) -> list[str] | None:
    """Hook tool policy narrowing (TR-H NarrowHookAllowedTools): None incoming keeps the current policy;
    no current policy adopts the incoming one; otherwise the intersection in the incoming order. Never widens."""
    if incoming is None:
        return current
    deduped = list(dict.fromkeys(incoming))
    if current is None:
        return deduped
    allowed = set(current)
    return [t for t in deduped if t in allowed]


class Draft:
    """The messages a command inserts, in order, with ids continuing the chat's sequence, and the
    message index as it will be after them (for rules that look at the batch itself)."""

    def __init__(self, state: ChatState, em: Emitter, models: ModelFacts | None = None) -> None:
        self.state = state
        self.em = em
        self.models = models
        self.next_id = state.next_message_id
        self.added: list[MessageInfo] = []
        self.policy = state.hook_allowed_tools
        self.queue = list(state.queue)
        self.editing = state.editing_queued_message_id  # the queued prompt under edit, as the events leave it
        self._answered: set[str] | None = None  # calls of the latest assistant message with a result

    def facts(self) -> ModelFacts:
        if self.models is None:
            raise ModelFactsNeeded()
        return self.models

    def explicit(self, model_config_id: UUID | None) -> ModelResolution | None:
        """An explicitly chosen model, validated against the chat's organization; None when none given."""
        if model_config_id is None:
            return None
        return validate_explicit(self.facts(), model_config_id)

    def kept(self) -> ModelResolution | None:
        """The chat keeps its model (validated at generation time, ``resolve_model``)."""
        mid = self.state.model_config_id
        return ModelResolution(model_config_id=mid, source="chat_model") if mid is not None else None

    def _check_results(self, msg: Message) -> None:
        """A tool call is resolved at most once: a second result for a call of the latest assistant
        message is refused, whoever submits it (a worker step, partial output, a prefix)."""
        if msg.compressed:
            return
        if msg.role == "assistant":
            self._answered = {p.tool_call_id for p in msg.parts if isinstance(p, ToolResultPart)}
            return
        if msg.role != "tool":
            return
        if self._answered is None:
            calls = {c.tool_call_id for c in self.outstanding()}
            i = last_assistant_index(self.state)
            all_calls = {c.tool_call_id for c in self.state.messages[i].calls} if i >= 0 else set()
            self._answered = all_calls - calls
        for p in msg.parts:
            if isinstance(p, ToolResultPart):
                if p.tool_call_id in self._answered:
                    raise LedgerError("tool_result_duplicate", "duplicate tool_call_id submitted")
                self._answered.add(p.tool_call_id)

    def message(self, m: MessageInput, *, role: str | None = None, turn_id: UUID | None = None,
                created_by: UUID | None = None, model_config_id: UUID | None = None,
                queued_message_id: int | None = None, visibility: str | None = None) -> Message:
        msg = Message(
            message_id=self.next_id, role=role or m.role, parts=m.parts,  # type: ignore[arg-type]
            visibility=visibility or m.visibility,  # type: ignore[arg-type]
            turn_id=turn_id, created_by=created_by or m.created_by,
            model_config_id=model_config_id or m.model_config_id, usage=m.usage,
            context_limit=m.context_limit, compressed=m.compressed, queued_message_id=queued_message_id,
        )
        self._check_results(msg)
        self.next_id += 1
        self.added.append(message_info(msg, self.em.timestamp))
        return msg

    def messages(self, inputs: list[MessageInput], **kw: Any) -> list[Message]:
        return [self.message(m, **kw) for m in inputs]

    def index(self) -> list[MessageInfo]:
        return self.state.messages + self.added if self.added else self.state.messages

    def outstanding(self, dynamic_only: bool = False) -> list[ToolCall]:
        return outstanding_tool_calls(self.state, dynamic_only, messages=self.index())

    def cancel(self, reason: str, dynamic_only: bool = False) -> None:
        """Synthetic error results for the latest assistant message's outstanding calls (reference §2)."""
        calls = self.outstanding(dynamic_only)
        if not calls:
            return
        msgs = [
            self.message(
                MessageInput(role="tool", parts=[ToolResultPart(
                    tool_call_id=c.tool_call_id, tool_name=c.tool_name, result=reason, is_error=True)]),
                turn_id=self.state.turn_id, model_config_id=self.state.model_config_id,
            )
            for c in calls
        ]
        self.em.emit(ev.ToolCallsCanceled, reason=reason, dynamic_only=dynamic_only, messages=msgs)

    def queue_prompt(self, message: MessageInput, *, created_by: UUID | None, turn_id: UUID | None,
                     prefix: list[MessageInput], hook_allowed_tools: list[str] | None,
                     model_config_id: UUID | None, max_queue_size: int | None = None) -> QueuedPrompt:
        """Append a prompt at the tail. The cap is the send's ``max_queue_size`` (default 20), checked only
        here, where a row is queued; the count includes a row under edit (chatd-queue-editing.md §8)."""
        cap = MAX_QUEUE_SIZE if max_queue_size is None else max_queue_size
        if cap <= 0:
            raise invalid_command(f"insert queued: max queue size must be positive, got {cap}")
        if len(self.queue) >= cap:
            raise LedgerError("queue_full", f"chat message queue is full (max {cap})")
        qid = self.state.next_queued_message_id
        prompt = QueuedPrompt(
            queued_message_id=qid, position=qid, parts=message.parts,
            created_by=created_by or message.created_by or self.state.owner_id,
            turn_id=turn_id or turn_id_for(self.state.chat_id, "queued", qid),
            hook_prefix=prefix, hook_allowed_tools=hook_allowed_tools,
            model_config_id=model_config_id or message.model_config_id,
            created_at=self.em.timestamp,
        )
        self.em.emit(ev.PromptQueued, prompt=prompt)
        self.queue.append(prompt)
        return prompt

    def head_under_edit(self) -> bool:
        return bool(self.queue) and self.queue[0].queued_message_id == self.editing

    def promote_head(self) -> None:
        """Promote the queue head: its hook prefix (stamped with its turn id) then the prompt; its tool
        policy applied; its reasoning effort carried; its row deleted (reference §4). Never a head under
        edit (callers pause or end the edit first)."""
        head = self.queue[0]
        assert head.queued_message_id != self.editing, "a queued prompt under edit is never promoted"
        # Re-resolve the queued model (reference §6.3): kept when usable in the chat's organization, else
        # the organization's usable default; none refuses the promotion (no_default_model).
        if head.model_config_id is not None:
            resolution = resolve_kept(self.facts(), head.model_config_id, "explicit")
        else:
            resolution = resolve_kept(self.facts(), self.state.model_config_id, "chat_model")
        self.queue.pop(0)
        prefix = self.messages(head.hook_prefix, turn_id=head.turn_id)
        prompt = self.message(
            MessageInput(role="user", parts=head.parts), role="user", visibility="both",
            turn_id=head.turn_id, created_by=head.created_by, model_config_id=resolution.model_config_id,
            queued_message_id=head.queued_message_id,
        )
        before = self.policy
        self.policy = narrow_tool_policy(before, head.hook_allowed_tools)
        self.em.emit(
            ev.QueuedPromptPromoted, queued_message_id=head.queued_message_id, turn_id=head.turn_id,
            prompt_message_id=prompt.message_id, messages=prefix + [prompt],
            hook_allowed_tools=head.hook_allowed_tools, tool_policy_before=before, tool_policy=self.policy,
            model_config_id=resolution.model_config_id, model_resolution=resolution,
            reasoning_effort=head.reasoning_effort,
        )

    def at_boundary(self) -> None:
        """A turn (or interruption) ended: promote the ready head, or pause at a head under edit (no
        cancellation, no promotion: chatd-queue-editing.md §4); nothing when the queue is empty."""
        if not self.queue:
            return
        if self.head_under_edit():
            self.em.emit(ev.ChatPaused, queued_message_id=self.queue[0].queued_message_id)
        else:
            self.promote_head()

    def finish_interruption(self, partial: list[MessageInput], *, unowned: bool = False,
                            fence: Fence | None = None) -> None:
        msgs = self.messages(partial, turn_id=self.state.turn_id)
        if self.outstanding():
            raise transition_not_allowed("FinishInterruption", self.state.execution_state,
                                         "outstanding tool calls remain after partial commit")
        self.em.emit(ev.InterruptionFinished, messages=msgs, unowned=unowned, **worker_facts(self.state, fence))
        self.at_boundary()

    # -- queue events, mirrored on the draft's queue -----------------------------------------------------
    def delete_queued(self, queued_message_id: int) -> None:
        self.em.emit(ev.QueuedPromptDeleted, queued_message_id=queued_message_id)
        self.queue = [q for q in self.queue if q.queued_message_id != queued_message_id]
        if self.editing == queued_message_id:
            self.editing = None

    def end_edit(self, queued_message_id: int, cause: str) -> None:
        self.em.emit(ev.QueuedPromptEditEnded, queued_message_id=queued_message_id, cause=cause)
        self.editing = None

    def resume(self, cause: str, queued_message_id: int | None) -> None:
        """The pause ended (the event just emitted ended it): record the resume, then promote the ready
        head as a queue promotion does — every outstanding call canceled (chatd ``resumeIfUnpaused``)."""
        self.em.emit(ev.ChatResumed, cause=cause, queued_message_id=queued_message_id,
                     status="running" if self.queue else "waiting")
        if self.queue:
            self.cancel(QUEUED_PROMOTION)
            self.promote_head()


# -- create ------------------------------------------------------------------------------------------

def create_chat(em: Emitter, *, chat_topic: str, organization_id: UUID, owner_id: UUID,
                parent: ChatState | None, title: str | None, message: MessageInput | None,
                model_config_id: UUID | None, hook_allowed_tools: list[str] | None,
                dynamic_tools: list[str], initial_status: str, turn_id: UUID | None,
                models: ModelFacts | None = None) -> list[Any]:
    """CreateChat in chatd's order of checks: a nil chat id, no initial message, the initial status
    (empty means running), then the admission rule (the ledger admits every creation: exactly one
    initial user message)."""
    if em.originator_id == NIL_CHAT_ID:
        raise invalid_command("chatstate: CreateChatWithID called with nil chat ID")
    if message is None:
        raise transition_not_allowed("CreateChat", "N", "initial messages must include at least one message")
    initial_status = initial_status or "running"
    if initial_status not in ("running", "waiting"):
        raise transition_not_allowed("CreateChat", "N", "initial status must be waiting or running")
    if message.role != "user":
        raise transition_not_allowed("CreateChat", "N",
                                     "admitted chat creation requires exactly one initial user message")
    if len(dynamic_tools) > 250 or any(not n for n in dynamic_tools) or len(set(dynamic_tools)) != len(dynamic_tools):
        raise invalid_command("dynamic_tools must be at most 250 unique, non-empty names")
    root_chat_id = em.originator_id
    if parent is not None:
        if parent.archived:
            raise LedgerError("chat_family_archived", "chat family is archived")
        if parent.organization_id != organization_id:
            raise invalid_command("a child chat must belong to its parent's organization")
        root_chat_id = parent.root_chat_id
    if models is None:
        raise ModelFactsNeeded()
    if models.organization_id != organization_id:
        raise ValueError("model facts are for another organization")
    resolution = select_for_create(
        models, owner_id=owner_id, explicit=model_config_id or message.model_config_id,
        parent_model_config_id=parent.model_config_id if parent else None, is_child=parent is not None)
    turn = turn_id or turn_id_for(em.originator_id, "message", 1)
    first = Message(message_id=1, role="user", parts=message.parts, visibility=message.visibility,
                    turn_id=turn, created_by=message.created_by or owner_id,
                    model_config_id=resolution.model_config_id, usage=message.usage,
                    context_limit=message.context_limit)
    em.emit(
        ev.ChatCreated, originator_topic=chat_topic, organization_id=organization_id, owner_id=owner_id,
        parent_chat_id=parent.chat_id if parent else None, root_chat_id=root_chat_id,
        title=normalize_title(title) if title is not None else fallback_title(message.parts),
        status=initial_status, turn_id=turn, messages=[first],
        model_config_id=resolution.model_config_id,
        hook_allowed_tools=None if hook_allowed_tools is None else list(dict.fromkeys(hook_allowed_tools)),
        dynamic_tools=dynamic_tools, model_resolution=resolution,
    )
    return em.events


def child_created(em: Emitter, parent: ChatState, child_chat_id: UUID) -> list[Any]:
    if parent.archived:
        raise LedgerError("chat_family_archived", "chat family is archived")
    em.emit(ev.ChildChatCreated, child_chat_id=child_chat_id)
    return em.events


# -- send, edit, queue --------------------------------------------------------------------------------

def send_message(state: ChatState, em: Emitter, *, message: MessageInput, busy_behavior: str = "queue",
                 prefix_messages: list[MessageInput] = (), hook_allowed_tools: list[str] | None = None,  # type: ignore[assignment]
                 model_config_id: UUID | None = None, turn_id: UUID | None = None,
                 created_by: UUID | None = None, max_queue_size: int | None = None,
                 models: ModelFacts | None = None) -> list[Any]:
    """SendMessage, checks in chatd's order: the matrix, a user message, the busy behavior."""
    interrupt = busy_behavior == "interrupt"
    st = require(state, "SendMessageInterrupt" if interrupt else "SendMessage")
    if message.role != "user":
        raise invalid_command("SendMessage requires a user message")
    if busy_behavior not in ("queue", "interrupt"):
        raise transition_not_allowed("SendMessage", st, "invalid BusyBehavior")
    d = Draft(state, em, models)
    explicit = model_config_id or message.model_config_id
    chosen = d.explicit(explicit)
    prefix = list(prefix_messages)
    if st in ("W", "E0"):
        resolution = chosen or d.kept()
        d.cancel(NEW_USER_MESSAGE)
        turn = turn_id or turn_id_for(state.chat_id, "message", d.next_id + len(prefix))
        pre = d.messages(prefix, turn_id=turn)
        prompt = d.message(message, turn_id=turn, created_by=created_by or message.created_by or state.owner_id,
                           model_config_id=explicit or state.model_config_id)
        em.emit(ev.TurnStarted, cause="send", turn_id=turn, prompt_message_id=prompt.message_id,
                messages=pre + [prompt], hook_allowed_tools=hook_allowed_tools,
                tool_policy_before=state.hook_allowed_tools,
                tool_policy=narrow_tool_policy(state.hook_allowed_tools, hook_allowed_tools),
                model_config_id=explicit, model_resolution=resolution)
        return em.events
    if st.startswith("A") and interrupt:
        d.cancel(USER_MESSAGE, dynamic_only=True)
    d.queue_prompt(message, created_by=created_by, turn_id=turn_id, prefix=prefix,
                   hook_allowed_tools=hook_allowed_tools, model_config_id=explicit, max_queue_size=max_queue_size)
    if st == "E1":
        # (E1P and P keep the new row queued behind the head under edit: no promotion, status kept.)
        d.cancel(QUEUED_PROMOTION)
        d.promote_head()
    elif interrupt and st.startswith("A"):
        em.emit(ev.InterruptRequested, reason=USER_MESSAGE)
    elif interrupt and st[0] in "RI":
        if st[0] == "R":
            em.emit(ev.InterruptRequested, reason=NEW_USER_MESSAGE)
        if not state.owned:
            # TR-B: nobody will finish an unowned interruption, so it finishes now.
            d.cancel(NEW_USER_MESSAGE)
            d.finish_interruption([], unowned=True)
    return em.events


def stale_hook_prefix(state: ChatState, idx: int) -> list[int]:
    """The hook prefix inserted with the user message at index ``idx``: the active rows just before it
    that carry its turn id and were recorded by the same command (000: an edit soft-deletes them with the
    target, or the old hook context stays in the model's context next to the new prefix). Tool rows are
    never part of a prefix: the cancellations recorded before it stay, whatever turn id the caller gave."""
    target = state.messages[idx]
    if target.turn_id is None:
        return []
    ids: list[int] = []
    for m in reversed(state.messages[:idx]):
        if m.deleted:
            continue
        if m.turn_id != target.turn_id or m.created_at != target.created_at or m.role == "tool":
            break
        ids.append(m.message_id)
    return ids[::-1]


def edit_message(state: ChatState, em: Emitter, *, message_id: int, message: MessageInput,
                 created_by: UUID | None, prefix_messages: list[MessageInput] = (),  # type: ignore[assignment]
                 suffix_messages: list[MessageInput] = (),  # type: ignore[assignment]
                 hook_allowed_tools: list[str] | None = None,
                 model_config_id: UUID | None = None, turn_id: UUID | None = None,
                 models: ModelFacts | None = None) -> list[Any]:
    st = require(state, "EditMessage")
    idx = message_id - 1
    if not (0 <= idx < len(state.messages)) or state.messages[idx].deleted:
        raise LedgerError("message_not_found", "chat message not found")
    target = state.messages[idx]
    if target.role != "user":
        raise LedgerError("edited_message_not_user", "only user messages can be edited")
    explicit = model_config_id or message.model_config_id
    resolution = Draft(state, em, models).explicit(explicit)
    stale = stale_hook_prefix(state, idx)
    deleted = stale + [m.message_id for m in state.messages[idx:] if not m.deleted]
    em.emit(ev.MessageEdited, edited_message_id=message_id, deleted_message_ids=deleted,
            deleted_queued_message_ids=[q.queued_message_id for q in state.queue])
    d = Draft(state, em, models)
    resolution = resolution or d.kept()
    d.queue = []
    d.editing = None
    if st == "P":
        d.resume("message_edited", None)  # the queue is gone: the chat waits until the new turn starts
    # The cancellation rule sees the history as it is after the soft-delete.
    gone = set(stale)
    remaining = [msgspec.structs.replace(m, deleted=True) if m.message_id in gone else m
                 for m in state.messages[:idx]]
    calls = outstanding_tool_calls(state, messages=remaining)
    if calls:
        d.added = []
        msgs = [
            d.message(MessageInput(role="tool", parts=[ToolResultPart(
                tool_call_id=c.tool_call_id, tool_name=c.tool_name, result=MESSAGE_EDIT, is_error=True)]),
                turn_id=state.turn_id, model_config_id=state.model_config_id)
            for c in calls
        ]
        em.emit(ev.ToolCallsCanceled, reason=MESSAGE_EDIT, dynamic_only=False, messages=msgs)
    prefix = list(prefix_messages)
    turn = turn_id or turn_id_for(state.chat_id, "message", d.next_id + len(prefix))
    pre = d.messages(prefix, turn_id=turn)
    replacement = d.message(message, role="user", visibility=target.visibility, turn_id=turn,
                            created_by=created_by or message.created_by or state.owner_id,
                            model_config_id=explicit or state.model_config_id)
    suffix = d.messages(list(suffix_messages), turn_id=turn)
    em.emit(ev.TurnStarted, cause="edit", turn_id=turn, prompt_message_id=replacement.message_id,
            messages=pre + [replacement] + suffix, hook_allowed_tools=hook_allowed_tools,
            tool_policy_before=state.hook_allowed_tools,
            tool_policy=narrow_tool_policy(state.hook_allowed_tools, hook_allowed_tools),
            model_config_id=explicit, model_resolution=resolution)
    return em.events


def _find_queued(state: ChatState, queued_message_id: int) -> QueuedPrompt:
    for q in state.queue:
        if q.queued_message_id == queued_message_id:
            return q
    raise LedgerError("queued_message_not_found", "queued message not found")


def delete_queued_message(state: ChatState, em: Emitter, *, queued_message_id: int,
                          models: ModelFacts | None = None) -> list[Any]:
    """Delete a queued prompt. From P, deleting the head under edit resumes the chat: waiting when
    nothing is left, else the next (ready) row is promoted."""
    st = require(state, "DeleteQueuedMessage")
    _find_queued(state, queued_message_id)
    d = Draft(state, em, models)
    d.delete_queued(queued_message_id)
    if st == "P" and not d.head_under_edit():
        d.resume("queued_deleted", queued_message_id)
    return em.events


def promote_queued_message(state: ChatState, em: Emitter, *, queued_message_id: int,
                           models: ModelFacts | None = None) -> list[Any]:
    """Send a queued prompt now: its edit (if any) ends, it moves to the head; from R1/I1 (and their 1P
    forms) the chat starts interrupting, from E1/A1 (1P) and P it is promoted at once."""
    st = require(state, "PromoteQueuedMessage")
    target = _find_queued(state, queued_message_id)
    d = Draft(state, em, models)
    if d.editing == queued_message_id:
        d.end_edit(queued_message_id, "promoted")
    lowest = min(q.position for q in state.queue)
    if target.position > lowest:
        em.emit(ev.QueuedPromptMovedToHead, queued_message_id=queued_message_id, position=lowest - 1)
    d.queue = [target] + [q for q in state.queue if q.queued_message_id != queued_message_id]
    if st in ("R1", "R1P", "I1", "I1P"):
        # The interruption boundary promotes the (new, ready) head.
        em.emit(ev.InterruptRequested, reason=QUEUED_PROMOTION)
    elif st == "P":
        d.resume("promoted", queued_message_id)
    else:
        d.cancel(QUEUED_PROMOTION)
        d.promote_head()
    return em.events


def edit_queued_message(state: ChatState, em: Emitter, *, queued_message_id: int,
                        content: list[Part] | None = None, model_config_id: UUID | None = None,
                        reasoning_effort: str | None = None, editing: bool | None = None,
                        models: ModelFacts | None = None) -> list[Any]:
    """EditQueuedMessage (chatd-queue-editing.md §3): replace a queued prompt's content (with model and
    reasoning-effort overrides), begin or end editing it. Checks in order: the matrix; overrides only
    with content (the API's check, before any edit begins); content or editing given; the row exists;
    from P no edit may begin on another row. A no-op (beginning an edit already begun, ending one not
    begun) records nothing."""
    st = require(state, "EditQueuedMessage")
    if content is None and (model_config_id is not None or reasoning_effort is not None):
        raise invalid_command("model_config_id and reasoning_effort require content.")
    if content is None and editing is None:
        raise transition_not_allowed("EditQueuedMessage", st, "EditQueuedMessage requires content or editing")
    _find_queued(state, queued_message_id)
    d = Draft(state, em, models)
    under_edit = d.editing == queued_message_id
    if st == "P" and editing is True and not under_edit:
        raise LedgerError(*PAUSED_HEAD_UNDER_EDIT)
    if content is not None:
        if not content:
            raise invalid_command("Content is required.")
        if model_config_id is not None:
            d.explicit(model_config_id)  # validated like an explicit model on a send
        em.emit(ev.QueuedPromptEdited, queued_message_id=queued_message_id, parts=list(content),
                model_config_id=model_config_id, reasoning_effort=reasoning_effort)
        d.queue = [edited_prompt(q, list(content), model_config_id, reasoning_effort)
                   if q.queued_message_id == queued_message_id else q for q in d.queue]
    if editing is True and not under_edit:
        if d.editing is not None:
            d.end_edit(d.editing, "moved")
        em.emit(ev.QueuedPromptEditBegun, queued_message_id=queued_message_id)
        d.editing = queued_message_id
    elif editing is False and under_edit:
        d.end_edit(queued_message_id, "ended")
        if st == "P":
            d.resume("edit_ended", queued_message_id)
    return em.events


# -- interrupt, requires-action -------------------------------------------------------------------------

def interrupt(state: ChatState, em: Emitter, *, reason: str | None = None,
              models: ModelFacts | None = None) -> list[Any]:
    reason = reason or INTERRUPTED_BY_USER
    st = state.execution_state
    if st in ("I0", "I1", "I1P") and not state.owned:
        # TR-B: an unowned interruption is finished by whoever asks again.
        d = Draft(state, em, models)
        d.cancel(reason)
        d.finish_interruption([], unowned=True)
        return em.events
    st = require(state, "Interrupt")
    d = Draft(state, em, models)
    if st[0] == "A":
        d.cancel(reason, dynamic_only=True)
        em.emit(ev.InterruptRequested, reason=reason)
        return em.events
    em.emit(ev.InterruptRequested, reason=reason)
    if not state.owned:
        d.cancel(reason)
        d.finish_interruption([], unowned=True)
    return em.events


class ToolResult:
    __slots__ = ("tool_call_id", "output", "is_error")

    def __init__(self, tool_call_id: str, output: str, is_error: bool = False) -> None:
        self.tool_call_id, self.output, self.is_error = tool_call_id, output, is_error


def complete_requires_action(state: ChatState, em: Emitter, *, results: list[ToolResult],
                             created_by: UUID | None = None,
                             suffix_messages: list[MessageInput] = ()) -> list[Any]:  # type: ignore[assignment]
    """Validation in the reference order; the first error wins (TRES). ``suffix_messages`` (a hook's
    post-results context) are inserted after the results, in the current turn."""
    require(state, "CompleteRequiresAction")
    pending = {c.tool_call_id: c.tool_name for c in outstanding_tool_calls(state, dynamic_only=True)}
    seen: set[str] = set()
    for r in results:
        if r.tool_call_id in seen:
            raise LedgerError("tool_result_duplicate", "duplicate tool_call_id submitted")
        seen.add(r.tool_call_id)
    parsed: list[Any] = []
    for r in results:
        try:
            parsed.append(json.loads(r.output))
        except (ValueError, TypeError):
            raise LedgerError("tool_result_invalid_json", "tool result output is not valid JSON") from None
    if any(tid not in seen for tid in pending):
        raise LedgerError("tool_result_missing", "submitted tool results do not match pending tool calls")
    if any(r.tool_call_id not in pending for r in results):
        raise LedgerError("tool_result_unexpected",
                          "submitted tool_call_id does not match a pending dynamic tool call")
    d = Draft(state, em)
    msgs = [
        d.message(MessageInput(role="tool", parts=[ToolResultPart(
            tool_call_id=r.tool_call_id, tool_name=pending[r.tool_call_id], result=value, is_error=r.is_error)]),
            turn_id=state.turn_id, created_by=created_by, model_config_id=state.model_config_id)
        for r, value in zip(results, parsed)
    ]
    msgs += d.messages(list(suffix_messages), turn_id=state.turn_id)
    em.emit(ev.ToolResultsSubmitted, messages=msgs)
    return em.events


def cancel_requires_action(state: ChatState, em: Emitter, *, reason: str | None = None) -> list[Any]:
    require(state, "CancelRequiresAction")
    reason = reason or TIMED_OUT
    d = Draft(state, em)
    if not d.outstanding(dynamic_only=True):
        raise LedgerError("no_pending_dynamic_tool_calls", "no pending dynamic tool calls")
    d.cancel(reason, dynamic_only=True)
    em.emit(ev.RequiresActionCanceled, reason=reason)
    return em.events


def enter_requires_action(state: ChatState, em: Emitter, *, fence: Fence | None = None) -> list[Any]:
    check_fence(state, fence, "EnterRequiresAction")
    require(state, "EnterRequiresAction")
    pending = outstanding_tool_calls(state, dynamic_only=True)
    if not pending:
        raise LedgerError("no_pending_dynamic_tool_calls", "no pending dynamic tool calls")
    em.emit(ev.RequiresActionEntered, deadline=em.timestamp + REQUIRES_ACTION_TIMEOUT,
            tool_call_ids=[c.tool_call_id for c in pending], **worker_facts(state, fence))
    return em.events


# -- the worker's transitions ---------------------------------------------------------------------------

def record_generation_attempt(state: ChatState, em: Emitter, *, settings: AttemptSettings | None = None,
                              fence: Fence | None = None) -> list[Any]:
    """A new generation attempt with what it runs with: ``settings`` as the runner passed them, or (None)
    ``SettingsNeeded`` once the checks pass, for the handler to resolve them and decide again."""
    check_fence(state, fence, "RecordGenerationAttempt")
    require(state, "RecordGenerationAttempt")
    if settings is None:
        raise SettingsNeeded()
    em.emit(ev.GenerationAttemptRecorded, generation_attempt=state.generation_attempt + 1, settings=settings,
            runner_id=state.runner_id, fence=fence)
    return em.events


def record_retry_state(state: ChatState, em: Emitter, *, retry_state: dict[str, Any],
                       fence: Fence | None = None) -> list[Any]:
    check_fence(state, fence, "RecordRetryState")
    require(state, "RecordRetryState")
    if not retry_state:
        raise invalid_command("RecordRetryState requires a retry payload")
    em.emit(ev.RetryStateRecorded, retry_state=retry_state, **worker_facts(state, fence))
    return em.events


def commit_step(state: ChatState, em: Emitter, *, messages: list[MessageInput],
                consume_compaction_request: bool = False, fence: Fence | None = None) -> list[Any]:
    check_fence(state, fence, "CommitStep")
    require(state, "CommitStep")
    if not messages:
        raise invalid_command("CommitStep requires at least one message")
    d = Draft(state, em)
    msgs = d.messages(messages, turn_id=state.turn_id)
    em.emit(ev.StepCommitted, messages=msgs,
            consumed_compaction_request=consume_compaction_request and state.compaction_requested_at is not None,
            **worker_facts(state, fence))
    return em.events


def finish_turn(state: ChatState, em: Emitter, models: ModelFacts | None = None, *,
                fence: Fence | None = None) -> list[Any]:
    """R0 -> W; R1 -> the head promoted (calls canceled first); R1P -> paused at the head under edit."""
    check_fence(state, fence, "FinishTurn")
    st = require(state, "FinishTurn")
    d = Draft(state, em, models)
    if st == "R1":
        d.cancel(QUEUED_PROMOTION)
    em.emit(ev.TurnFinished, messages=[], **worker_facts(state, fence))
    d.at_boundary()
    return em.events


def finish_interruption(state: ChatState, em: Emitter, *, partial_messages: list[MessageInput] = (),  # type: ignore[assignment]
                        models: ModelFacts | None = None, fence: Fence | None = None) -> list[Any]:
    check_fence(state, fence, "FinishInterruption")
    require(state, "FinishInterruption")
    Draft(state, em, models).finish_interruption(list(partial_messages), fence=fence)
    return em.events


def finish_error(state: ChatState, em: Emitter, *, error: ChatError, fence: Fence | None = None) -> list[Any]:
    check_fence(state, fence, "FinishError")
    require(state, "FinishError")
    em.emit(ev.TurnFailed, last_error=error, messages=[], **worker_facts(state, fence))
    return em.events


def fail_idle(state: ChatState, em: Emitter, *, error: str) -> list[Any]:
    require(state, "FailIdle")
    em.emit(ev.IdleChatFailed, last_error=ChatError(message=error, kind="generic"))
    return em.events


def reconcile_invalid_state(state: ChatState, em: Emitter, *, error: ChatError | None = None,
                            cancellation_reason: str | None = None) -> list[Any]:
    """ReconcileInvalidState: only from Invalid. Pending dynamic calls canceled; error state, unarchived,
    the queue and its edit marker kept (E0, E1 or E1P)."""
    require(state, "ReconcileInvalidState")
    Draft(state, em).cancel(cancellation_reason or INVALID_STATE_CANCELED, dynamic_only=True)
    em.emit(ev.InvalidStateReconciled, last_error=error or ChatError(message=INVALID_STATE_ERROR),
            status_before=state.status, archived_before=state.archived)
    return em.events


def request_compaction(state: ChatState, em: Emitter) -> list[Any]:
    require(state, "RequestCompaction")
    if not has_compactable_history(state):
        raise LedgerError("nothing_to_compact", "Nothing to compact.")
    em.emit(ev.CompactionRequested)
    return em.events


CLEARED_SUMMARY = "The conversation context was cleared. Earlier messages are not part of the context."


def clear_context(state: ChatState, em: Emitter) -> list[Any]:
    require(state, "ClearContext")
    if not has_clearable_history(state):
        raise LedgerError("nothing_to_clear", "nothing to clear")
    d = Draft(state, em)
    call_id = f"chat_cleared_{uuid5(TURN_NAMESPACE, f'{state.chat_id}/cleared/{d.next_id}')}"
    triplet = [
        MessageInput(role="user", visibility="model", compressed=True, parts=[TextPart(text=CLEARED_SUMMARY)]),
        MessageInput(role="assistant", visibility="user", compressed=True,
                     parts=[ToolCallPart(tool_call_id=call_id, tool_name="chat_cleared", args={})]),
        MessageInput(role="tool", visibility="both", compressed=True,
                     parts=[ToolResultPart(tool_call_id=call_id, tool_name="chat_cleared",
                                           result={"cleared": True})]),
    ]
    em.emit(ev.ContextCleared, messages=d.messages(triplet, turn_id=state.turn_id))
    return em.events


def end_chat(state: ChatState, em: Emitter, *, prefix_messages: list[MessageInput] = (),  # type: ignore[assignment]
             cascaded_from: UUID | None = None, cascaded_to: list[UUID] = ()) -> list[Any]:  # type: ignore[assignment]
    st = state.execution_state
    if cascaded_from is not None and st == "Invalid":
        raise LedgerError("invalid_state", "chat is in an invalid execution state")
    require(state, "EndChat")
    d = Draft(state, em)
    d.cancel(CHAT_ENDED)
    msgs = d.messages(list(prefix_messages), turn_id=state.turn_id)
    em.emit(ev.ChatEnded, messages=msgs, deleted_queued_message_ids=[q.queued_message_id for q in state.queue],
            cascaded_from=cascaded_from, cascaded_to=list(cascaded_to))
    d.cancel(CHAT_ENDED)  # calls carried in the batch itself
    return em.events


def set_archived(state: ChatState, em: Emitter, *, archived: bool, cascaded_from: UUID | None = None,
                 cascaded_to: list[UUID] = ()) -> list[Any]:  # type: ignore[assignment]
    """One member of a family archive. The root's own checks are in ``check_family_archive``."""
    if state.archived == archived:
        return em.events  # a member already matching is left as it is
    st = state.execution_state
    if st == "Invalid":
        raise LedgerError("invalid_state", "chat is in an invalid execution state")
    if st not in MATRIX["SetArchived"]:
        raise transition_not_allowed("SetArchived", st, f"chat {state.chat_id}" if cascaded_from else None)
    em.emit(ev.ArchivedSet, archived=archived, cascaded_from=cascaded_from, cascaded_to=list(cascaded_to))
    return em.events


def check_family_archive(root: ChatState, archived: bool) -> None:
    if root.parent_chat_id is not None:
        raise LedgerError("not_root_chat", "Chat archive state can only be changed on the root chat.")
    if root.archived == archived:
        raise LedgerError("archived_flag_unchanged", "SetArchived input matches the current archived flag")


def acquire(state: ChatState, em: Emitter, *, worker_id: UUID, runner_id: UUID) -> list[Any]:
    em.emit(ev.ChatAcquired, worker_id=worker_id, runner_id=runner_id)
    return em.events


def abandon(state: ChatState, em: Emitter) -> list[Any]:
    if state.worker_id is None:
        raise LedgerError("not_owned", "chat is not owned")
    em.emit(ev.ChatAbandoned)
    return em.events


def set_title(state: ChatState, em: Emitter, *, title: str) -> list[Any]:
    em.emit(ev.TitleSet, title=normalize_title(title))
    return em.events
