"""evolve(state, event) -> state: the effect of each chat event.

Total for valid histories and linear in the number of events: the given state is updated in place and
returned (callers that need the old state keep a copy). Never reads a clock or another stream: every
time and id an effect needs is in the event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.base import remember_idempotency_key
from ledger.chat import events as ev
from ledger.chat.messageinfo import message_info
from ledger.chat.state import ChatState
from ledger.chat.rules import fallback_title
from ledger.chat.values import FilePart, Message, edited_prompt


def _insert(state: ChatState, messages: list[Message], event: Any, prompt_message_id: int = 0) -> None:
    """Append ``messages``; the one with ``prompt_message_id`` (a turn's prompt) records how many of them
    came before it in this event: its hook prefix, a recorded fact (``MessageInfo.prefix``)."""
    if not messages:
        return
    at = event.timestamp
    msgs = state.messages
    previous = msgs.last_loaded()  # (only to share equal UUID objects: never a read)
    receipts_only = True
    for n, m in enumerate(messages):
        previous = message_info(m, at, previous, n if m.message_id == prompt_message_id else 0)
        msgs.append(previous)
        receipts_only = receipts_only and previous.receipt
        for p in m.parts:
            if type(p) is FilePart and p.file_id not in state.attachments:
                state.attachments.append(p.file_id)
    if not receipts_only:  # (receipts alone close a request: the history the model sees is unchanged)
        _history_changed(state, event)


def _history_changed(state: ChatState, event: Any) -> None:
    state.history_version = event.originator_version
    state.generation_attempt = 0
    state.retry_state = None


def _queue_changed(state: ChatState, event: Any) -> None:
    state.queue_version = event.originator_version


def _run(state: ChatState) -> None:
    state.status = "running"
    state.last_error = None
    state.requires_action_deadline_at = None
    state.compaction_requested_at = None


def _settle_after_turn(state: ChatState) -> None:
    """A turn boundary: waiting when nothing is queued; otherwise the promotion that follows sets running."""
    if not state.queue:
        state.status = "waiting"
        state.requires_action_deadline_at = None
    state.compaction_requested_at = None


def _remove_queued(state: ChatState, queued_message_id: int) -> None:
    state.queue = [q for q in state.queue if q.queued_message_id != queued_message_id]


def _set_editing(state: ChatState, queued_message_id: int | None, since: Any = None) -> None:
    """Mark ``queued_message_id`` under edit since ``since`` (None: no prompt under edit): at most one."""
    state.queue = [
        msgspec.structs.replace(q, editing_since=since if q.queued_message_id == queued_message_id else None)
        if (q.editing_since is not None or q.queued_message_id == queued_message_id) else q
        for q in state.queue
    ]


def _end_pause_if_over(state: ChatState) -> None:
    """A pause lasts only while the queue head is under edit. A queue change that ends it leaves the
    chat waiting when no row is left, else running (the command promotes the ready head next); the
    ``ChatResumed`` recorded right after it says so. (Every event leaves a valid state behind, also
    between the events of one command: views and ``events verify`` may look there.)"""
    if state.status == "paused" and not state.head_under_edit:
        state.status = "running" if state.queue else "waiting"


def evolve(state: ChatState | None, event: Any) -> ChatState:
    t = type(event)
    if t is ev.ChatCreated:
        state = ChatState(
            chat_id=event.originator_id, organization_id=event.organization_id, owner_id=event.owner_id,
            parent_chat_id=event.parent_chat_id, root_chat_id=event.root_chat_id, title=event.title,
            created_at=event.timestamp, status=event.status, hook_allowed_tools=event.hook_allowed_tools,
            dynamic_tools=list(event.dynamic_tools), model_config_id=event.model_config_id,
            turn_id=event.turn_id, title_source=event.title_source or _recorded_title_source(event),
        )
        _insert(state, event.messages, event)
    else:
        assert state is not None, "only ChatCreated starts a chat stream"
        handler = _HANDLERS[t]
        handler(state, event)
    state.version = event.originator_version
    state.updated_at = event.timestamp
    remember_idempotency_key(state.idempotency, event)
    return state


def _child_created(s: ChatState, e: ev.ChildChatCreated) -> None:
    s.children.append(e.child_chat_id)


def _recorded_title_source(e: ev.ChatCreated) -> str:
    """A chat created before ``title_source`` was recorded: ``fallback`` when its title is the one derived
    from its first message, else ``user``."""
    return "fallback" if e.messages and e.title == fallback_title(e.messages[0].parts) else "user"


def _title_set(s: ChatState, e: ev.TitleSet) -> None:
    s.title = e.title
    s.title_source = e.source or "user"


def _plan_mode_set(s: ChatState, e: ev.PlanModeSet) -> None:
    s.plan_mode = e.plan_mode


def _pin_set(s: ChatState, e: ev.PinSet) -> None:
    s.pinned_at = e.timestamp if e.pinned else None


def _workspace_bound(s: ChatState, e: ev.WorkspaceBound) -> None:
    s.workspace_id, s.build_id, s.agent_id = e.workspace_id, e.build_id, e.agent_id


def _sharing_set(s: ChatState, e: ev.SharingSet) -> None:
    s.shared = e.shared


def _labels_set(s: ChatState, e: ev.LabelsSet) -> None:
    s.labels = dict(e.labels)


def _turn_started(s: ChatState, e: ev.TurnStarted) -> None:
    _insert(s, e.messages, e, e.prompt_message_id)
    s.turn_id = e.turn_id
    s.hook_allowed_tools = e.tool_policy
    if e.model_config_id is not None:
        s.model_config_id = e.model_config_id
    _run(s)


def _message_edited(s: ChatState, e: ev.MessageEdited) -> None:
    s.messages.mark_deleted(e.deleted_message_ids)  # (message i is at position i - 1: no scan)
    if e.deleted_queued_message_ids:
        s.queue = []
        _queue_changed(s, e)
        _end_pause_if_over(s)
    _history_changed(s, e)


def _prompt_queued(s: ChatState, e: ev.PromptQueued) -> None:
    prompt = e.prompt
    if prompt.editing_since is not None:  # queueing never begins an edit (the field is chat state)
        prompt = msgspec.structs.replace(prompt, editing_since=None)
    s.queue.append(prompt)
    s.next_queued_message_id = e.prompt.queued_message_id + 1
    _queue_changed(s, e)


def _queued_deleted(s: ChatState, e: ev.QueuedPromptDeleted) -> None:
    _remove_queued(s, e.queued_message_id)
    s.compaction_requested_at = None
    _queue_changed(s, e)
    _end_pause_if_over(s)


def _queued_moved(s: ChatState, e: ev.QueuedPromptMovedToHead) -> None:
    target = next(q for q in s.queue if q.queued_message_id == e.queued_message_id)
    s.queue = [q for q in s.queue if q.queued_message_id != e.queued_message_id]
    s.queue.insert(0, msgspec.structs.replace(target, position=e.position))
    _queue_changed(s, e)
    _end_pause_if_over(s)


def _queued_edited(s: ChatState, e: ev.QueuedPromptEdited) -> None:
    s.queue = [edited_prompt(q, e.parts, e.model_config_id, e.reasoning_effort)
               if q.queued_message_id == e.queued_message_id else q for q in s.queue]
    _queue_changed(s, e)


def _edit_begun(s: ChatState, e: ev.QueuedPromptEditBegun) -> None:
    _set_editing(s, e.queued_message_id, e.timestamp)
    _queue_changed(s, e)


def _edit_ended(s: ChatState, e: ev.QueuedPromptEditEnded) -> None:
    _set_editing(s, None)
    _queue_changed(s, e)
    _end_pause_if_over(s)


def _paused(s: ChatState, e: ev.ChatPaused) -> None:
    s.status = "paused"
    s.requires_action_deadline_at = None


def _resumed(s: ChatState, e: ev.ChatResumed) -> None:
    s.status = e.status
    s.requires_action_deadline_at = None


def _reconciled(s: ChatState, e: ev.InvalidStateReconciled) -> None:
    s.status = "error"
    s.archived = False
    s.last_error = e.last_error
    s.requires_action_deadline_at = None
    s.compaction_requested_at = None


def _promoted(s: ChatState, e: ev.QueuedPromptPromoted) -> None:
    _remove_queued(s, e.queued_message_id)
    _queue_changed(s, e)
    _insert(s, e.messages, e, e.prompt_message_id)
    s.turn_id = e.turn_id
    s.hook_allowed_tools = e.tool_policy
    if e.model_config_id is not None:
        s.model_config_id = e.model_config_id
    _run(s)


def _canceled(s: ChatState, e: ev.ToolCallsCanceled) -> None:
    _insert(s, e.messages, e)


def _interrupt_requested(s: ChatState, e: ev.InterruptRequested) -> None:
    if s.status == "requires_action":
        s.status = "running"
        s.requires_action_deadline_at = None
    else:
        s.status = "interrupting"
    s.compaction_requested_at = None


def _interruption_finished(s: ChatState, e: ev.InterruptionFinished) -> None:
    _insert(s, e.messages, e)
    _settle_after_turn(s)


def _turn_finished(s: ChatState, e: ev.TurnFinished) -> None:
    _insert(s, e.messages, e)
    _settle_after_turn(s)


def _turn_failed(s: ChatState, e: ev.TurnFailed) -> None:
    _insert(s, e.messages, e)
    s.status = "error"
    s.last_error = e.last_error
    s.requires_action_deadline_at = None
    s.compaction_requested_at = None


def _idle_failed(s: ChatState, e: ev.IdleChatFailed) -> None:
    s.status = "error"
    s.last_error = e.last_error
    s.requires_action_deadline_at = None
    s.compaction_requested_at = None


def _requires_action(s: ChatState, e: ev.RequiresActionEntered) -> None:
    s.status = "requires_action"
    s.requires_action_deadline_at = e.deadline
    s.compaction_requested_at = None


def _results_submitted(s: ChatState, e: ev.ToolResultsSubmitted) -> None:
    _insert(s, e.messages, e)
    s.status = "running"
    s.requires_action_deadline_at = None
    s.compaction_requested_at = None


def _requires_action_canceled(s: ChatState, e: ev.RequiresActionCanceled) -> None:
    s.status = "running"
    s.requires_action_deadline_at = None
    s.compaction_requested_at = None


def _compaction_requested(s: ChatState, e: ev.CompactionRequested) -> None:
    s.status = "running"
    s.worker_id = None
    s.runner_id = None
    s.last_error = None
    s.requires_action_deadline_at = None
    s.compaction_requested_at = e.timestamp
    _history_changed(s, e)  # GrantHistoryEpoch


def _context_cleared(s: ChatState, e: ev.ContextCleared) -> None:
    _insert(s, e.messages, e)
    s.status = "waiting"
    s.last_error = None
    s.requires_action_deadline_at = None
    s.compaction_requested_at = None


def _step_committed(s: ChatState, e: ev.StepCommitted) -> None:
    _insert(s, e.messages, e)
    if e.consumed_compaction_request:
        s.compaction_requested_at = None


def _attempt(s: ChatState, e: ev.GenerationAttemptRecorded) -> None:
    s.generation_attempt = e.generation_attempt
    s.retry_state = None


def _retry_state(s: ChatState, e: ev.RetryStateRecorded) -> None:
    s.retry_state = e.retry_state


def _ended(s: ChatState, e: ev.ChatEnded) -> None:
    _insert(s, e.messages, e)
    if e.deleted_queued_message_ids:
        s.queue = []
        _queue_changed(s, e)
    s.status = "waiting"
    s.archived = True
    s.pinned_at = None
    s.worker_id = None
    s.runner_id = None
    s.last_error = None
    s.requires_action_deadline_at = None
    s.compaction_requested_at = None


def _archived_set(s: ChatState, e: ev.ArchivedSet) -> None:
    s.archived = e.archived
    if e.archived:
        s.pinned_at = None  # archiving resets the pin (chatd)


def _acquired(s: ChatState, e: ev.ChatAcquired) -> None:
    s.worker_id = e.worker_id
    s.runner_id = e.runner_id


def _abandoned(s: ChatState, e: ev.ChatAbandoned) -> None:
    s.worker_id = None
    s.runner_id = None


def _ownership_cleared(s: ChatState, e: ev.OwnershipCleared) -> None:
    s.worker_id = None
    s.runner_id = None


_HANDLERS: dict[type, Any] = {
    ev.OwnershipCleared: _ownership_cleared,
    ev.ChildChatCreated: _child_created,
    ev.TitleSet: _title_set,
    ev.PlanModeSet: _plan_mode_set,
    ev.PinSet: _pin_set,
    ev.WorkspaceBound: _workspace_bound,
    ev.SharingSet: _sharing_set,
    ev.LabelsSet: _labels_set,
    ev.TurnStarted: _turn_started,
    ev.MessageEdited: _message_edited,
    ev.PromptQueued: _prompt_queued,
    ev.QueuedPromptDeleted: _queued_deleted,
    ev.QueuedPromptMovedToHead: _queued_moved,
    ev.QueuedPromptPromoted: _promoted,
    ev.QueuedPromptEdited: _queued_edited,
    ev.QueuedPromptEditBegun: _edit_begun,
    ev.QueuedPromptEditEnded: _edit_ended,
    ev.ChatPaused: _paused,
    ev.ChatResumed: _resumed,
    ev.InvalidStateReconciled: _reconciled,
    ev.ToolCallsCanceled: _canceled,
    ev.InterruptRequested: _interrupt_requested,
    ev.InterruptionFinished: _interruption_finished,
    ev.TurnFinished: _turn_finished,
    ev.TurnFailed: _turn_failed,
    ev.IdleChatFailed: _idle_failed,
    ev.RequiresActionEntered: _requires_action,
    ev.ToolResultsSubmitted: _results_submitted,
    ev.RequiresActionCanceled: _requires_action_canceled,
    ev.CompactionRequested: _compaction_requested,
    ev.ContextCleared: _context_cleared,
    ev.StepCommitted: _step_committed,
    ev.GenerationAttemptRecorded: _attempt,
    ev.RetryStateRecorded: _retry_state,
    ev.ChatEnded: _ended,
    ev.ArchivedSet: _archived_set,
    ev.ChatAcquired: _acquired,
    ev.ChatAbandoned: _abandoned,
}
