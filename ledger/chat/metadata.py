"""The chat's metadata commands (docs/commands.md, "Chat metadata"): plan mode, pin, workspace binding,
sharing, labels. None changes the execution state, the queue or the history. Part of the chat decider's
namespace (``ledger.chat.decide`` re-exports them)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ledger.base import Emitter
from ledger.chat import events as ev
from ledger.chat.state import ChatState
from ledger.errors import LedgerError, invalid_command


#: label keys: 1-64 characters of letters, digits and ``._-/``; values up to 256 characters; at most 64 labels
MAX_LABELS, MAX_LABEL_KEY, MAX_LABEL_VALUE = 64, 64, 256


def set_plan_mode(state: ChatState, em: Emitter, *, plan_mode: str | None) -> list[Any]:
    """A no-op (the mode already in force) records nothing."""
    if plan_mode not in (None, "plan"):
        raise invalid_command('plan_mode must be "plan" or null')
    if state.plan_mode != plan_mode:
        em.emit(ev.PlanModeSet, plan_mode=plan_mode)
    return em.events


def set_pinned(state: ChatState, em: Emitter, *, pinned: bool) -> list[Any]:
    """chatd's refusals: an archived or a child chat cannot be pinned. Pinning a pinned chat (or unpinning
    an unpinned one) records nothing."""
    if pinned and state.archived:
        raise LedgerError("chat_archived", "Cannot pin an archived chat.")
    if pinned and state.parent_chat_id is not None:
        raise LedgerError("not_root_chat", "Cannot pin a child chat.")
    if (state.pinned_at is not None) != pinned:
        em.emit(ev.PinSet, pinned=pinned)
    return em.events


def set_workspace_binding(state: ChatState, em: Emitter, *, workspace_id: UUID | None, build_id: UUID | None,
                          agent_id: UUID | None) -> list[Any]:
    if workspace_id is None and (build_id is not None or agent_id is not None):
        raise invalid_command("build_id and agent_id need a workspace_id")
    if (state.workspace_id, state.build_id, state.agent_id) != (workspace_id, build_id, agent_id):
        em.emit(ev.WorkspaceBound, workspace_id=workspace_id, build_id=build_id, agent_id=agent_id)
    return em.events


def set_shared(state: ChatState, em: Emitter, *, shared: bool) -> list[Any]:
    """Root chats only (a child is shared with its root)."""
    if state.parent_chat_id is not None:
        raise LedgerError("not_root_chat", "Only root chats can be shared; a child chat is shared with its root.")
    if state.shared != shared:
        em.emit(ev.SharingSet, shared=shared)
    return em.events


def set_labels(state: ChatState, em: Emitter, *, labels: dict[str, str]) -> list[Any]:
    if len(labels) > MAX_LABELS:
        raise invalid_command(f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not (0 < len(key) <= MAX_LABEL_KEY) or not all(c.isalnum() or c in "._-/" for c in key) \
                or not key.isascii():
            raise invalid_command(f"label key {key!r}: 1-{MAX_LABEL_KEY} ASCII letters, digits or ._-/")
        if len(value) > MAX_LABEL_VALUE:
            raise invalid_command(f"label {key!r}: the value is longer than {MAX_LABEL_VALUE} characters")
    if state.labels != labels:
        em.emit(ev.LabelsSet, labels=dict(sorted(labels.items())))
    return em.events
