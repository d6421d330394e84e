"""decide: (state, command input) -> events, or a LedgerError and nothing recorded.

One function per transition of chatd's state machine (docs/chatd.md §3). Each checks the
transition matrix first, then the transition's own preconditions, then builds its events with an
``Emitter`` (consecutive versions, the command's timestamp). Ids are decided here, deterministically:
message ids continue the chat's sequence, default turn ids are uuid5 of the chat and the message (or
queued prompt) that starts the turn, so replay never needs a clock or a random source.

Model configs (docs/chatd.md §6): decide reads no other stream. A command that may resolve a model (create;
an explicit model on send/edit; a queue promotion) takes ``models``, the ``ModelFacts`` its handler read
(the chat organization's catalog, the deployment, the owners of foreign ids). When a command turns out
to resolve a model and was given no facts, decide raises ``ModelFactsNeeded``; the handler reads them and
decides again, so commands that resolve nothing never touch the catalog. Every resolution is recorded in
the event that uses it (``model_resolution``).
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID, uuid5

import msgspec

from ledger.base import Emitter
from ledger.catalog.resolve import (
    ModelFacts,
    ModelFactsNeeded,
    select_for_create,
)
from ledger.chat import events as ev
from ledger.catalog.values import Limits
from ledger.chat.draft import Draft, LimitChecks
from ledger.chat.rules import (
    CHAT_ENDED,
    INTERRUPTED_BY_USER,
    MATRIX,
    MESSAGE_EDIT,
    NEW_USER_MESSAGE,
    NIL_CHAT_ID,
    QUEUED_PROMOTION,
    REQUIRES_ACTION_TIMEOUT,
    TIMED_OUT,
    TURN_NAMESPACE,
    USER_MESSAGE,
    check_fence,
    fallback_title,
    narrow_tool_policy,
    normalize_title,
    require,
    turn_id_for,
    worker_facts,
)
from ledger.chat.state import (
    ChatState,
    has_clearable_history,
    has_compactable_history,
    outstanding_tool_calls,
)
from ledger.chat.values import (
    Fence,
    Message,
    MessageInput,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ledger.errors import LedgerError, invalid_command, transition_not_allowed

# The whole chat decider is one namespace (``from ledger.chat import decide as d``); its shared rules and
# the worker's transitions live in their own modules.
from ledger.chat.rules import FENCED_STATUS as FENCED_STATUS  # noqa: I001
from ledger.chat.rules import INVALID_STATE_CANCELED as INVALID_STATE_CANCELED
from ledger.chat.rules import INVALID_STATE_ERROR as INVALID_STATE_ERROR
from ledger.chat.rules import SettingsNeeded as SettingsNeeded
from ledger.chat.rules import fence_of as fence_of
from ledger.chat.metadata import (
    set_labels as set_labels,
    set_pinned as set_pinned,
    set_plan_mode as set_plan_mode,
    set_shared as set_shared,
    set_workspace_binding as set_workspace_binding,
)
from ledger.chat.queue import (
    delete_queued_message as delete_queued_message,
    edit_queued_message as edit_queued_message,
    promote_queued_message as promote_queued_message,
)
from ledger.chat.worker import (
    abandon as abandon,
    acquire as acquire,
    commit_step as commit_step,
    fail_idle as fail_idle,
    finish_error as finish_error,
    finish_interruption as finish_interruption,
    finish_turn as finish_turn,
    reconcile_invalid_state as reconcile_invalid_state,
    record_generation_attempt as record_generation_attempt,
    record_retry_state as record_retry_state,
)


# -- create ------------------------------------------------------------------------------------------

def create_chat(em: Emitter, *, chat_topic: str, organization_id: UUID, owner_id: UUID,
                parent: ChatState | None, title: str | None, message: MessageInput | None,
                model_config_id: UUID | None, hook_allowed_tools: list[str] | None,
                dynamic_tools: list[str], initial_status: str, turn_id: UUID | None,
                models: ModelFacts | None = None, limits: Limits | None = None) -> list[Any]:
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
    checks = LimitChecks(limits)  # (a new chat links no file yet)
    most = checks.value("max_dynamic_tools_per_chat")
    if len(dynamic_tools) > most or any(not n for n in dynamic_tools) or len(set(dynamic_tools)) != len(dynamic_tools):
        raise invalid_command(f"dynamic_tools must be at most {most} unique, non-empty names")
    checks.prompt(message.parts)
    checks.attachments([message])
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
        title_source="user" if title is not None else "fallback",
        status=initial_status, turn_id=turn, messages=[first],
        model_config_id=resolution.model_config_id,
        hook_allowed_tools=None if hook_allowed_tools is None else list(dict.fromkeys(hook_allowed_tools)),
        dynamic_tools=dynamic_tools, model_resolution=resolution, limits=checks.recorded(),
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
                 models: ModelFacts | None = None, limits: Limits | None = None) -> list[Any]:
    """SendMessage, checks in chatd's order: the matrix, a user message, the busy behavior; then the
    deployment's limits on what it inserts or queues."""
    interrupt = busy_behavior == "interrupt"
    st = require(state, "SendMessageInterrupt" if interrupt else "SendMessage")
    if message.role != "user":
        raise invalid_command("SendMessage requires a user message")
    if busy_behavior not in ("queue", "interrupt"):
        raise transition_not_allowed("SendMessage", st, "invalid BusyBehavior")
    d = Draft(state, em, models, limits)
    explicit = model_config_id or message.model_config_id
    chosen = d.explicit(explicit)
    prefix = list(prefix_messages)
    if st in ("W", "E0"):
        resolution = chosen or d.kept()
        d.limits.prompt(message.parts)
        d.limits.attachments([*prefix, message])
        d.cancel(NEW_USER_MESSAGE)
        turn = turn_id or turn_id_for(state.chat_id, "message", d.next_id + len(prefix))
        pre = d.messages(prefix, turn_id=turn)
        prompt = d.message(message, turn_id=turn, created_by=created_by or message.created_by or state.owner_id,
                           model_config_id=explicit or state.model_config_id)
        em.emit(ev.TurnStarted, cause="send", turn_id=turn, prompt_message_id=prompt.message_id,
                messages=pre + [prompt], hook_allowed_tools=hook_allowed_tools,
                tool_policy_before=state.hook_allowed_tools,
                tool_policy=narrow_tool_policy(state.hook_allowed_tools, hook_allowed_tools),
                model_config_id=explicit, model_resolution=resolution, limits=d.limits.recorded())
        d.resumed_from_idle("send_message")
        return em.events
    if st.startswith("A") and interrupt:
        d.cancel(USER_MESSAGE, dynamic_only=True)
    d.queue_prompt(message, created_by=created_by, turn_id=turn_id, prefix=prefix,
                   hook_allowed_tools=hook_allowed_tools, model_config_id=explicit, max_queue_size=max_queue_size)
    if st == "E1":
        # (E1P and P keep the new row queued behind the head under edit: no promotion, status kept.)
        d.cancel(QUEUED_PROMOTION)
        d.promote_head()
        d.resumed_from_idle("send_message")
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
    """The hook prefix recorded with the user message at index ``idx``, still active: the messages the
    event that inserted the prompt recorded just before it (``MessageInfo.prefix``: ``TurnStarted`` and
    ``QueuedPromptPromoted`` carry ``messages`` with the prompt at ``prompt_message_id``). An edit
    soft-deletes them with the target (requirements 000: else the old hook context stays in the model's
    context next to the new prefix). Decided from that recorded fact only: a message that merely shares
    the prompt's turn id and time (an assistant message committed in the same step) is never a prefix.
    Cancellations recorded by the same command are events of their own, so never part of it."""
    target = state.messages[idx]
    return [m.message_id for m in state.messages[idx - target.prefix:idx] if not m.deleted]


