"""The codec's sealing of personal fields, for a ledger opened with a master key (issue 28, point 2;
docs/privacy.md): the glue between the pure core (``ledger.sealing``), the declarations (``ledger.privacy``), the
subjects' keys (``ledger.subjectkeys``) and the stored streams (whose chat or conversation an event is).

A sealed payload is the event's fields with every personal place holding an empty value of its type (``""``,
``{}``, null), and first of all the key ``sealed``: its envelopes. So it decodes as its class does, envelopes
included, and the values are put back into the decoded event; a payload without personal values (or of a ledger
without a master key) is stored as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable
from uuid import UUID

import msgspec

from ledger.privacy import event_text_kinds, personal_declarations
from ledger.sealing import ERASED, Envelope, Place, open_whole, seal, seal_whole, targets, unseal
from ledger.subjectkeys import KeyRing

SEALED_KEY = "sealed"
_MSGPACK_KEY = b"\xa6sealed"  # (msgpack's fixstr of the key, right after the map's header)


def is_sealed(data: bytes) -> bool:
    """Whether a stored payload is sealed: msgpack (whatever the ledger's format) whose first key is ``sealed``
    (cheap enough for every event read)."""
    return data[:1] != b"{" and _MSGPACK_KEY in data[1:10]


class SealedHeader(msgspec.Struct):
    """Only the envelopes of a sealed payload (the rest is skipped by the decoder)."""

    sealed: list[Envelope]


_HEADER = msgspec.msgpack.Decoder(SealedHeader)


def sealed_header(data: bytes) -> list[Envelope] | None:
    """The envelopes of a payload sealed whole (the clear fields skipped, not decoded); None when it is not one
    envelope sealed whole."""
    envelopes = _HEADER.decode(data).sealed
    return envelopes if len(envelopes) == 1 and envelopes[0].whole else None


def event_identity(stream_id: UUID, version: int, topic: str) -> bytes:
    """What each box of an event is bound to."""
    return stream_id.bytes + version.to_bytes(8, "big", signed=True) + topic.encode()


class Sealer:
    """Seals and unseals the personal fields of one application's events."""

    def __init__(self, app: Any, master: bytes, owners_cache: int = 100_000) -> None:
        self.app = app
        self.keys = KeyRing(app, master)
        self.declared = personal_declarations()
        self._kinds_of: dict[type, dict[str, str]] = {}  # event class -> its text paths' kinds
        self._owners: OrderedDict[UUID, UUID | None] = OrderedDict()
        self._owners_max = owners_cache
        self._lock = threading.Lock()
        #: (subject, number) -> key bytes (None: destroyed), for this process's life (no command destroys keys yet)
        self._keys: dict[tuple[UUID, int], bytes | None] = {}
        self._current: dict[UUID, tuple[int, bytes]] = {}

    # -- keys ----------------------------------------------------------------------------------------------------

    def _current_key(self, subject: UUID) -> tuple[int, bytes]:
        found = self._current.get(subject)
        if found is None:
            found = self._current[subject] = self.keys.current(subject)
            self._keys[subject, found[0]] = found[1]
        return found

    def _key(self, subject: UUID, number: int) -> bytes | None:
        if (subject, number) not in self._keys:
            self._keys[subject, number] = self.keys.get(subject, number)
        return self._keys[subject, number]

    # -- whose ---------------------------------------------------------------------------------------------------

    def owner_of(self, stream_id: UUID, event: Any = None) -> UUID | None:
        """The user a stream's content belongs to: a chat's owner, a tool call's chat's, a conversation's user."""
        from ledger.chat.events import ChatCreated
        from ledger.conversation.events import ConversationStarted
        from ledger.toolcalls.events import ToolCallExecutionOpened

        with self._lock:
            if stream_id in self._owners:
                return self._owners[stream_id]
        owner: UUID | None
        if isinstance(event, ChatCreated):
            owner = event.owner_id
        elif isinstance(event, ToolCallExecutionOpened):
            owner = self.owner_of(event.chat_id)
        elif isinstance(event, ConversationStarted):
            owner = event.actor
        else:
            owner = self._owner_from_first_event(stream_id)
        with self._lock:
            self._owners[stream_id] = owner
            if len(self._owners) > self._owners_max:
                self._owners.popitem(last=False)
        return owner

    def _owner_from_first_event(self, stream_id: UUID) -> UUID | None:
        """From the stream's first stored event, its fields as stored (ids are never sealed)."""
        from ledger.chat.events import ChatCreated
        from ledger.conversation.events import ConversationStarted
        from ledger.toolcalls.events import ToolCallExecutionOpened

        stored = self.app.recorder.select_events(stream_id, lte=1)
        if not stored:
            return None
        data = bytes(stored[0].state)
        raw = msgspec.json.decode(data) if data[:1] == b"{" else msgspec.msgpack.decode(data)
        topic = stored[0].topic
        if topic == ChatCreated.TOPIC:
            return UUID(str(raw["owner_id"]))
        if topic == ToolCallExecutionOpened.TOPIC:
            return self.owner_of(UUID(str(raw["chat_id"])))
        if topic == ConversationStarted.TOPIC and raw.get("actor"):
            return UUID(str(raw["actor"]))
        return None

    # -- the codec's two steps --------------------------------------------------------------------------------

    def seal(self, event: Any, state: dict[str, Any], topic: str, plain: Callable[[], bytes]) -> dict[str, Any] | None:
        """The payload to store for ``event`` (its fields as plain data, ``sealed`` first), or None when it has
        no personal value to seal (it is stored as before). ``plain()``: its bytes as stored unsealed (an event
        whose personal values are all one subject's keeps them whole in its one box: ``ledger.sealing``)."""
        declared = self.declared.get(type(event))
        if not declared:
            return None
        payload = msgspec.to_builtins(state)
        stream = event.originator_id
        places = targets(payload, declared, self.owner_of(stream, event), getattr(event, "actor", None))
        if not places:  # (``targets`` leaves out null places)
            return None
        kinds = self._kinds(type(event))
        identity = event_identity(stream, event.originator_version, topic)
        placeholder = lambda place: _PLACEHOLDER[kinds.get(_declared_path(place), "any")]()  # noqa: E731
        subjects = {s for _, s in places}
        if len(subjects) == 1:
            envelopes = [seal_whole(payload, places, self._current_key(next(iter(subjects))), plain(), identity,
                                    placeholder)]
        else:
            envelopes = seal(payload, places, self._current_key, identity, placeholder)
        return {SEALED_KEY: msgspec.to_builtins(envelopes, builtin_types=(bytes,)), **payload}

    def opened(self, envelopes: list[Envelope], stream_id: UUID, version: int, topic: str) -> bytes | None:
        """The unsealed payload of an event sealed whole, when its key is at hand; None otherwise (decode the
        stored payload and ``unseal`` it: tombstones, or several subjects' values)."""
        if len(envelopes) != 1 or not envelopes[0].whole:
            return None
        e = envelopes[0]
        key = self._key(e.subject, e.key)
        return None if key is None else open_whole(e, key, event_identity(stream_id, version, topic))

    def _kinds(self, cls: type) -> dict[str, str]:
        kinds = self._kinds_of.get(cls)
        if kinds is None:
            kinds = self._kinds_of[cls] = event_text_kinds(cls)
        return kinds

    def unseal(self, state: dict[str, Any], envelopes: list[Envelope], cls: type, stream_id: UUID, version: int,
               topic: str) -> dict[str, Any]:
        """A decoded event's fields with its sealed values back in their places (tombstones where a key was
        destroyed). The fields are typed (the codec decoded the payload with its placeholders): lists and the
        fields' dict are changed in place, frozen structures replaced."""
        kinds = self._kinds(cls)
        state, _ = unseal(state, envelopes, self._key, event_identity(stream_id, version, topic),
                          lambda place: _TOMBSTONE[kinds.get(_declared_path(place), "any")](), _put)
        return state


#: what a sealed place holds in the stored payload, and what it reads once its key is destroyed, by kind
_PLACEHOLDER = {"str": str, "dict": dict, "any": lambda: None}
_TOMBSTONE = {"str": lambda: ERASED, "dict": lambda: {ERASED: ERASED}, "any": lambda: ERASED}


def _put(target: Any, place: Place, value: Any) -> Any:
    """``target`` with ``value`` at ``place``: dicts and lists changed in place (a decoded event's own), frozen
    structures replaced (``msgspec.structs.replace``)."""
    step, rest = place[0], place[1:]
    if isinstance(target, (dict, list)):
        target[step] = _put(target[step], rest, value) if rest else value  # type: ignore[index]
        return target
    return msgspec.structs.replace(target, **{str(step): _put(getattr(target, str(step)), rest, value) if rest
                                              else value})


def _declared_path(place: Place) -> str:
    """``("messages", 0, "parts", 1, "text")`` -> ``"messages[].parts[].text"``."""
    out = ""
    for step in place:
        out += "[]" if isinstance(step, int) else (f".{step}" if out else step)
    return out
