"""The queue's own commands (docs/chatd.md §4.1): delete, promote and edit a queued prompt. Part of the
chat decider's namespace (``ledger.chat.decide`` re-exports them)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ledger.base import Emitter
from ledger.catalog.resolve import ModelFacts
from ledger.catalog.values import Limits
from ledger.chat import events as ev
from ledger.chat.draft import Draft
from ledger.chat.rules import PAUSED_HEAD_UNDER_EDIT, QUEUED_PROMOTION, require
from ledger.chat.state import ChatState
from ledger.chat.values import MessageInput, Part, QueuedPrompt, edited_prompt
from ledger.errors import LedgerError, invalid_command, transition_not_allowed


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
        d.resumed_from_idle("promote_queued_message")
    return em.events


def edit_queued_message(state: ChatState, em: Emitter, *, queued_message_id: int,
                        content: list[Part] | None = None, model_config_id: UUID | None = None,
                        reasoning_effort: str | None = None, editing: bool | None = None,
                        models: ModelFacts | None = None, limits: Limits | None = None) -> list[Any]:
    """EditQueuedMessage (docs/chatd.md §4.1): replace a queued prompt's content (with model and
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
    d = Draft(state, em, models, limits)
    under_edit = d.editing == queued_message_id
    if st == "P" and editing is True and not under_edit:
        raise LedgerError(*PAUSED_HEAD_UNDER_EDIT)
    if content is not None:
        if not content:
            raise invalid_command("Content is required.")
        if model_config_id is not None:
            d.explicit(model_config_id)  # validated like an explicit model on a send
        d.limits.prompt(list(content))
        d.limits.attachments([MessageInput(role="user", parts=list(content))])
        em.emit(ev.QueuedPromptEdited, queued_message_id=queued_message_id, parts=list(content),
                model_config_id=model_config_id, reasoning_effort=reasoning_effort, limits=d.limits.recorded())
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
