"""Which stored fields hold people's data, and whose (issue 28, point 1; docs/privacy.md).

Each events module declares, next to its event classes, ``PERSONAL`` — event class -> field path -> whose data
it is — and ``NOT_PERSONAL`` — event class -> field path -> why a text field there is not personal. A field path
is the field's name, then ``[]`` for the items of a list and ``.name`` for a field of a nested Struct (each part
type of a union by its own fields): ``messages[].parts[].text``. A declared path covers everything below it.

Whose: ``owner`` — the chat's owner (or the conversation's user); ``author`` — the ``created_by`` of the message
(or queued prompt) holding the field, else the chat's owner (a model's or a tool's output in a chat is about its
owner's request); ``actor`` — the user who recorded the event. ``text_leaves`` finds every field that can hold text
(``str``, ``Any``, a ``dict``), so a test fails when a new one is declared neither way (``undeclared``).
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from typing import Any, Iterator, Literal, Union
from uuid import UUID

import msgspec

Whose = Literal["owner", "author", "actor"]

#: fields every event has (``ledger.base.LedgerEvent``), and why they are not personal
BASE_NOT_PERSONAL: dict[str, str] = {
    "idempotency_key": "a client's retry key, chosen by software (docs/commands.md asks for a UUID or a counter)",
    "idempotency_command": "the command's type and a SHA-256 digest of its fields",
    "originator_topic": "the aggregate's topic",
}

_SCALARS = (int, float, bool, UUID, datetime.datetime, datetime.date, bytes, type(None))


def text_leaves(tp: Any, path: str = "", seen: frozenset[type] = frozenset()) -> Iterator[str]:
    """The paths under ``tp`` that can hold free text: ``str`` (not a ``Literal``), ``Any``, mappings."""
    for leaf, _ in typed_text_leaves(tp, path, seen):
        yield leaf


def typed_text_leaves(tp: Any, path: str = "", seen: frozenset[type] = frozenset()) -> Iterator[tuple[str, str]]:
    """``text_leaves`` with each one's kind: ``"str"``, ``"any"`` or ``"dict"`` (what a tombstone must be)."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is str:
        yield path, "any" if tp is Any else "str"
        return
    if origin is Literal or tp in _SCALARS or (isinstance(tp, type) and issubclass(tp, _SCALARS)):
        return
    if origin is typing.Annotated:
        yield from typed_text_leaves(typing.get_args(tp)[0], path, seen)
        return
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            yield from typed_text_leaves(arg, path, seen)
        return
    if origin in (list, tuple, set, frozenset):
        for arg in typing.get_args(tp):
            if arg is not Ellipsis:
                yield from typed_text_leaves(arg, f"{path}[]", seen)
        return
    if origin is dict or tp is dict:
        yield path, "dict"  # keys and values a caller chose
        return
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if tp in seen:
            return
        hints = typing.get_type_hints(tp, include_extras=True)
        for name in tp.__struct_fields__:
            yield from typed_text_leaves(hints[name], f"{path}.{name}" if path else name, seen | {tp})
        return
    raise TypeError(f"{path}: no rule for the type {tp!r}")


def event_text_fields(cls: type) -> list[str]:
    """The text paths of an event class's stored fields (not the columns: stream and version)."""
    return list(event_text_kinds(cls))


def event_text_kinds(cls: type) -> dict[str, str]:
    """Each text path of an event class's stored fields and its kind (``typed_text_leaves``)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if f.name in ("originator_id", "originator_version", "timestamp"):
            continue
        for path, kind in typed_text_leaves(hints.get(f.name, Any), f.name):
            out[path] = "any" if out.get(path, kind) != kind else kind  # (a union of kinds: any)
    return out


#: the events modules, each with its ``PERSONAL`` and ``NOT_PERSONAL`` declarations
EVENT_MODULES = ("ledger.access.events", "ledger.catalog.events", "ledger.chat.events", "ledger.conversation.events",
                 "ledger.toolcalls.events", "ledger.evidence.published", "ledger.imports", "ledger.protection.events")


def personal_declarations() -> dict[type, dict[str, str]]:
    """Every event class with personal fields -> its declaration (field path -> whose)."""
    import importlib

    out: dict[type, dict[str, str]] = {}
    for name in EVENT_MODULES:
        out.update(importlib.import_module(name).PERSONAL)
    return out


def under(prefix: str, fields: dict[str, str]) -> dict[str, str]:
    """``fields``' paths below ``prefix`` (a declaration of a nested structure, reused)."""
    return {f"{prefix}.{k}": v for k, v in fields.items()}


def covered(path: str, declared: typing.Iterable[str]) -> bool:
    return any(path == d or path.startswith(d + "[") or path.startswith(d + ".") for d in declared)


def undeclared(cls: type, personal: dict[str, Whose], not_personal: dict[str, str]) -> list[str]:
    """The text paths of ``cls`` that its module declares neither personal nor not personal."""
    declared = [*personal, *not_personal, *BASE_NOT_PERSONAL]
    return [p for p in event_text_fields(cls) if not covered(p, declared)]
