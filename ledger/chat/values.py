"""Value objects recorded inside chat events: message parts, messages, queued prompts, errors.

All are msgspec Structs so the codec decodes them back to these exact types. Arbitrary JSON (tool
arguments and results, retry payloads) is the only untyped content.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Iterable, Iterator, Literal, Union
from uuid import UUID

import msgspec

from ledger.catalog.values import EffortLevel, Reason, Source

#: The widest integer both databases store in a view column: a signed 64-bit integer.
MAX_INT64 = 2**63 - 1
#: The longest provider tool-call id a command may give. The chat views key a chat's unresolved calls by it,
#: and a PostgreSQL index entry holds at most 2,704 bytes: 512 characters are at most 2,048 bytes of UTF-8.
MAX_TOOL_CALL_ID = 512

Role = Literal["user", "assistant", "tool", "system"]
Visibility = Literal["user", "model", "both"]


class _Part(msgspec.Struct, gc=False, tag_field="type", omit_defaults=True, forbid_unknown_fields=True, frozen=True):
    pass


class TextPart(_Part, tag="text"):
    text: str


class ReasoningPart(_Part, tag="reasoning"):
    text: str


class ToolCallPart(_Part, tag="tool-call"):
    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = {}
    provider_executed: bool = False


class ToolResultPart(_Part, tag="tool-result"):
    tool_call_id: str
    tool_name: str
    result: Any = None
    is_error: bool = False


class FilePart(_Part, tag="file"):
    file_id: str
    media_type: str | None = None


class StructuredOutputError(msgspec.Struct, gc=False, forbid_unknown_fields=True, frozen=True):
    code: str
    message: str


class StructuredOutputOutcomePart(_Part, tag="structured-output-outcome"):
    """The outcome of a structured-output request (chatd's receipt part): ``succeeded`` with its ``value``
    (any JSON, ``null`` included), or ``failed``/``canceled`` with an ``error`` whose code fits the status."""

    request_id: UUID
    status: Literal["succeeded", "failed", "canceled"]
    value: Any = msgspec.UNSET
    error: StructuredOutputError | None = None


Part = Union[TextPart, ReasoningPart, ToolCallPart, ToolResultPart, FilePart, StructuredOutputOutcomePart]

#: chatd's outcome error codes, by the status each belongs to (``validOutcome``)
OUTCOME_ERROR_CODES = {
    "failed": frozenset({"not_produced", "validation_exhausted", "generation_failed", "configuration_error"}),
    "canceled": frozenset({"interrupted", "superseded", "queue_deleted"}),
}


def _valid_outcome(o: StructuredOutputOutcomePart) -> bool:
    if o.request_id.int == 0:
        return False
    if o.status == "succeeded":
        return o.value is not msgspec.UNSET and o.error is None
    e = o.error
    return (o.value is msgspec.UNSET and e is not None and 0 < len(e.message) <= 1024
            and e.code in OUTCOME_ERROR_CODES[o.status])


def is_receipt(role: str, visibility: str, parts: Iterable[Any]) -> bool:
    """A structured-output terminal receipt (chatd ``IsReceiptRow``): an assistant message shown to the user
    only, whose parts are text and exactly one valid outcome. Receipts close a request without being model
    output: readers of the history skip them (the latest assistant message, its open calls), and inserting
    only receipts does not advance ``history_version``."""
    if role != "assistant" or visibility != "user":
        return False
    outcomes = 0
    for p in parts:
        t = type(p)
        if t is StructuredOutputOutcomePart:
            if not _valid_outcome(p):
                return False
            outcomes += 1
        elif t is not TextPart:
            return False
    return outcomes == 1


class Usage(msgspec.Struct, gc=False, omit_defaults=True, forbid_unknown_fields=True, frozen=True):
    """What producing a message cost, as the worker reports it (0: not reported). Fields added later have
    defaults, and zeros are not stored, so every message recorded before them decodes and re-encodes the same."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0
    #: the provider's price of the message, in millionths of the currency unit (integers: sums are exact)
    total_cost_micros: int = 0
    runtime_ms: int = 0


class MessageInput(msgspec.Struct, gc=False, omit_defaults=True, forbid_unknown_fields=True, frozen=True):
    """A message as a caller submits it (docs/commands.md, "Message input")."""

    role: Role
    parts: list[Part]
    visibility: Visibility = "both"
    created_by: UUID | None = None
    model_config_id: UUID | None = None
    usage: Usage | None = None
    context_limit: int | None = None
    compressed: bool = False


class Message(msgspec.Struct, gc=False, omit_defaults=True, frozen=True, kw_only=True):
    """A message as recorded: its id and turn are decided when it is inserted."""

    message_id: int
    role: Role
    parts: list[Part]
    visibility: Visibility = "both"
    turn_id: UUID | None = None
    created_by: UUID | None = None
    model_config_id: UUID | None = None
    usage: Usage | None = None
    context_limit: int | None = None
    compressed: bool = False
    queued_message_id: int | None = None


class ChatError(msgspec.Struct, gc=False, omit_defaults=True, forbid_unknown_fields=True, frozen=True):
    """The ``last_error`` payload of a chat in the error state."""

    message: str
    kind: str | None = None


class QueuedPrompt(msgspec.Struct, gc=False, omit_defaults=True, frozen=True, kw_only=True):
    """A queued user prompt with what its ``user_prompt_submit`` hook attached.

    ``hook_prefix`` is inserted (stamped with ``turn_id``) just before the prompt when it is promoted;
    ``hook_allowed_tools`` narrows the chat's tool policy at promotion; None means no policy.
    ``reasoning_effort`` is the effort the prompt asks for (set by an ``edit_queued_message`` override;
    carried into history at promotion); None means the chat's. A queued prompt is a value: an edit of
    its content replaces it in the chat's state (``QueuedPromptEdited``); the hook prefix and policy
    it was queued with are kept.

    ``editing_since`` is chat state, not part of what ``PromptQueued`` records (always None there): the
    time the owner began editing the prompt (``QueuedPromptEditBegun``), None when it is not under edit.
    At most one prompt of a chat is under edit.
    """

    queued_message_id: int
    position: int
    parts: list[Part]
    created_by: UUID
    turn_id: UUID
    hook_prefix: list[MessageInput] = []
    hook_allowed_tools: list[str] | None = None
    model_config_id: UUID | None = None
    created_at: datetime | None = None
    reasoning_effort: EffortLevel | None = None
    editing_since: datetime | None = None


def edited_prompt(prompt: QueuedPrompt, parts: list[Part], model_config_id: UUID | None,
                  reasoning_effort: str | None) -> QueuedPrompt:
    """A queued prompt with new content: the overrides given replace its model and reasoning effort,
    those not given keep them (chatd EditQueuedMessage)."""
    return msgspec.structs.replace(
        prompt, parts=parts,
        model_config_id=model_config_id if model_config_id is not None else prompt.model_config_id,
        reasoning_effort=reasoning_effort if reasoning_effort is not None else prompt.reasoning_effort)


USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens", "total_tokens",
                "reasoning_tokens", "total_cost_micros", "runtime_ms")


