"""``Draft``: the events one chat command builds, message by message (ids continue the chat's sequence),
with the rules that look at the batch itself (cancellations, promotions at a turn boundary)."""

from __future__ import annotations

from typing import Any, Sequence
from uuid import UUID

import msgspec

from ledger.base import Emitter
from ledger.catalog.resolve import (
    ModelFacts,
    ModelFactsNeeded,
    resolve_kept,
    validate_explicit,
)
from ledger.catalog.values import Limits, ModelResolution
from ledger.chat import events as ev
from ledger.chat.rules import (
    IDLE_STATES,
    QUEUED_PROMOTION,
    narrow_tool_policy,
    turn_id_for,
    worker_facts,
)
from ledger.chat.messageinfo import MessageInfo, ToolCall, message_info
from ledger.chat.state import (
    ChatState,
    last_assistant_index,
    outstanding_tool_calls,
)
from ledger.chat.values import (
    FilePart,
    Fence,
    Message,
    MessageInput,
    Part,
    QueuedPrompt,
    TextPart,
    ToolResultPart,
    is_receipt,
)
from ledger.errors import LedgerError, invalid_command, transition_not_allowed


class LimitChecks:
    """The deployment's limits (docs/commands.md, "Limits") as one command's rules apply them: each check reads
    the value in force and remembers it (``recorded``: what the event carrying the decision records).
    ``linked``: the files the chat already links (they do not count again)."""

    def __init__(self, limits: Limits | None, linked: Sequence[str] = ()) -> None:
        self.limits = limits if limits is not None else Limits()
        self.linked = linked
        self.used: dict[str, int] = {}

    def value(self, name: str) -> int:
        value = self.used[name] = self.limits.effective(name)
        return value

    def recorded(self) -> dict[str, int] | None:
        return dict(sorted(self.used.items())) or None

    def prompt(self, parts: list[Part]) -> None:
        """A user prompt's text is at most ``max_prompt_bytes`` (UTF-8)."""
        cap = self.value("max_prompt_bytes")
        size = sum(len(p.text.encode()) for p in parts if type(p) is TextPart)
        if size > cap:
            raise LedgerError("prompt_too_large", f"the prompt is {size} bytes of text; the deployment allows at "
                                                  f"most {cap} (limits.max_prompt_bytes)")

    def attachments(self, messages: list[Any]) -> None:
        """The chat links at most ``max_attachments_per_chat`` files (chatd's per-chat file cap: a file already
        linked does not count again; links outlive an edit). ``messages``: anything with ``parts``."""
        cap = self.value("max_attachments_per_chat")
        new = {p.file_id for m in messages for p in m.parts if type(p) is FilePart} - set(self.linked)
        if new and len(self.linked) + len(new) > cap:
            raise LedgerError("chat_attachment_cap_exceeded", f"chat attachment cap exceeded (the chat links "
                                                              f"{len(self.linked)} files; at most {cap})")

    def tool_output(self, messages: list[Message]) -> None:
        """Each tool result, encoded as JSON, is at most ``max_tool_output_bytes`` (a runner truncates before
        committing: its attempt's settings carry the limit)."""
        cap = self.value("max_tool_output_bytes")
        for m in messages:
            for p in m.parts:
                if type(p) is ToolResultPart:
                    size = len(msgspec.json.encode(p.result))
                    if size > cap:
                        raise LedgerError("tool_output_too_large", f"the result of tool call {p.tool_call_id} is "
                                                                   f"{size} bytes; the deployment allows at most "
                                                                   f"{cap} (limits.max_tool_output_bytes)")


class Draft:
    """The messages a command inserts, in order, with ids continuing the chat's sequence, and the
    message index as it will be after them (for rules that look at the batch itself)."""

    def __init__(self, state: ChatState, em: Emitter, models: ModelFacts | None = None,
                 limits: Limits | None = None) -> None:
        self.state = state
        self.em = em
        self.models = models
        #: the deployment's limits (None: the defaults) as this command's rules apply them
        self.limits = LimitChecks(limits, state.attachments)
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
        if msg.compressed or is_receipt(msg.role, msg.visibility, msg.parts):
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
        """Synthetic error results for the latest assistant message's outstanding calls (docs/chatd.md §2)."""
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
        """Append a prompt at the tail. The cap is the send's ``max_queue_size``, else the deployment's
        ``max_queued_messages_per_chat`` (default 20), checked only here, where a row is queued; the count
        includes a row under edit (docs/chatd.md §4.1). The prompt's size and files are checked first."""
        self.limits.prompt(message.parts)
        self.limits.attachments([message, *prefix])
        cap = self.limits.value("max_queued_messages_per_chat") if max_queue_size is None else max_queue_size
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
        self.em.emit(ev.PromptQueued, prompt=prompt, limits=self.limits.recorded())
        self.queue.append(prompt)
        return prompt

    def head_under_edit(self) -> bool:
        return bool(self.queue) and self.queue[0].queued_message_id == self.editing

    def promote_head(self) -> None:
        """Promote the queue head: its hook prefix (stamped with its turn id) then the prompt; its tool
        policy applied; its reasoning effort carried; its row deleted (docs/chatd.md §4). Never a head under
        edit (callers pause or end the edit first)."""
        head = self.queue[0]
        assert head.queued_message_id != self.editing, "a queued prompt under edit is never promoted"
        # Re-resolve the queued model (docs/chatd.md §6.3): kept when usable in the chat's organization, else
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
        cancellation, no promotion: docs/chatd.md §4.1); nothing when the queue is empty."""
        if not self.queue:
            return
        if self.head_under_edit():
            self.em.emit(ev.ChatPaused, queued_message_id=self.queue[0].queued_message_id)
        else:
            self.promote_head()

    def finish_interruption(self, partial: list[MessageInput], *, unowned: bool = False,
                            fence: Fence | None = None) -> None:
        msgs = self.messages(partial, turn_id=self.state.turn_id)
        if msgs:
            self.limits.tool_output(msgs)
            self.limits.attachments(msgs)
        if self.outstanding():
            raise transition_not_allowed("FinishInterruption", self.state.execution_state,
                                         "outstanding tool calls remain after partial commit")
        self.em.emit(ev.InterruptionFinished, messages=msgs, unowned=unowned, limits=self.limits.recorded(),
                     **worker_facts(self.state, fence))
        self.at_boundary()

    def resumed_from_idle(self, cause: str) -> None:
        """The command resumed the chat into running. From an idle state an owned chat's worker and runner
        are released (``OwnershipCleared``, recorded last) so that admission runs again under the capacity
        cap; from a busy state, or when nobody owns the chat, nothing is recorded (the owner keeps it)."""
        s = self.state
        if s.worker_id is not None and s.execution_state in IDLE_STATES:
            self.em.emit(ev.OwnershipCleared, cause=cause, worker_id=s.worker_id, runner_id=s.runner_id)

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
            self.resumed_from_idle(cause)
