"""The eventsourcing adapter of the conversation: a ``DeciderAggregate`` around the pure core."""

from __future__ import annotations

from typing import ClassVar

from ledger.base import DeciderAggregate
from ledger.conversation.events import CONVERSATION_TOPIC
from ledger.conversation.evolve import evolve
from ledger.conversation.state import ConversationState


class Conversation(DeciderAggregate):
    """One stream per Codex-style conversation; ``state`` is a ``ConversationState``."""

    TOPIC: ClassVar[str] = CONVERSATION_TOPIC
    state: ConversationState
    evolve = staticmethod(evolve)
