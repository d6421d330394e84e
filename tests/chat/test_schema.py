"""Chat event schema: ``QueuedPromptPromoted`` v1 payloads (written before the reasoning effort was
carried) still read, upcast to v2 with no effort; the new events round-trip through the codec with their
stable topics and declared class versions."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from eventsourcing.persistence import StoredEvent

import ledger.registry  # noqa: F401  (every topic known)
from ledger.base import TOPICS
from ledger.chat import events as ev
from ledger.chat.values import ChatError, TextPart
from ledger.codec import MsgspecMapper

#: a v1 payload as the code before this change wrote it (hand-written, never regenerated)
PROMOTED_V1 = (b'{"timestamp":"2026-01-02T03:04:05Z","queued_message_id":1,'
               b'"turn_id":"00000000-0000-0000-0000-000000000009","prompt_message_id":4,"messages":[{"message_id":4,'
               b'"role":"user","parts":[{"type":"text","text":"next"}],"turn_id":"00000000-0000-0000-0000-000000000009",'
               b'"queued_message_id":1}],"hook_allowed_tools":["read"],"tool_policy_before":null,"tool_policy":["read"],'
               b'"model_config_id":null,"model_resolution":null}')


def stored(topic: str, data: bytes, version: int = 7) -> StoredEvent:
    return StoredEvent(originator_id=uuid.UUID(int=5), originator_version=version, topic=topic, state=data)


def test_a_v1_promotion_is_upcast_with_no_reasoning_effort():
    e = MsgspecMapper().to_domain_event(stored(ev.QueuedPromptPromoted.TOPIC, PROMOTED_V1))
    assert type(e) is ev.QueuedPromptPromoted and e.reasoning_effort is None
    assert (e.queued_message_id, e.prompt_message_id, e.tool_policy) == (1, 4, ["read"])
    assert e.messages[0].parts == [TextPart(text="next")]


T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
NEW_EVENTS = [
    ev.QueuedPromptEdited(originator_id=uuid.UUID(int=5), originator_version=3, timestamp=T, queued_message_id=2,
                          parts=[TextPart(text="revised")], model_config_id=uuid.UUID(int=8), reasoning_effort="high"),
    ev.QueuedPromptEditBegun(originator_id=uuid.UUID(int=5), originator_version=3, timestamp=T, queued_message_id=2),
    ev.QueuedPromptEditEnded(originator_id=uuid.UUID(int=5), originator_version=3, timestamp=T, queued_message_id=2,
                             cause="moved"),
    ev.ChatPaused(originator_id=uuid.UUID(int=5), originator_version=3, timestamp=T, queued_message_id=2),
    ev.ChatResumed(originator_id=uuid.UUID(int=5), originator_version=3, timestamp=T, cause="queued_deleted",
                   status="waiting", queued_message_id=2),
    ev.InvalidStateReconciled(originator_id=uuid.UUID(int=5), originator_version=3, timestamp=T,
                              last_error=ChatError(message="x"), status_before="paused", archived_before=True),
    ev.QueuedPromptPromoted(originator_id=uuid.UUID(int=5), originator_version=3, timestamp=T, queued_message_id=1,
                            turn_id=uuid.UUID(int=9), prompt_message_id=4, messages=[], hook_allowed_tools=None,
                            tool_policy_before=None, tool_policy=None, model_config_id=None, reasoning_effort="low"),
]


@pytest.mark.parametrize("event", NEW_EVENTS, ids=lambda e: type(e).__name__)
def test_new_facts_round_trip_with_stable_topics(event):
    cls = type(event)
    assert cls.__dict__["TOPIC"] == f"chat-ledger:chat.{cls.__name__}" and TOPICS[cls.TOPIC] is cls
    assert "class_version" in cls.__dict__  # declared explicitly
    mapper = MsgspecMapper()
    back = mapper.to_domain_event(mapper.to_stored_event(event))
    assert type(back) is cls and vars(back) == vars(event)


def test_a_queued_prompt_never_arrives_under_edit():
    """``QueuedPrompt.editing_since`` is chat state: a ``PromptQueued`` payload carrying it (an imported
    log) does not put the prompt under edit."""
    from ledger.chat.evolve import evolve
    from ledger.chat.state import ChatState
    from ledger.chat.values import QueuedPrompt

    s = ChatState(chat_id=uuid.UUID(int=5), organization_id=uuid.UUID(int=1), owner_id=uuid.UUID(int=2),
                  parent_chat_id=None, root_chat_id=uuid.UUID(int=5), title="t", created_at=T)
    prompt = QueuedPrompt(queued_message_id=1, position=1, parts=[TextPart(text="q")], created_by=uuid.UUID(int=2),
                          turn_id=uuid.UUID(int=9), editing_since=T)
    evolve(s, ev.PromptQueued(originator_id=s.chat_id, originator_version=2, timestamp=T, prompt=prompt))
    assert s.queue[0].editing_since is None and s.execution_state == "R1"
