"""Chat command handlers (docs/commands.md, "Chat commands"; the command messages are in ``commands.chat_messages``).

A handler loads the chat (and, for family operations, its relatives), asks the pure ``decide`` for
events, records them and returns the docs/commands.md, "Results" result. Model configs: ``create_chat`` always reads the
organization's catalog and the deployment (membership, model selection); other commands read the catalog
only when ``decide`` asks for it (``ModelFactsNeeded``: an explicit model to validate, a queue promotion
to re-resolve), through the application's aggregate cache, and decide again with the facts. Repeating a command with an idempotency key
already recorded on the chat returns the first result, rebuilt from the events that command recorded.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence
from uuid import UUID, uuid4, uuid5

import msgspec

from commands.base import Command, check_repeat, emitter, handles
from commands.catalog import deployment_limits, load_model_facts
from commands.chat_messages import (
    Abandon,
    Acquire,
    CancelRequiresAction,
    ClearContext,
    CommitStep,
    CompleteRequiresAction,
    CreateChat,
    DeleteQueuedMessage,
    EditMessage,
    EditQueuedMessage,
    EndChat,
    EnterRequiresAction,
    FailIdle,
    FinishError,
    FinishInterruption,
    FinishTurn,
    Interrupt,
    PromoteQueuedMessage,
    ReconcileInvalidState,
    RecordGenerationAttempt,
    RecordRetryState,
    RequestCompaction,
    SendMessage,
    PinChat,
    SetArchived,
    SetLabels,
    SetPlanMode,
    SetTitle,
    SetWorkspaceBinding,
    ShareChat,
    UnpinChat,
    UnshareChat,
)
from commands.next_action import attempt_settings_now
from commands.uow import UnitOfWork, run
from ledger.base import Emitter
from ledger.catalog.resolve import ModelFacts, ModelFactsNeeded, unusable_error
from ledger.chat import decide as d
from ledger.chat import events as ev
from ledger.chat.aggregate import Chat
from ledger.chat.state import ChatState
from ledger.chat.values import AttemptSettings
from ledger.errors import LedgerError, invalid_command
from ledger.streams import locate, refuse_reserved
from ledger.toolcalls import mapping
from ledger.toolcalls.aggregate import ToolCallExecution

IDEMPOTENT_CREATE_NAMESPACE = UUID("3c1f8a52-7d4e-5b9a-8e21-0f6d4c7b2a93")
NIL_UUID = UUID(int=0)


# -- results --------------------------------------------------------------------------------------------

def chat_result(state: ChatState, events: list[Any]) -> dict[str, Any]:
    """docs/commands.md, "Results": the chat's state after the command plus what the command inserted."""
    message_ids: list[int] = []
    result_family: list[str] | None = None
    queued: int | None = None
    promoted: int | None = None
    resolution: Any = None
    attempt_settings: Any = None
    for e in events:
        if e.originator_id != state.chat_id:
            continue
        for m in getattr(e, "messages", ()) or ():
            message_ids.append(m.message_id)
        if isinstance(e, (ev.ArchivedSet, ev.ChatEnded)) and e.cascaded_from is None:
            result_family = [str(c) for c in e.cascaded_to]
        if isinstance(e, ev.PromptQueued):
            queued = e.prompt.queued_message_id
        elif isinstance(e, ev.QueuedPromptPromoted):
            promoted = e.queued_message_id
        if getattr(e, "model_resolution", None) is not None:
            resolution = e.model_resolution
        if isinstance(e, ev.GenerationAttemptRecorded) and e.settings is not None:
            attempt_settings = e.settings
    if queued is not None and queued == promoted:
        # Queued and promoted by this command (an interrupting send finishing an unowned interruption
        # with an empty queue): the prompt went into history, it is not queued (docs/chatd.md §3.1).
        queued = None
    result: dict[str, Any] = {
        "chat_id": str(state.chat_id),
        "status": state.status,
        "execution_state": state.execution_state,
        "archived": state.archived,
        "queue_length": len(state.queue),
        "version": state.version,
        "turn_id": str(state.turn_id) if state.turn_id else None,
        "message_ids": message_ids,
        "generation_attempt": state.generation_attempt,
        "model_config_id": str(state.model_config_id) if state.model_config_id else None,
    }
    if queued is not None:
        result["queued_message_id"] = queued
    if promoted is not None:
        result["promoted_queued_message_id"] = promoted
    if resolution is not None:
        result["model_resolution"] = msgspec.to_builtins(resolution)
    if attempt_settings is not None:
        result["settings"] = msgspec.to_builtins(attempt_settings)
    if result_family is not None:
        result["family_chat_ids"] = result_family
    if state.editing_queued_message_id is not None:
        result["editing_queued_message_id"] = state.editing_queued_message_id
    return result


