"""Issue 28, point 2 (the core, pure): sealing the personal fields of a payload under per-subject keys. By
hypothesis over chat-shaped payloads (messages by several authors, tool calls, titles) with the real declarations
of ``ledger.chat.events``: unsealing gives the payload back; sealed, it holds none of the personal values; with
some subjects' keys destroyed, exactly their places read ``[erased]`` and nothing else changes; a box moved to
another event, another place or altered does not open."""

from __future__ import annotations

import copy
import os
import uuid

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.chat import events as ev
from ledger.sealing import ERASED, SealError, seal, targets, unseal

USERS = [uuid.UUID(int=i + 1) for i in range(4)]
DECLARED = {**ev.PERSONAL[ev.ChatCreated]}  # title (owner) and every message's content (author)


def marker(draw) -> str:
    return f"secret-{draw(st.integers(0, 10**9))}-{draw(st.text(alphabet='abcdefgh', min_size=1, max_size=6))}"


@st.composite
def payloads(draw):
    def part():
        kind = draw(st.sampled_from(["text", "reasoning", "tool-call", "tool-result"]))
        if kind in ("text", "reasoning"):
            return {"type": kind, "text": marker(draw)}
        if kind == "tool-call":
            return {"type": kind, "tool_call_id": f"call_{draw(st.integers(0, 9))}", "tool_name": "read",
                    "args": {"path": marker(draw)}}
        return {"type": kind, "tool_call_id": "call_1", "tool_name": "read", "result": {"text": marker(draw)}}

    messages = []
    for i in range(draw(st.integers(0, 5))):
        m = {"message_id": i + 1, "role": draw(st.sampled_from(["user", "assistant", "tool"])),
             "parts": [part() for _ in range(draw(st.integers(0, 3)))]}
        author = draw(st.sampled_from([None, *USERS]))
        if author is not None:
            m["created_by"] = str(author)
        messages.append(m)
    return {"title": marker(draw), "messages": messages, "owner_id": str(USERS[0])}


class Keys:
    """Each subject's key number 1, until destroyed."""

    def __init__(self) -> None:
        self.keys = {u: os.urandom(32) for u in USERS}
        self.destroyed: set[uuid.UUID] = set()

    def current(self, subject):
        return 1, self.keys[subject]

    def get(self, subject, number):
        return None if subject in self.destroyed or number != 1 else self.keys[subject]


def personal_values(payload, places):
    from ledger.sealing import _get

    return [(p, s, copy.deepcopy(_get(payload, p))) for p, s in places]


@settings(max_examples=200, deadline=None)
@given(payloads(), st.sets(st.sampled_from(USERS)))
def test_sealed_content_opens_hides_and_erases_exactly_its_subjects(payload, destroyed) -> None:
    keys, event = Keys(), b"stream-1/v3/topic"
    original = copy.deepcopy(payload)
    places = targets(payload, DECLARED, owner=USERS[0], actor=None)
    values = personal_values(payload, places)
    envelopes = seal(payload, places, keys.current, event)
    stored = msgspec.json.encode({**payload, "sealed": envelopes})
    for _, _, v in values:  # not one personal value is left readable
        for text in _strings(v):
            assert text.encode() not in stored
    assert all(m.get("parts") is None or all(p.get("tool_name", "read") == "read" for p in m["parts"])
               for m in payload["messages"])  # what is not personal stays

    opened = copy.deepcopy(payload)
    assert unseal(opened, envelopes, keys.get, event)[1] == set()
    assert opened == original

    keys.destroyed = destroyed
    erased = copy.deepcopy(payload)
    assert unseal(erased, envelopes, keys.get, event)[1] == destroyed & {s for _, s, _ in values}
    from ledger.sealing import _get

    for place, subject, value in values:
        assert _get(erased, place) == (ERASED if subject in destroyed else value)
    assert {k: v for k, v in erased.items() if k not in ("title", "messages")} == \
        {k: v for k, v in original.items() if k not in ("title", "messages")}


def _strings(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for x in v.values():
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def test_a_message_is_its_authors_and_the_rest_the_owners() -> None:
    payload = {"title": "t", "messages": [
        {"role": "user", "created_by": str(USERS[1]), "parts": [{"type": "text", "text": "mine"}]},
        {"role": "assistant", "parts": [{"type": "text", "text": "answer"}]}]}
    subjects = dict(targets(payload, DECLARED, owner=USERS[0], actor=None))
    assert subjects == {("title",): USERS[0], ("messages", 0, "parts", 0, "text"): USERS[1],
                        ("messages", 1, "parts", 0, "text"): USERS[0]}


def test_a_box_opens_only_where_it_was_sealed() -> None:
    keys = Keys()
    payload = {"title": "hello", "messages": [{"role": "user", "created_by": str(USERS[1]),
                                               "parts": [{"type": "text", "text": "hi"}]}]}
    envelopes = seal(payload, targets(payload, DECLARED, USERS[0], None), keys.current, b"event-A")
    with pytest.raises(SealError):
        unseal(copy.deepcopy(payload), envelopes, keys.get, b"event-B")  # moved to another event
    moved = [msgspec.structs.replace(e, places=[["title"]]) if e.subject == USERS[1] else e for e in envelopes]
    with pytest.raises(SealError):
        unseal(copy.deepcopy(payload), moved, keys.get, b"event-A")  # another place
    tampered = [msgspec.structs.replace(e, box=bytes([e.box[0] ^ 1]) + e.box[1:]) for e in envelopes]
    with pytest.raises(SealError):
        unseal(copy.deepcopy(payload), tampered, keys.get, b"event-A")
    swapped = [msgspec.structs.replace(e, subject=USERS[2]) for e in envelopes]
    with pytest.raises(SealError):
        unseal(copy.deepcopy(payload), swapped, keys.get, b"event-A")  # another subject's key
