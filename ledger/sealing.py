"""Sealing the personal fields of a stored payload (issue 28, point 2; docs/privacy.md): pure, over the payload
as plain data (the dicts, lists and strings msgspec encodes), with AES-256-GCM from the ``cryptography`` package.

* ``targets(payload, declared, owner, actor)``: the concrete places (``("messages", 0, "parts", 1, "text")``) of an
  event's personal fields (its module's ``PERSONAL`` declaration, ``ledger.privacy``) and whose each is;
* ``seal_whole`` (an event whose personal values are all one subject's: the box holds the whole payload, encoded
  as the codec reads any payload, so a reader decrypts and decodes it: ``ledger.sealer.Sealer.open_payload``) or
  ``seal`` (each subject's values in its own envelope): an **envelope** is the subject, the key's number, the
  places (structure, not content: in clear), a nonce and the AES-GCM box; the places in the payload get a
  placeholder of their type. The event's own identity (stream, version, topic) and the envelope's subject, key and
  places are the box's associated data, so a box cannot be moved to another event, subject or place;
* ``unseal``: the values back in their places, or, where the subject's key was destroyed, a tombstone
  (``ERASED``, of the place's kind). A box that does not open under a key that exists is an error, never a
  tombstone: a changed record must not pass for an erased one.

The envelope list is stored beside the payload's fields; the hash chains and the Merkle log cover it as stored,
so destroying a key changes no stored byte.
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict
from typing import Any, Callable
from uuid import UUID

import msgspec

#: what a reader sees where erased content was
ERASED = "[erased]"

Place = tuple[str | int, ...]


class Envelope(msgspec.Struct, array_like=True, frozen=True):
    subject: UUID
    key: int  # the number of the subject's data key (a subject gets a new key after an erasure)
    places: list[list[str | int]]
    nonce: bytes
    box: bytes
    #: the box holds the whole payload, encoded as the codec reads any payload (an event whose personal values
    #: are all one subject's: a reader decrypts it and decodes it as usual), not the list of the places' values
    whole: bool = False

    def stored(self) -> list[Any]:
        """As the sealed payload stores it: its fields in order, the subject as text."""
        return [str(self.subject), self.key, self.places, self.nonce, self.box, self.whole]


class SealError(ValueError):
    """An envelope that does not open under the key it names: the record was changed."""


@functools.lru_cache(maxsize=1024)
def _steps(declared: str) -> tuple[str, ...]:
    """``"messages[].parts[].text"`` -> ``("messages", "[]", "parts", "[]", "text")`` (declarations are few: kept)."""
    out: list[str] = []
    for part in declared.split("."):
        name, brackets = part.rstrip("[]"), (len(part) - len(part.rstrip("[]"))) // 2
        out.append(name)
        out.extend(["[]"] * brackets)
    return tuple(out)


def _get(payload: Any, place: Place) -> Any:
    for step in place:
        payload = payload[step]
    return payload


def _set(payload: Any, place: Place, value: Any) -> None:
    _get(payload, place[:-1])[place[-1]] = value


_LEAF = "\0"  # (a trie's end: the declared path's whose)


def trie(declared: dict[str, str]) -> dict[str, Any]:
    """The declared paths (path -> whose) as one trie of steps, so a payload is walked once for all of them (an
    event class's is made once: ``ledger.sealer``)."""
    root: dict[str, Any] = {}
    for path, whose in declared.items():
        node = root
        for step in _steps(path):
            node = node.setdefault(step, {})
        node[_LEAF] = whose
    return root


@functools.lru_cache(maxsize=4096)
def _author(created_by: str) -> UUID:
    """A message's ``created_by`` as text -> its UUID (authors are few: kept)."""
    return UUID(created_by)


def targets(payload: dict[str, Any], declared: dict[str, str], owner: UUID | None,
            actor: UUID | None) -> list[tuple[Place, UUID]]:
    """Each personal place of ``payload`` (a null one has none) and its subject: ``owner`` (the stream's),
    ``author`` (the enclosing message's ``created_by``, else the owner), ``actor`` (the event's, else the owner).
    A place with no subject to key it (a stream with no owner) is left out."""
    return targets_in(payload, trie(declared), owner, actor)


def targets_in(payload: dict[str, Any], declared: dict[str, Any], owner: UUID | None,
               actor: UUID | None) -> list[tuple[Place, UUID]]:
    """``targets`` with the declaration's ``trie`` (made once per event class)."""
    out: list[tuple[Place, UUID]] = []
    actor = actor or owner

    def walk(node: Any, trie_: dict[str, Any], at: Place, author: Any) -> None:
        whose = trie_.get(_LEAF)
        if whose is not None:
            subject = owner if whose == "owner" else actor if whose == "actor" else (
                (author if type(author) is UUID else _author(str(author))) if author else owner)
            if subject is not None:
                out.append((at, subject))
            return
        if type(node) is list:
            inner = trie_.get("[]")
            if inner is not None:
                for i, item in enumerate(node):
                    if item is not None:
                        walk(item, inner, (*at, i), author)
            return
        if type(node) is dict:
            author = node.get("created_by") or author  # (text is parsed only when a place needs it)
            for step, inner in trie_.items():
                if step != _LEAF and step != "[]":
                    value = node.get(step)
                    if value is not None:
                        walk(value, inner, (*at, step), author)

    walk(payload, declared, (), None)
    return out


def key_context(subject: UUID, key: int) -> bytes:
    """The part of a box's associated data that names its key: the subject and the key's number."""
    return subject.bytes + key.to_bytes(4, "big")


def associated(event: bytes, key: bytes, places: bytes | msgspec.Raw, whole: bool) -> bytes:
    """A box's associated data: the event's identity, its key (``key_context``), its places as msgpack (as stored
    in the envelope: bytes, or the stored bytes themselves as ``msgspec.Raw``), and whether the box holds the
    whole payload."""
    return b"".join((event, key, places, b"W" if whole else b""))


def _associated(event: bytes, subject: UUID, key: int, places: list[list[str | int]], whole: bool = False) -> bytes:
    return associated(event, key_context(subject, key), msgspec.msgpack.encode(places), whole)


def seal_whole(payload: dict[str, Any], places: list[tuple[Place, UUID]], key: tuple[int, bytes], plain: bytes,
               event: bytes, placeholder: Callable[[Place], Any] = lambda _: None) -> Envelope:
    """One subject's event: the box holds ``plain`` (the whole payload's bytes, as the codec decodes any), the
    places get their placeholders in ``payload`` (what a reader without the key still decodes)."""
    (subject,) = {s for _, s in places}
    number, secret = key
    listed = [list(p) for p, _ in places]
    nonce = os.urandom(12)
    box = aead(secret).encrypt(nonce, plain, _associated(event, subject, number, listed, True))
    for p, _ in places:
        _set(payload, p, placeholder(p))
    return Envelope(subject, number, listed, nonce, box, True)


_ciphers: dict[bytes, Any] = {}


def forget_ciphers() -> None:
    """Drop the AES-GCM objects kept (``aead``): after an erasure, no destroyed key stays in them."""
    _ciphers.clear()


def aead(key: bytes) -> Any:
    """An AES-GCM object per key (made once: its key schedule is most of a small box's cost)."""
    cipher = _ciphers.get(key)
    if cipher is None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if len(_ciphers) > 10_000:
            _ciphers.clear()
        cipher = _ciphers[key] = AESGCM(key)
    return cipher


def seal(payload: dict[str, Any], places: list[tuple[Place, UUID]], key_of: Callable[[UUID], tuple[int, bytes]],
         event: bytes, placeholder: Callable[[Place], Any] = lambda _: None) -> list[Envelope]:
    """Move the values at ``places`` into one envelope per subject (``key_of(subject)``: the number and bytes of
    the subject's current data key); their places get ``placeholder(place)`` (a value of the place's type, so
    the payload still decodes as its class). ``event``: the event's identity, bound to each box."""
    by_subject: dict[UUID, list[Place]] = defaultdict(list)
    for place, subject in places:
        by_subject[subject].append(place)
    envelopes = []
    for subject, subject_places in sorted(by_subject.items()):
        number, key = key_of(subject)
        values = [_get(payload, p) for p in subject_places]
        listed = [list(p) for p in subject_places]
        nonce = os.urandom(12)
        box = aead(key).encrypt(nonce, msgspec.msgpack.encode(values), _associated(event, subject, number, listed))
        for p in subject_places:
            _set(payload, p, placeholder(p))
        envelopes.append(Envelope(subject, number, listed, nonce, box))
    return envelopes


def unseal(payload: Any, envelopes: list[Envelope], key_of: Callable[[UUID, int], bytes | None],
           event: bytes, tombstone: Callable[[Place], Any] = lambda _: ERASED,
           put: Callable[[Any, Place, Any], Any] | None = None) -> tuple[Any, set[UUID]]:
    """Put the sealed values back (``key_of(subject, number)``: the key's bytes, None once destroyed), or the
    ``tombstone`` of each place whose key is gone: the payload and the subjects whose content was erased.
    ``put(payload, place, value)`` returns the payload with the value put (default: plain data, in place)."""
    from cryptography.exceptions import InvalidTag

    def in_place(target: Any, place: Place, value: Any) -> Any:
        _set(target, place, value)
        return target

    put = put or in_place
    erased: set[UUID] = set()
    for e in envelopes:
        places = [tuple(p) for p in e.places]
        key = key_of(e.subject, e.key)
        if key is None:
            erased.add(e.subject)
            for p in places:
                payload = put(payload, p, tombstone(p))
            continue
        if e.whole:
            raise SealError("a whole envelope is opened before decoding (ledger.sealer.Sealer.open_payload)")
        try:
            values = msgspec.msgpack.decode(aead(key).decrypt(e.nonce, e.box, _associated(event, e.subject, e.key,
                                                                                                e.places)))
        except InvalidTag:
            raise SealError(f"the sealed content of subject {e.subject} does not open under its key {e.key}: the "
                            "record was changed") from None
        if not isinstance(values, list) or len(values) != len(places):
            raise SealError("the sealed content does not match its places")
        for p, v in zip(places, values):
            payload = put(payload, p, v)
    return payload, erased
