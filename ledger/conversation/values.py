"""Values of the Codex-style conversation: tool-call ids, boxes, provider values, steer tokens.

Every value is an immutable ``msgspec.Struct``; tagged unions use the ``"type"`` field, so the JSON
forms read ``{"type": "user", "text": "hi"}``. These Structs are shared by events, commands and
results, so one spelling serves the store, the wire and the CLI.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

#: Counters of the reference are ``u64``; the exhaustion errors of docs/codex.md §3 fire past this bound. (msgspec
#: cannot express it as a ``Meta(le=...)`` bound, so ``decide`` checks it.)
MAX_U64 = 2**64 - 1

#: A conversation's 12-byte session identity, shown as 24 lowercase hex characters.
Session = Annotated[str, Meta(pattern=r"^[0-9a-f]{24}$")]
U64 = Annotated[int, Meta(ge=0)]
BoxId = Annotated[int, Meta(ge=1)]


class ToolCallId(Struct, frozen=True, order=True, forbid_unknown_fields=True):
    """``(session, sequence)``; ordered by session, then sequence. Allocated only by ``prepare_stage``."""

    session: Session
    sequence: U64

    def __str__(self) -> str:
        return f"{self.session}:{self.sequence}"


class _Tagged(Struct, frozen=True, tag_field="type", forbid_unknown_fields=True):
    pass


# -- box contents (the six immutable kinds of the reference's BoxContent) ------------------------------

class SystemText(_Tagged, tag="system"):
    text: str


class UserText(_Tagged, tag="user"):
    text: str


class AgentText(_Tagged, tag="agent"):
    """The agent's own output (the reference's ``Kennedy`` box). Never empty."""

    text: str


class Attachment(_Tagged, tag="attachment"):
    """An attachment marker; it has no payload in this version of the reference."""


class ToolCall(_Tagged, tag="tool_call"):
    tool_call_id: ToolCallId
    name: str
    arguments: str


class ToolReturn(_Tagged, tag="tool_return"):
    """The result of an earlier call; ``originating_call`` is that call's box id."""

    tool_call_id: ToolCallId
    originating_call: BoxId
    result: str
    is_error: bool = False


BoxContent = SystemText | UserText | AgentText | Attachment | ToolCall | ToolReturn


class Box(Struct, frozen=True, forbid_unknown_fields=True):
    """One canonical, append-only transcript entry; ids are contiguous from 1."""

    id: BoxId
    content: BoxContent


# -- arrivals (external input) -------------------------------------------------------------------------

class ToolReturnArrival(_Tagged, tag="tool_return"):
    """An asynchronous tool result; the ledger resolves ``originating_call`` when it accepts it."""

    tool_call_id: ToolCallId
    result: str
    is_error: bool = False


Arrival = SystemText | UserText | Attachment | ToolReturnArrival


# -- provider values (the codec's BoxValue) ------------------------------------------------------------

class Call(_Tagged, tag="call"):
    """A well-formed tool call produced by the provider (``BoxValue::Call(Ok(call))``)."""

    name: str
    arguments: str


class MalformedCall(_Tagged, tag="malformed_call"):
    """A provider tool call that failed validation (``BoxValue::Call(Err(message))``)."""

    error: str


class History(_Tagged, tag="history"):
    """A canonical box projected for the provider: one JSON object (``BoxValue::History``)."""

    item: dict[str, Any]


BoxValue = Call | MalformedCall | History


class TextItem(_Tagged, tag="text"):
    text: str


class BoxItem(_Tagged, tag="box"):
    value: BoxValue


#: One item of a terminal provider output (the shim's ``ShimItem``).
OutputItem = TextItem | BoxItem


class SteerToken(Struct, frozen=True):
    """Identifies one prepared steer: the job it belongs to, its generation and its box range.

    The reference compares tokens by ``Arc`` identity; here generations never repeat within a stream
    (see ``decide``), so equality of these four fields is identity.
    """

    job: U64
    generation: U64
    start: int
    end: int


def project(box: Box) -> History:
    """The codec's projection of a canonical box: its content as one JSON object, with its box id."""
    item = msgspec.to_builtins(box.content)
    return History(item={"box_id": box.id, **item})
