"""Decodes conversation commands from JSON-like dicts (as ``chat-ledger apply`` will) and runs them."""

from __future__ import annotations

from typing import Any

import msgspec

from commands import conversation as conv
from commands.base import HANDLERS

ConversationCommand = (
    conv.ConversationStart | conv.ConversationArrive | conv.ConversationBegin | conv.ConversationPrepareStage
    | conv.ConversationPrepareSteer | conv.ConversationValidateSteer | conv.ConversationCommitSteer
    | conv.ConversationComplete | conv.ConversationFail | conv.ConversationRestart | conv.ConversationRecover
)


def decode(command: dict[str, Any]) -> Any:
    return msgspec.convert(command, ConversationCommand)


def run_command(app: Any, command: dict[str, Any]) -> dict[str, Any]:
    cmd = decode(command)
    result = HANDLERS[type(cmd)](app, cmd)
    msgspec.json.encode(result)  # results are JSON-able
    return result