def _repeat_result(app: Any, chat: Chat, cmd: Command) -> dict[str, Any]:
    """The first result of the command that recorded ``cmd``'s key on this chat (``idempotency_key_reused``
    when that was a different command)."""
    first, last = chat.state.idempotency[cmd.idempotency_key]  # type: ignore[index]
    events = app.stream(chat.id, gt=first - 1, lte=last)
    check_repeat(cmd, events)
    past = app.load(chat.id, version=last)
    return chat_result(past.state, events)


def _load_chat(uow: UnitOfWork, chat_id: UUID) -> Chat:
    agg = uow.get(chat_id)
    if not isinstance(agg, Chat):
        raise LedgerError("chat_not_found", "chat not found")
    return agg


def _emitter(uow: UnitOfWork, agg: Chat | None, chat_id: UUID, cmd: Command) -> Emitter:
    return emitter(cmd, chat_id, agg.version if agg else 0, uow.now)


def chat_model_facts(uow: UnitOfWork, state: ChatState, explicit: UUID | None = None,
                     more: Sequence[UUID] = ()) -> ModelFacts:
    """What resolving a model on this chat may need: its organization's catalog and the owners of the ids
    in play that the catalog lacks (the explicit one and ``more``, the chat's, the queued prompts')."""
    ids = [explicit, *more, state.model_config_id, *(q.model_config_id for q in state.queue)]
    return load_model_facts(uow, state.organization_id, ids)


def record_on_chat(app: Any, uow: UnitOfWork, chat: Chat, events: list[Any], cmd: Any) -> list[Any]:
    """Record ``events`` on ``chat`` with what they do to its tool-call executions (``ledger.toolcalls.mapping``:
    a canceled run is cancel_requested or, a background one, detached — its synthetic result then carries the
    handle; an edit gives up on the runs of the turn it deletes), all in this unit of work. Returns the chat's
    events as recorded."""
    affected = mapping.affected_calls(chat.state, events) if any(
        isinstance(e, (ev.ToolCallsCanceled, ev.MessageEdited)) for e in events) else []
    if affected:
        ids = mapping.execution_ids(chat.state, events, affected)
        streams = {call: locate(app, ToolCallExecution, eid, uow.get) for call, eid in ids.items()}
        states = {call: (agg.state if agg is not None else None) for call, (_, agg) in streams.items()}
        by_execution = {call: agg for call, (_, agg) in streams.items() if agg is not None}
        mapped, detached = mapping.map_executions(
            affected, states, lambda s: Emitter(by_execution[s.tool_call_id].id, s.version, uow.now, actor=cmd.actor))
        events = mapping.with_handles(events, detached)
        uow.record(chat, events)
        for call, execution_events in mapped.items():
            uow.record(by_execution[call], execution_events)
        return events
    uow.record(chat, events)
    return events


def on_chat(app: Any, cmd: Any, decide: Callable[..., list[Any]], *, models: bool = False,
            explicit: UUID | None = None, more: Sequence[UUID] = (), limits: bool = False) -> dict[str, Any]:
    """Run ``decide(state, em)`` (or, with ``models``, ``decide(state, em, facts)``: first without facts,
    again with them when it raises ``ModelFactsNeeded``) on the command's chat and record the events. With
    ``limits``, ``decide`` also gets ``limits=``: the deployment's limits in force (a dependency of the
    decision, as the catalog is)."""

    def work(uow: UnitOfWork) -> dict[str, Any]:
        chat = _load_chat(uow, cmd.chat_id)
        if cmd.idempotency_key is not None and cmd.idempotency_key in chat.state.idempotency:
            return _repeat_result(app, chat, cmd)
        extra = {"limits": deployment_limits(uow)} if limits else {}
        if not models:
            events = decide(chat.state, _emitter(uow, chat, chat.id, cmd), **extra)
        else:
            try:
                events = decide(chat.state, _emitter(uow, chat, chat.id, cmd), None, **extra)
            except ModelFactsNeeded:
                facts = chat_model_facts(uow, chat.state, explicit, more)
                events = decide(chat.state, _emitter(uow, chat, chat.id, cmd), facts, **extra)
        events = record_on_chat(app, uow, chat, events, cmd)
        return chat_result(chat.state, events)

    return run(app, work)