def usage_total(messages: Iterable[Any]) -> dict[str, int] | None:
    """The sum of the messages' usage, field by field (``USAGE_FIELDS``, plus ``messages``: how many reported
    one); None when none did."""
    total = dict.fromkeys(USAGE_FIELDS, 0)
    counted = 0
    for m in messages:
        u = getattr(m, "usage", None)
        if u is None:
            continue
        counted += 1
        for name in USAGE_FIELDS:
            total[name] += getattr(u, name)
    return {**total, "messages": counted} if counted else None


def add_usage(a: dict[str, int] | None, b: dict[str, int] | None) -> dict[str, int] | None:
    """Two ``usage_total`` sums added (None is nothing)."""
    if a is None or b is None:
        return a if b is None else b
    return {k: a.get(k, 0) + b.get(k, 0) for k in (*USAGE_FIELDS, "messages")}


def input_bound_errors(m: MessageInput, path: str) -> Iterator[str]:
    """What a submitted message carries out of bounds (msgspec's wording, ``path`` is where the message is):
    token counts and the context limit are non-negative and within 64 bits, tool-call ids at most
    ``MAX_TOOL_CALL_ID`` characters.

    Checked on commands only (``commands.base.Command``): recorded events keep these types unbounded, so an
    event recorded before the bounds still decodes."""
    counts = [("context_limit", m.context_limit)]
    if m.usage is not None:
        counts += [(f"usage.{name}", getattr(m.usage, name)) for name in USAGE_FIELDS]
    for name, value in counts:
        if value is not None and value < 0:
            yield f"Expected `int` >= 0 - at `{path}.{name}`"
        elif value is not None and value > MAX_INT64:
            yield f"Expected `int` <= {MAX_INT64} - at `{path}.{name}`"
    for i, part in enumerate(m.parts):
        if isinstance(part, (ToolCallPart, ToolResultPart)) and len(part.tool_call_id) > MAX_TOOL_CALL_ID:
            yield f"Expected `str` of length <= {MAX_TOOL_CALL_ID} - at `{path}.parts[{i}].tool_call_id`"


