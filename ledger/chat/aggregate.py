"""The eventsourcing adapter for chats: one stream per chat, state = fold of ``evolve``."""

from __future__ import annotations

from typing import ClassVar

from ledger.base import DeciderAggregate
from ledger.chat.evolve import evolve
from ledger.chat.state import ChatState


class Chat(DeciderAggregate):
    TOPIC: ClassVar[str] = "chat-ledger:chat.Chat"
    state: ChatState
    evolve = staticmethod(evolve)
