"""Command messages: msgspec Structs, a tagged union on ``"type"`` (CONTRACT.md §3).

Every feature module defines its command Structs by subclassing ``Command`` with ``tag="<type>"`` and
registers a handler with ``@handles(CommandClass)``. ``commands.handler`` assembles the union from the
registry, so adding a command type is one Struct plus one function in one place.
"""

from __future__ import annotations

from typing import Any, Callable
from uuid import UUID

import msgspec

from ledger.chat.values import MessageInput, input_bound_errors


class Command(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True):
    """Fields every command may carry: who asked, and a key that makes a repeat a no-op.

    Every value a command accepts fits what the views and both databases store: numbers are bounded by
    their fields' types (``Meta``), and the messages a command carries by ``input_bound_errors``, checked
    here after decoding (msgspec reports a failure as a validation error: ``invalid_command``)."""

    idempotency_key: str | None = None
    actor: UUID | None = None

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, MessageInput):
                _check(value, f"$.{name}")
            elif isinstance(value, list) and value and isinstance(value[0], MessageInput):
                for i, m in enumerate(value):
                    _check(m, f"$.{name}[{i}]")


def _check(m: MessageInput, path: str) -> None:
    for error in input_bound_errors(m, path):
        raise ValueError(error)


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