# -- handlers -------------------------------------------------------------------------------------------

@handles(CreateChat)
def create_chat(app: Any, cmd: CreateChat) -> dict[str, Any]:
    if cmd.chat_id == NIL_UUID:  # before the reserved ids, in chatd's words (decide checks it again)
        raise invalid_command("chatstate: CreateChatWithID called with nil chat ID")
    refuse_reserved("chat_id", cmd.chat_id)
    if cmd.owner_id is None:
        raise invalid_command("invalid command: Object missing required field `owner_id`")
    message = cmd.given_message()
    if cmd.chat_id is not None:
        chat_id = cmd.chat_id
    elif cmd.idempotency_key is not None:
        # A repeated create with the same key must find the chat it created the first time.
        chat_id = uuid5(IDEMPOTENT_CREATE_NAMESPACE, f"{cmd.organization_id}/{cmd.owner_id}/{cmd.idempotency_key}")
    else:
        chat_id = uuid4()

    def work(uow: UnitOfWork) -> dict[str, Any]:
        existing = uow.get_new(chat_id)
        if existing is not None:
            if isinstance(existing, Chat) and cmd.idempotency_key in existing.state.idempotency:
                return _repeat_result(app, existing, cmd)
            raise LedgerError("chat_already_exists", f"chat {chat_id} already exists")
        parent = _load_chat(uow, cmd.parent_chat_id) if cmd.parent_chat_id else None
        if parent is not None and parent.state.root_chat_id != parent.id:
            root = _load_chat(uow, parent.state.root_chat_id)
            if root.state.archived:
                raise LedgerError("chat_family_archived", "chat family is archived")
        explicit = cmd.model_config_id or (message.model_config_id if message is not None else None)
        facts = load_model_facts(uow, cmd.organization_id,
                                 [explicit, parent.state.model_config_id if parent else None], deployment=True)
        events = d.create_chat(
            _emitter(uow, None, chat_id, cmd), chat_topic=Chat.TOPIC, organization_id=cmd.organization_id,
            owner_id=cmd.owner_id, parent=parent.state if parent else None, title=cmd.title, message=message,
            model_config_id=cmd.model_config_id, hook_allowed_tools=cmd.hook_allowed_tools,
            dynamic_tools=list(cmd.dynamic_tools), initial_status=cmd.initial_status, turn_id=cmd.turn_id,
            models=facts, limits=deployment_limits(uow),
        )
        if parent is not None:
            uow.record(parent, d.child_created(_emitter(uow, parent, parent.id, cmd), parent.state, chat_id))
        chat = uow.create(Chat, events)
        return chat_result(chat.state, events)

    return run(app, work)


@handles(SendMessage)
def send_message(app: Any, cmd: SendMessage) -> dict[str, Any]:
    message = cmd.user_message()
    return on_chat(app, cmd, lambda s, em, m, limits: d.send_message(
        s, em, message=message, busy_behavior=cmd.busy_behavior, prefix_messages=cmd.prefix_messages,
        hook_allowed_tools=cmd.hook_allowed_tools, model_config_id=cmd.model_config_id,
        turn_id=cmd.turn_id, created_by=cmd.created_by, max_queue_size=cmd.max_queue_size, models=m,
        limits=limits), models=True, explicit=cmd.model_config_id or message.model_config_id, limits=True)


@handles(EditMessage)
def edit_message(app: Any, cmd: EditMessage) -> dict[str, Any]:
    message = cmd.user_message()
    return on_chat(app, cmd, lambda s, em, m, limits: d.edit_message(
        s, em, message_id=cmd.message_id, message=message, created_by=cmd.created_by,
        prefix_messages=cmd.prefix_messages, suffix_messages=cmd.suffix_messages,
        hook_allowed_tools=cmd.hook_allowed_tools, model_config_id=cmd.model_config_id, turn_id=cmd.turn_id,
        models=m, limits=limits),
        models=True, explicit=cmd.model_config_id or message.model_config_id, limits=True)


@handles(EditQueuedMessage)
def edit_queued_message(app: Any, cmd: EditQueuedMessage) -> dict[str, Any]:
    message = cmd.given_message()
    if message is not None and message.role != "user":
        raise invalid_command("a queued prompt is a user message")
    return on_chat(app, cmd, lambda s, em, m, limits: d.edit_queued_message(
        s, em, queued_message_id=cmd.queued_message_id, content=message.parts if message is not None else None,
        model_config_id=cmd.model_config_id, reasoning_effort=cmd.reasoning_effort, editing=cmd.editing,
        models=m, limits=limits), models=True, explicit=cmd.model_config_id, limits=True)


