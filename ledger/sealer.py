"""The codec's sealing of personal fields, for a ledger opened with a master key (issue 28, point 2;
docs/privacy.md): the glue between the pure core (``ledger.sealing``), the declarations (``ledger.privacy``), the
subjects' keys (``ledger.subjectkeys``) and the stored streams (whose chat or conversation an event is).

A sealed payload is the event's fields with every personal place holding an empty value of its type (``""``,
``{}``, null), and first of all the key ``sealed``: its envelopes. So it decodes as its class does, envelopes
included, and the values are put back into the decoded event; a payload without personal values (or of a ledger
without a master key) is stored as before.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Iterator, NamedTuple, Sequence
from uuid import UUID

import msgspec
from cryptography.exceptions import InvalidTag

from ledger.privacy import event_text_kinds, personal_declarations
from ledger.sealing import (ERASED, Envelope, Place, SealError, aead, associated, forget_ciphers, key_context,
                             seal, seal_whole, targets_in, trie, unseal)
from ledger.subjectkeys import KeyRing

SEALED_KEY = "sealed"
_MSGPACK_KEY = b"\xa6sealed"  # (msgpack's fixstr of the key, right after the map's header)


@functools.cache
def _starts() -> tuple[type, type, type]:
    """The first events that say whose a stream is (imported on first use: their modules import the codec's)."""
    from ledger.chat.events import ChatCreated
    from ledger.conversation.events import ConversationStarted
    from ledger.toolcalls.events import ToolCallExecutionOpened

    return ChatCreated, ToolCallExecutionOpened, ConversationStarted


def is_sealed(data: bytes) -> bool:
    """Whether a stored payload is sealed: msgpack (whatever the ledger's format) whose first key is ``sealed``,
    after the map's header (one byte, or three from 16 fields on: ``\\xde`` and the count). Two slices compared:
    cheap enough for every event read (a JSON payload starts ``{"``)."""
    return data[1:8] == _MSGPACK_KEY or (data[:1] == b"\xde" and data[3:10] == _MSGPACK_KEY)


class StoredEnvelope(msgspec.Struct, array_like=True, gc=False):
    """An envelope as stored, for the read path of a payload sealed whole: the subject as its stored text (a key
    of the keys kept in memory, not parsed per event) and the places as their stored bytes (what the box's
    associated data covers: ``ledger.sealing.associated``), never decoded."""

    subject: str
    key: int
    places: msgspec.Raw
    nonce: bytes
    box: bytes
    whole: bool = False


class SealedHeader(msgspec.Struct, gc=False):
    """Only the envelopes of a sealed payload (the rest is skipped by the decoder)."""

    sealed: list[StoredEnvelope]


_HEADER = msgspec.msgpack.Decoder(SealedHeader)


def sealed_header(data: bytes) -> StoredEnvelope | None:
    """The one envelope of a payload sealed whole (the clear fields skipped, not decoded); None when it is not
    one envelope sealed whole."""
    envelopes = _HEADER.decode(data).sealed
    return envelopes[0] if len(envelopes) == 1 and envelopes[0].whole else None


def first_fields(recorder: Any, stream_id: UUID) -> tuple[str, dict[str, Any]] | None:
    """A stream's first event as stored: its topic and fields, the sealed ones empty (ids are never sealed, so who
    and what a stream is can be read without any key: ``stored_id``); None for a stream with no event."""
    stored = recorder.select_events(stream_id, lte=1)
    if not stored:
        return None
    data = bytes(stored[0].state)
    return stored[0].topic, (msgspec.json.decode(data) if data[:1] == b"{" else msgspec.msgpack.decode(data))


def stored_id(value: Any) -> UUID:
    """An id as a payload read without its class stores it: text (JSON, and sealed payloads before 2026-12-04) or
    16 bytes (a sealed payload's msgpack)."""
    return UUID(bytes=value) if isinstance(value, bytes) else UUID(str(value))


def event_identity(stream_id: UUID, version: int, topic: str) -> bytes:
    """What each box of an event is bound to."""
    return stream_id.bytes + version.to_bytes(8, "big", signed=True) + _topic_bytes(topic)


@functools.lru_cache(maxsize=1024)
def _topic_bytes(topic: str) -> bytes:
    return topic.encode()


class NewKey(NamedTuple):
    """A key made for a new stream's first event, written in that event's transaction (``Sealer._current_key``)."""

    subject: UUID
    scope: UUID
    number: int
    key: bytes
    row: tuple[Any, ...]  # (``KeyRing.new_key``'s, for ``KeyRing.insert_new``)


class Sealer:
    """Seals and unseals the personal fields of one application's events."""

    #: how often (seconds) a process asks whether keys were destroyed elsewhere (another process's erasure): the
    #: longest a key destroyed by another process is still used from this one's memory
    REFRESH = 1.0

    def __init__(self, app: Any, master: bytes, owners_cache: int = 100_000) -> None:
        self.app = app
        self.keys = KeyRing(app, master)
        self.declared = personal_declarations()
        self._kinds_of: dict[type, dict[str, str]] = {}  # event class -> its text paths' kinds
        self._plans: dict[type, Any] = {}  # event class -> its sealing (``_plan``)
        self._whose: OrderedDict[UUID, tuple[UUID | None, UUID]] = OrderedDict()  # stream -> (owner, scope)
        self._owners_max = owners_cache
        self._lock = threading.Lock()
        #: (subject, number) -> key bytes (None: destroyed); (subject, scope) -> the current key: kept until a key
        #: is destroyed (``refresh``: this process's erasures at once, another's within ``REFRESH`` seconds)
        self._keys: dict[tuple[UUID, int], bytes | None] = {}
        self._current: dict[tuple[UUID, UUID], tuple[int, bytes]] = {}
        #: (subject as stored, number) -> (the key's AES-GCM object, the associated data's subject and number) or
        #: None (destroyed): the read path of a payload sealed whole (``open_payload``), dropped with the keys
        self._openers: dict[tuple[str, int], tuple[Any, bytes] | None] = {}
        self._epoch: Any = None
        self._checked = 0.0
        #: called (no arguments) when keys were destroyed: whatever else holds decrypted content drops it
        self.on_erasure: list[Callable[[], None]] = []
        #: keys made for a new stream's first event, not stored yet, by stream (the keys' scope), taken by the
        #: recorder into that event's transaction (``take_new_keys``, ``forget_new_keys``)
        self._new: dict[UUID, list[NewKey]] = {}
        #: scopes whose first save with a new key failed: their keys are made (or found) on their own since
        self._slow: set[UUID] = set()
        self._saving = threading.local()

    # -- keys ----------------------------------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Drop the keys kept in memory when any key was destroyed since they were read (asked of the database at
        most every ``REFRESH`` seconds, or now with ``force``); True when they were dropped."""
        now = time.monotonic()
        if not force and now - self._checked < self.REFRESH:
            return False
        self._checked = now
        epoch = self.keys.epoch()
        if epoch == self._epoch:
            return False
        # Any change drops them, the first reading too: keys may have been read (or made) before the key table
        # had an epoch to read, and a first reading taken as the baseline kept them past the erasure that made it
        self._epoch = epoch
        with self._lock:
            self._keys.clear()
            self._current.clear()
            self._openers = {}
            forget_ciphers()
            for waiting in self._new.values():  # (not stored yet, so not destroyed: kept for their saves)
                for new in waiting:
                    self._current[new.subject, new.scope] = (new.number, new.key)
                    self._keys[new.subject, new.number] = new.key
        for drop in self.on_erasure:
            drop()
        return True

    def _current_key(self, subject: UUID, scope: UUID, first: bool = False) -> tuple[int, bytes]:
        """The subject's key for ``scope``. ``first``: for the first event of the stream that is the scope (a new
        chat or conversation: no key of it can exist), which, inside a save (``saving``) through a recorder that
        takes new keys, gets a new key written with that event (``take_new_keys``) rather than in a transaction
        of its own."""
        self.refresh()
        found = self._current.get((subject, scope))
        if found is None:
            if (first and getattr(self._saving, "on", False) and scope not in self._slow
                    and getattr(self.app.recorder, "new_keys", None) is self):  # (``ledger.recorders.KeysWithEvents``)
                number, key, row = self.keys.new_key(subject, scope)
                with self._lock:
                    self._new.setdefault(scope, []).append(NewKey(subject, scope, number, key, row))
                found = (number, key)
            else:
                found = self.keys.current(subject, scope)
            self._current[subject, scope] = found
            self._keys[subject, found[0]] = found[1]
        return found

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """The application's save, in this thread: events encoded now go to the recorder's ``insert_events``,
        which writes their new keys (encoding outside a save — an import, a copy — makes keys on their own)."""
        self._saving.on = True
        try:
            yield
        finally:
            self._saving.on = False

    def take_new_keys(self, stored: Sequence[Any]) -> list[NewKey]:
        """The new keys of these events' streams (``_current_key``), for the recorder to write in their
        transaction; taken once (a key waits here until a save of its stream takes it)."""
        if not self._new:
            return []
        with self._lock:
            return [k for oid in {e.originator_id for e in stored} for k in self._new.pop(oid, ())]

    def forget_new_keys(self, taken: list[NewKey]) -> None:
        """After a transaction that wrote ``taken`` and did not surely commit (rolled back, or in doubt): the keys
        are forgotten, and their scopes' keys are looked up (or made) on their own from now on, so a retry finds
        one stored meanwhile."""
        with self._lock:
            for new in taken:
                self._current.pop((new.subject, new.scope), None)
                self._keys.pop((new.subject, new.number), None)
                self._slow.add(new.scope)
            self._openers = {}

    def _key(self, subject: UUID, number: int) -> bytes | None:
        self.refresh()
        if (subject, number) not in self._keys:
            self._keys[subject, number] = self.keys.get(subject, number)
        return self._keys[subject, number]

    # -- whose ---------------------------------------------------------------------------------------------------

    def owner_of(self, stream_id: UUID, event: Any = None) -> UUID | None:
        """The user a stream's content belongs to: a chat's owner, a tool call's chat's, a conversation's user."""
        return self.whose(stream_id, event)[0]

    def whose(self, stream_id: UUID, event: Any = None) -> tuple[UUID | None, UUID]:
        """The stream's owner (``owner_of``) and the scope of its keys: the chat (for a tool-call execution, its
        chat's), the conversation, else the stream itself."""
        found = self._whose.get(stream_id)  # (a read without the lock: the lock keeps inserts and evictions whole)
        if found is not None:
            return found
        chat_created, execution_opened, conversation_started = _starts()
        if isinstance(event, chat_created):
            found = (event.owner_id, stream_id)
        elif isinstance(event, execution_opened):
            found = (self.owner_of(event.chat_id), event.chat_id)
        elif isinstance(event, conversation_started):
            found = (event.actor, stream_id)
        else:
            found = self._from_first_event(stream_id)
        with self._lock:
            self._whose[stream_id] = found
            if len(self._whose) > self._owners_max:
                self._whose.popitem(last=False)
        return found

    def _from_first_event(self, stream_id: UUID) -> tuple[UUID | None, UUID]:
        """From the stream's first stored event, its fields as stored (ids are never sealed)."""
        chat_created, execution_opened, conversation_started = _starts()
        first = first_fields(self.app.recorder, stream_id)
        if first is None:
            return None, stream_id
        topic, raw = first
        if topic == chat_created.TOPIC:
            return stored_id(raw["owner_id"]), stream_id
        if topic == execution_opened.TOPIC:
            chat = stored_id(raw["chat_id"])
            return self.owner_of(chat), chat
        if topic == conversation_started.TOPIC and raw.get("actor"):
            return stored_id(raw["actor"]), stream_id
        return None, stream_id

    # -- the codec's two steps --------------------------------------------------------------------------------

    def seal(self, event: Any, state: dict[str, Any], topic: str, plain: Callable[[], bytes]) -> dict[str, Any] | None:
        """The payload to store for ``event`` (its fields as plain data, ``sealed`` first, the envelopes as
        ``Envelope.stored``), or None when it has no personal value to seal (it is stored as before).
        ``plain()``: the whole payload's bytes (the codec's msgpack), which an event whose personal values are
        all one subject's keeps in its one box (``ledger.sealing``)."""
        cls = type(event)
        plan = self._plans.get(cls)
        if plan is None:
            plan = self._plans[cls] = self._plan(cls)
        if not plan:
            return None
        trie, placeholder = plan
        payload = msgspec.to_builtins(state, builtin_types=_AS_THEY_ARE)
        stream = event.originator_id
        owner, scope = self.whose(stream, event)
        places = targets_in(payload, trie, owner, getattr(event, "actor", None))
        if not places:  # (``targets`` leaves out null places)
            return None
        identity = event_identity(stream, event.originator_version, topic)
        first = scope == stream and event.originator_version == 1  # (a new chat's or conversation's first event)
        subject = places[0][1]
        if all(s == subject for _, s in places):
            envelopes = [seal_whole(payload, places, self._current_key(subject, scope, first), plain(), identity,
                                    placeholder)]
        else:
            envelopes = seal(payload, places, lambda subject: self._current_key(subject, scope, first), identity,
                             placeholder)
        return {SEALED_KEY: [e.stored() for e in envelopes], **payload}

    def _plan(self, cls: type) -> tuple[dict[str, Any], Callable[[Place], Any]] | tuple[()]:
        """An event class's sealing, made once: its declaration's trie and the placeholder of each place (a value
        of its kind: ``_PLACEHOLDER``); ``()`` for a class with nothing personal."""
        declared = self.declared.get(cls)
        if not declared:
            return ()
        kinds = self._kinds(cls)
        return trie(declared), lambda place: _PLACEHOLDER[kinds.get(_declared_path(place), "any")]()

    def open_payload(self, data: bytes, stream_id: UUID, version: int, topic: str) -> bytes | None:
        """The unsealed payload of a stored payload sealed whole, when its key is at hand; None otherwise (decode
        the stored payload and ``unseal`` it: tombstones, or several subjects' values). The read path of every
        sealed event (a rebuild's): the box ``ledger.sealing.seal_whole`` made, opened with the key's cipher and
        the associated data's key part kept per key (``SealError`` when the box does not open)."""
        e = sealed_header(data)
        if e is None:
            return None
        if time.monotonic() - self._checked >= self.REFRESH:
            self.refresh()
        opener = self._openers.get((e.subject, e.key), False)
        if opener is False:
            subject = UUID(e.subject)
            key = self._key(subject, e.key)
            opener = self._openers[e.subject, e.key] = None if key is None else (
                aead(key), key_context(subject, e.key))
        if opener is None:
            return None
        try:
            return opener[0].decrypt(e.nonce, e.box, associated(event_identity(stream_id, version, topic), opener[1],
                                                                e.places, True))  # type: ignore[no-any-return]
        except InvalidTag:
            raise SealError(f"the sealed content of subject {e.subject} does not open under its key {e.key}: the "
                            "record was changed") from None

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


#: the values a sealed payload keeps as they are, for its msgpack (ids as 16 bytes, times as timestamps: smaller
#: than their text; a timestamp is UTC, as every time the ledger records is — a time with another offset would read
#: back as the same instant in UTC); a declared place holds text only, so its values are as before
_AS_THEY_ARE = (UUID, datetime.datetime, datetime.date, bytes)

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


@functools.lru_cache(maxsize=4096)
def _declared_path(place: Place) -> str:
    """``("messages", 0, "parts", 1, "text")`` -> ``"messages[].parts[].text"``."""
    out = ""
    for step in place:
        out += "[]" if isinstance(step, int) else (f".{step}" if out else step)
    return out