def message_text(parts: list[Part]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextPart))


# -- what a worker command is fenced with, and what a generation attempt ran with -----------------------

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Percent = Annotated[int, msgspec.Meta(ge=0, le=100)]
Name = Annotated[str, msgspec.Meta(min_length=1)]


class Fence(msgspec.Struct, gc=False, omit_defaults=True, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """What a worker command expects the chat to be (chatd ``loadChatForTask`` + ``generationAttemptFence``):
    owned by ``runner_id``, at ``history_version``, at ``generation_attempt``. Each field left out is not
    checked; the status a command requires is checked whenever a fence is given."""

    runner_id: UUID | None = None
    history_version: NonNegative | None = None
    generation_attempt: NonNegative | None = None


class RecordedModel(msgspec.Struct, gc=False, omit_defaults=True, forbid_unknown_fields=True, frozen=True,
                    kw_only=True):
    """The model a generation attempt ran on, and how it was chosen (as ``ModelResolution`` records it)."""

    model_config_id: UUID
    provider: Name
    model: Name
    source: Source
    reason: Reason | None = None
    requested_model_config_id: UUID | None = None


class OfferedTools(msgspec.Struct, gc=False, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The tool set offered to the model after the hook policy and the exclusive-tool rule:
    ``allowed_tools`` the hook policy in force (None: every tool the runner has), ``dynamic_tools`` the
    chat's client tools that policy allows, ``advisor`` whether the advisor tool is offered, and
    ``exclusive_tools`` the tools that must run alone in a batch."""

    allowed_tools: list[str] | None
    dynamic_tools: list[str]
    advisor: bool
    exclusive_tools: list[str]


class AttemptSettingsInput(msgspec.Struct, gc=False, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """What a generation attempt runs with, as a runner reports it on ``record_generation_attempt``.

    ``model`` None: no model resolves (the defaults apply). ``context_limit`` is the model's;
    ``compaction_threshold`` the percent that triggers compaction; ``compaction_trigger_limit`` the limit
    the trigger divides by (the smaller of the chat model's and the compaction override's). ``action`` is
    the decision the attempt carries out (``generate_assistant``, ``execute_local_tools``, ``compact``)."""

    action: Name | None = None
    model: RecordedModel | None = None
    context_limit: NonNegative
    compaction_threshold: Percent
    compaction_trigger_limit: NonNegative
    advisor_eligible: bool
    advisor_reason: str | None = None
    advisor_remaining_uses: NonNegative
    tools: OfferedTools
    #: the deployment limits the attempt runs under (None: not reported, or recorded before limits existed)
    max_steps_per_turn: NonNegative | None = None
    max_generation_retries: NonNegative | None = None
    max_tool_output_bytes: NonNegative | None = None


class AttemptSettings(AttemptSettingsInput, kw_only=True):
    """``AttemptSettingsInput`` as recorded: ``source`` says who supplied it — ``runner`` (passed with the
    command: what the runner ran) or ``ledger`` (resolved by the ledger at the attempt's log position)."""

    source: Literal["runner", "ledger"]