def edit_message(state: ChatState, em: Emitter, *, message_id: int, message: MessageInput,
                 created_by: UUID | None, prefix_messages: list[MessageInput] = (),  # type: ignore[assignment]
                 suffix_messages: list[MessageInput] = (),  # type: ignore[assignment]
                 hook_allowed_tools: list[str] | None = None,
                 model_config_id: UUID | None = None, turn_id: UUID | None = None,
                 models: ModelFacts | None = None, limits: Limits | None = None) -> list[Any]:
    st = require(state, "EditMessage")
    idx = message_id - 1
    if not (0 <= idx < len(state.messages)) or state.messages[idx].deleted:
        raise LedgerError("message_not_found", "chat message not found")
    target = state.messages[idx]
    if target.role != "user":
        raise LedgerError("edited_message_not_user", "only user messages can be edited")
    explicit = model_config_id or message.model_config_id
    resolution = Draft(state, em, models).explicit(explicit)
    checks = LimitChecks(limits, state.attachments)
    checks.prompt(message.parts)
    checks.attachments([*prefix_messages, message, *suffix_messages])
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
    calls = outstanding_tool_calls(state, messages=_Before(state.messages, idx, set(stale)))
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
            model_config_id=explicit, model_resolution=resolution, limits=checks.recorded())
    d.resumed_from_idle("edit_message")
    return em.events


class _Before:
    """The messages before position ``idx`` as a backward scan sees them once ``gone`` are soft-deleted (the
    cancellation rule reads only back to the latest active assistant message: no copy of the history)."""

    def __init__(self, msgs: Any, idx: int, gone: set[int]) -> None:
        self.msgs, self.idx, self.gone = msgs, idx, gone

    def __reversed__(self) -> Any:
        msgs, gone = self.msgs, self.gone
        for i in range(self.idx - 1, -1, -1):
            m = msgs[i]
            yield msgspec.structs.replace(m, deleted=True) if m.message_id in gone else m


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
                             suffix_messages: list[MessageInput] = (),  # type: ignore[assignment]
                             limits: Limits | None = None) -> list[Any]:
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
    d = Draft(state, em, None, limits)
    msgs = [
        d.message(MessageInput(role="tool", parts=[ToolResultPart(
            tool_call_id=r.tool_call_id, tool_name=pending[r.tool_call_id], result=value, is_error=r.is_error)]),
            turn_id=state.turn_id, created_by=created_by, model_config_id=state.model_config_id)
        for r, value in zip(results, parsed)
    ]
    msgs += d.messages(list(suffix_messages), turn_id=state.turn_id)
    d.limits.tool_output(msgs)
    d.limits.attachments(msgs)
    em.emit(ev.ToolResultsSubmitted, messages=msgs, limits=d.limits.recorded())
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


def set_title(state: ChatState, em: Emitter, *, title: str, source: str = "user") -> list[Any]:
    em.emit(ev.TitleSet, title=normalize_title(title), source=source)
    return em.events