@handles(ReconcileInvalidState)
def reconcile_invalid_state(app: Any, cmd: ReconcileInvalidState) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.reconcile_invalid_state(
        s, em, error=cmd.error, cancellation_reason=cmd.cancellation_reason))


@handles(DeleteQueuedMessage)
def delete_queued_message(app: Any, cmd: DeleteQueuedMessage) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em, m: d.delete_queued_message(
        s, em, queued_message_id=cmd.queued_message_id, models=m), models=True)


@handles(PromoteQueuedMessage)
def promote_queued_message(app: Any, cmd: PromoteQueuedMessage) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em, m: d.promote_queued_message(
        s, em, queued_message_id=cmd.queued_message_id, models=m), models=True)


@handles(Interrupt)
def interrupt(app: Any, cmd: Interrupt) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em, m: d.interrupt(s, em, reason=cmd.reason, models=m), models=True)


@handles(CompleteRequiresAction)
def complete_requires_action(app: Any, cmd: CompleteRequiresAction) -> dict[str, Any]:
    results = [d.ToolResult(r.tool_call_id, r.output, r.is_error) for r in cmd.results]
    return on_chat(app, cmd, lambda s, em, limits: d.complete_requires_action(
        s, em, results=results, created_by=cmd.created_by, suffix_messages=cmd.suffix_messages, limits=limits),
        limits=True)


@handles(CancelRequiresAction)
def cancel_requires_action(app: Any, cmd: CancelRequiresAction) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.cancel_requires_action(s, em, reason=cmd.reason))


_SIMPLE: dict[type, Callable[[ChatState, Emitter], list[Any]]] = {
    RequestCompaction: d.request_compaction,
    ClearContext: d.clear_context,
    Abandon: d.abandon,
}


@handles(*_SIMPLE)
def simple(app: Any, cmd: Any) -> dict[str, Any]:
    return on_chat(app, cmd, _SIMPLE[type(cmd)])


@handles(EnterRequiresAction)
def enter_requires_action(app: Any, cmd: EnterRequiresAction) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.enter_requires_action(s, em, fence=cmd.fence))


@handles(RecordGenerationAttempt)
def record_generation_attempt(app: Any, cmd: RecordGenerationAttempt) -> dict[str, Any]:
    given = None
    if cmd.settings is not None:
        given = AttemptSettings(source="runner", **msgspec.structs.asdict(cmd.settings))

    def decide(state: ChatState, em: Emitter) -> list[Any]:
        try:
            return d.record_generation_attempt(state, em, settings=given, fence=cmd.fence)
        except d.SettingsNeeded:
            return d.record_generation_attempt(state, em, settings=attempt_settings_now(app, state), fence=cmd.fence)

    return on_chat(app, cmd, decide)


@handles(FinishTurn)
def finish_turn(app: Any, cmd: FinishTurn) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em, m: d.finish_turn(
        s, em, m, terminal_messages=cmd.terminal_messages, fence=cmd.fence), models=True)


@handles(CommitStep)
def commit_step(app: Any, cmd: CommitStep) -> dict[str, Any]:
    """A message's ``model_config_id`` (the model that produced it) must be one of the chat's organization
    (a live or deleted config of its catalog): one claimed by another organization, or by none, is
    ``model_config_foreign_org``."""
    named = sorted({m.model_config_id for m in cmd.messages if m.model_config_id is not None}, key=str)

    def decide(s: ChatState, em: Emitter, facts: ModelFacts | None, limits: Any) -> list[Any]:
        if named:
            if facts is None:
                raise ModelFactsNeeded
            for mid in named:
                if not _of_organization(facts, mid):
                    raise unusable_error("foreign_org")
        return d.commit_step(s, em, messages=cmd.messages, consume_compaction_request=cmd.consume_compaction_request,
                             fence=cmd.fence, limits=limits)

    return on_chat(app, cmd, decide, models=True, explicit=named[0] if named else None,
                   more=named[1:], limits=True)


def _of_organization(facts: ModelFacts, model_config_id: UUID) -> bool:
    catalog = facts.catalog
    if catalog is not None and (model_config_id in catalog.configs or model_config_id in catalog.deleted):
        return True
    return facts.owners.get(model_config_id) == facts.organization_id


