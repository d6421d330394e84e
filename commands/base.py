"""Command messages: msgspec Structs, a tagged union on ``"type"`` (CONTRACT.md §3).

Every feature module defines its command Structs by subclassing ``Command`` with ``tag="<type>"`` and
registers a handler with ``@handles(CommandClass)``. ``commands.handler`` assembles the union from the
registry, so adding a command type is one Struct plus one function in one place.
"""

from __future__ import annotations

from typing import Any, Callable
from uuid import UUID

import msgspec


class Command(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True):
    """Fields every command may carry: who asked, and a key that makes a repeat a no-op."""

    idempotency_key: str | None = None
    actor: UUID | None = None


#: command class -> handler(app, command) -> result dict
HANDLERS: dict[type[Command], Callable[[Any, Any], dict[str, Any]]] = {}


def handles(*command_classes: type[Command]) -> Callable[[Callable[[Any, Any], dict[str, Any]]], Callable[[Any, Any], dict[str, Any]]]:
    def register(fn: Callable[[Any, Any], dict[str, Any]]) -> Callable[[Any, Any], dict[str, Any]]:
        for cls in command_classes:
            if cls in HANDLERS:
                raise TypeError(f"{cls.__name__} already has a handler")
            HANDLERS[cls] = fn
        return fn

    return register


def command_type(cls: type[Command]) -> str:
    return cls.__struct_config__.tag  # type: ignore[return-value]
