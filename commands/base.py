"""Command messages: msgspec Structs, a tagged union on ``"type"`` (docs/commands.md, "Chat commands").

Every feature module defines its command Structs by subclassing ``Command`` with ``tag="<type>"`` and
registers a handler with ``@handles(CommandClass)``. ``commands.handler`` assembles the union from the
registry, so adding a command type is one Struct plus one function in one place.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Callable, Sequence
from uuid import UUID

import msgspec

from ledger.base import CommandIdentity, Emitter
from ledger.chat.values import MessageInput, input_bound_errors
from ledger.errors import LedgerError

#: longest idempotency key accepted (a longer one is ``invalid_command``)
MAX_IDEMPOTENCY_KEY = 200


class Command(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True):
    """Fields every command may carry: who asked, and a key that makes a repeat a no-op.

    Every value a command accepts fits what the views and both databases store: numbers are bounded by
    their fields' types (``Meta``), and the messages a command carries by ``input_bound_errors``, checked
    here after decoding (msgspec reports a failure as a validation error: ``invalid_command``)."""

    idempotency_key: Annotated[str, msgspec.Meta(max_length=MAX_IDEMPOTENCY_KEY)] | None = None
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


# -- idempotency -------------------------------------------------------------------------------------------

_canonical = msgspec.json.Encoder(order="sorted")


def command_identity(cmd: Command) -> CommandIdentity | None:
    """The identity recorded with the command's idempotency key (None without a key): its type, and the
    SHA-256 of its fields as decoded, in a canonical JSON form (keys sorted; fields left at their defaults
    omitted, so a field given with its default value and a field left out are the same command, and a
    field added later with a default changes no digest). Every field that says what to do counts; the key
    itself and ``actor`` (who asked: a retry by another client of the same request is still a repeat) do
    not."""
    if cmd.idempotency_key is None:
        return None
    fields: dict[str, Any] = {}
    for f in msgspec.structs.fields(cmd):
        if f.name in ("idempotency_key", "actor"):
            continue
        value = getattr(cmd, f.name)
        if value is msgspec.UNSET:
            continue
        if f.default is not msgspec.NODEFAULT and value == f.default:
            continue
        if f.default_factory is not msgspec.NODEFAULT and value == f.default_factory():
            continue
        fields[f.encode_name] = value
    return CommandIdentity(type=command_type(type(cmd)), sha256=hashlib.sha256(_canonical.encode(fields)).hexdigest())


def emitter(cmd: Command, stream_id: UUID, version: int, now: Any) -> Emitter:
    """The emitter of ``cmd``'s events on one stream: its key, actor and identity on them."""
    return Emitter(stream_id, version, now, cmd.idempotency_key, cmd.actor, command_identity(cmd))


def key_reused(first: str) -> LedgerError:
    return LedgerError("idempotency_key_reused",
                       f"idempotency key was already used by a different command (a {first} command)")


def is_repeat(agg: Any, cmd: Command) -> bool:
    """Whether ``cmd`` carries a key the stream of ``agg`` (None: no stream yet) recorded: a repeat."""
    return agg is not None and cmd.idempotency_key is not None and cmd.idempotency_key in agg.state.idempotency


def first_result(app: Any, agg: Any, cmd: Command, result: Callable[[Any, list[Any]], dict[str, Any]]) -> dict[str, Any]:
    """The first result of the command that recorded ``cmd``'s key on the stream of ``agg`` — ``result(state then,
    its events)`` — (``idempotency_key_reused`` when that was a different command)."""
    first, last = agg.state.idempotency[cmd.idempotency_key]
    events = app.stream(agg.id, gt=first - 1, lte=last)
    check_repeat(cmd, events)
    return result(app.load(agg.id, version=last).state, events)


def check_repeat(cmd: Command, recorded: Sequence[Any]) -> bool:
    """Whether ``cmd`` is a repeat of the command that recorded ``recorded`` with the same key (the events
    of its key on one stream, in version order): True when the first event's identity equals ``cmd``'s;
    ``idempotency_key_reused`` naming the first command's type when it differs; False when the first
    event has no identity (recorded before identities existed: the caller keeps the old rule)."""
    first = getattr(recorded[0], "idempotency_command", None) if recorded else None
    if first is None:
        return False
    if first != command_identity(cmd):
        raise key_reused(first.type)
    return True