@handles(FinishInterruption)
def finish_interruption(app: Any, cmd: FinishInterruption) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em, m, limits: d.finish_interruption(
        s, em, partial_messages=cmd.partial_messages, terminal_messages=cmd.terminal_messages, models=m,
        fence=cmd.fence, limits=limits), models=True, limits=True)


@handles(FinishError)
def finish_error(app: Any, cmd: FinishError) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.finish_error(
        s, em, error=cmd.error, terminal_messages=cmd.terminal_messages, fence=cmd.fence))


@handles(FailIdle)
def fail_idle(app: Any, cmd: FailIdle) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.fail_idle(s, em, error=cmd.error))


@handles(RecordRetryState)
def record_retry_state(app: Any, cmd: RecordRetryState) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.record_retry_state(s, em, retry_state=cmd.retry_state, fence=cmd.fence))


@handles(Acquire)
def acquire(app: Any, cmd: Acquire) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.acquire(s, em, worker_id=cmd.worker_id, runner_id=cmd.runner_id))


@handles(SetTitle)
def set_title(app: Any, cmd: SetTitle) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.set_title(s, em, title=cmd.title, source=cmd.source))


@handles(SetPlanMode)
def set_plan_mode(app: Any, cmd: SetPlanMode) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.set_plan_mode(s, em, plan_mode=cmd.plan_mode))


@handles(PinChat, UnpinChat)
def set_pinned(app: Any, cmd: Any) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.set_pinned(s, em, pinned=isinstance(cmd, PinChat)))


@handles(SetWorkspaceBinding)
def set_workspace_binding(app: Any, cmd: SetWorkspaceBinding) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.set_workspace_binding(
        s, em, workspace_id=cmd.workspace_id, build_id=cmd.build_id, agent_id=cmd.agent_id))


@handles(ShareChat, UnshareChat)
def set_shared(app: Any, cmd: Any) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.set_shared(s, em, shared=isinstance(cmd, ShareChat)))


@handles(SetLabels)
def set_labels(app: Any, cmd: SetLabels) -> dict[str, Any]:
    return on_chat(app, cmd, lambda s, em: d.set_labels(s, em, labels=dict(cmd.labels)))


def _descendants(uow: UnitOfWork, chat: Chat) -> list[Chat]:
    """Every descendant of ``chat``, parents before children."""
    out: list[Chat] = []
    todo = list(chat.state.children)
    while todo:
        child = _load_chat(uow, todo.pop(0))
        out.append(child)
        todo.extend(child.state.children)
    return out


@handles(SetArchived)
def set_archived(app: Any, cmd: SetArchived) -> dict[str, Any]:
    """Root chats only; the whole family changes in one transaction or not at all."""

    def work(uow: UnitOfWork) -> dict[str, Any]:
        root = _load_chat(uow, cmd.chat_id)
        if cmd.idempotency_key is not None and cmd.idempotency_key in root.state.idempotency:
            return _repeat_result(app, root, cmd)
        d.check_family_archive(root.state, cmd.archived)
        changed = []
        for member in _descendants(uow, root):
            member_events = d.set_archived(member.state, _emitter(uow, member, member.id, cmd),
                                           archived=cmd.archived, cascaded_from=root.id)
            if member_events:
                changed.append(member.id)
                uow.record(member, member_events)
        events = d.set_archived(root.state, _emitter(uow, root, root.id, cmd), archived=cmd.archived,
                                cascaded_to=changed)
        uow.record(root, events)
        return chat_result(root.state, events)

    return run(app, work)


@handles(EndChat)
def end_chat(app: Any, cmd: EndChat) -> dict[str, Any]:
    """Ends the chat and cascades to every descendant not already archived."""

    def work(uow: UnitOfWork) -> dict[str, Any]:
        chat = _load_chat(uow, cmd.chat_id)
        if cmd.idempotency_key is not None and cmd.idempotency_key in chat.state.idempotency:
            return _repeat_result(app, chat, cmd)
        members = [m for m in _descendants(uow, chat) if not m.state.archived]
        events = d.end_chat(chat.state, _emitter(uow, chat, chat.id, cmd), prefix_messages=cmd.prefix_messages,
                            cascaded_to=[m.id for m in members])
        for member in members:
            record_on_chat(app, uow, member, d.end_chat(member.state, _emitter(uow, member, member.id, cmd),
                                                        cascaded_from=chat.id), cmd)
        events = record_on_chat(app, uow, chat, events, cmd)
        return chat_result(chat.state, events)

    return run(app, work)
