"""The msgspec codec through the real store, on SQLite and PostgreSQL.

* every chat event type survives save -> load equal and typed (UUIDs, aware datetimes, nested Structs,
  each Part kind), in JSON and in msgpack; a new event class or field without a sample fails here;
* both payload formats are readable by an app set to either format (mixed streams), and JSON payloads
  are readable text inside the database;
* a stored payload that does not match its class, or an unknown topic, raises ``CodecError`` naming the
  topic, the field, the stream and the version.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator
from uuid import UUID, uuid4

import msgspec
import pytest

import commands.handler  # noqa: F401  (registers the Chat aggregate topic and every command)
from commands.handler import execute_json
from ledger.base import TOPICS, LedgerCreated, LedgerEvent
from ledger.catalog.values import ModelResolution
from ledger.chat import events as ev
from ledger.chat.aggregate import Chat
from ledger.chat.values import (
    AttemptSettings,
    ChatError,
    Fence,
    FilePart,
    Message,
    MessageInput,
    OfferedTools,
    QueuedPrompt,
    RecordedModel,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    message_text,
)
from ledger.codec import CodecError, MsgspecMapper
from ledger.errors import LedgerError
from ledger.store import ChatLedgerApp, open_app

from .rawdb import RawDB

T0 = datetime(2025, 3, 14, 15, 9, 26, 535897, tzinfo=timezone.utc)
PLUS_TWO = timezone(timedelta(hours=2))

# -- one instance of every chat event ----------------------------------------------------------------------

#: fields every event has (set by the Emitter), not part of an event's own sample
BASE_FIELDS = {f.name for f in dataclasses.fields(ev.ChatAbandoned)} | {"originator_topic"}


def chat_event_classes() -> set[type]:
    """Every concrete chat event class, as registered by topic."""
    return {cls for topic, cls in TOPICS.items()
            if topic.startswith("chat-ledger:chat.") and isinstance(cls, type) and issubclass(cls, LedgerEvent)}


def every_part() -> list[Any]:
    return [
        TextPart(text='Hello 🌍 "quoted" \\ back\nnew line — ünïcödé 日本語'),
        ReasoningPart(text="Let me think… step 1, step 2."),
        ToolCallPart(tool_call_id="call_1", tool_name="read_file",
                     args={"path": "src/app.py", "opts": {"lines": [1, 20], "follow": True, "ratio": 0.5, "x": None}},
                     provider_executed=True),
        ToolCallPart(tool_call_id="call_2", tool_name="ask_user"),
        ToolResultPart(tool_call_id="call_1", tool_name="read_file",
                       result={"content": "print('hi')", "size": 11, "tags": ["py", None, 1.25]}, is_error=True),
        ToolResultPart(tool_call_id="call_2", tool_name="ask_user", result="main"),
        ToolResultPart(tool_call_id="call_3", tool_name="noop"),
        FilePart(file_id="file_abc", media_type="image/png"),
        FilePart(file_id="file_def"),
    ]


def full_message(message_id: int) -> Message:
    return Message(
        message_id=message_id, role="assistant", parts=every_part(), visibility="model", turn_id=uuid4(),
        created_by=uuid4(), model_config_id=uuid4(),
        usage=Usage(input_tokens=1200, output_tokens=340, cache_read_tokens=1000, cache_creation_tokens=5,
                    total_tokens=1540),
        context_limit=200_000, compressed=True, queued_message_id=3,
    )


def small_message(message_id: int, role: str = "user", text: str = "hi") -> Message:
    return Message(message_id=message_id, role=role, parts=[TextPart(text=text)])  # type: ignore[arg-type]


def full_prompt() -> QueuedPrompt:
    prefix = [
        MessageInput(role="user", parts=[TextPart(text="[hook] branch is main")], visibility="model",
                     created_by=uuid4(), model_config_id=uuid4(), usage=Usage(input_tokens=3, total_tokens=3),
                     context_limit=8000, compressed=True),
        MessageInput(role="system", parts=[FilePart(file_id="f1", media_type="text/plain")]),
    ]
    return QueuedPrompt(
        queued_message_id=4, position=2, parts=[TextPart(text="queued prompt"), FilePart(file_id="f2")],
        created_by=uuid4(), turn_id=uuid4(), hook_prefix=prefix, hook_allowed_tools=["read_file", "search"],
        model_config_id=uuid4(), created_at=T0 + timedelta(seconds=1, microseconds=7), reasoning_effort="low",
    )


def attempt_settings() -> AttemptSettings:
    return AttemptSettings(
        source="runner", action="generate_assistant",
        model=RecordedModel(model_config_id=uuid4(), provider="anthropic", model="claude-sonnet-4-5",
                            source="fallback_default", reason="disabled", requested_model_config_id=uuid4()),
        context_limit=200_000, compaction_threshold=70, compaction_trigger_limit=120_000, advisor_eligible=False,
        advisor_reason="child_chat", advisor_remaining_uses=2,
        tools=OfferedTools(allowed_tools=["read_file", "ask_user"], dynamic_tools=["ask_user"], advisor=False,
                           exclusive_tools=[]))


def samples(chat_id: UUID) -> dict[type, dict[str, Any]]:
    """The own fields of one realistic instance of each chat event class (ChatCreated first)."""
    return {
        ev.ChatCreated: dict(
            organization_id=uuid4(), owner_id=uuid4(), parent_chat_id=uuid4(), root_chat_id=uuid4(),
            title="Fix the failing build ✓", status="running", turn_id=uuid4(),
            messages=[full_message(1), small_message(2)], model_config_id=uuid4(),
            hook_allowed_tools=["read_file", "search", "execute"], dynamic_tools=["ask_user"],
            model_resolution=ModelResolution(model_config_id=uuid4(), source="fallback_default", reason="disabled",
                                             requested_model_config_id=uuid4(), reasoning_effort="high"),
            title_source="user", limits={"max_dynamic_tools_per_chat": 250}),
        ev.ChildChatCreated: dict(child_chat_id=uuid4()),
        ev.TitleSet: dict(title="European capitals", source="generated"),
        ev.TurnStarted: dict(cause="send", turn_id=uuid4(), prompt_message_id=4, limits={"max_prompt_bytes": 10},
                             messages=[small_message(3, text="[prefix]"), small_message(4)],
                             hook_allowed_tools=["search"], tool_policy_before=["read_file", "search"],
                             tool_policy=["search"], model_config_id=uuid4(),
                             model_resolution=ModelResolution(model_config_id=uuid4(), source="explicit")),
        ev.MessageEdited: dict(edited_message_id=3, deleted_message_ids=[3, 4, 5], deleted_queued_message_ids=[1, 2]),
        ev.PromptQueued: dict(prompt=full_prompt(), limits={"max_prompt_bytes": 262144,
                                                            "max_queued_messages_per_chat": 20}),
        ev.QueuedPromptDeleted: dict(queued_message_id=2),
        ev.QueuedPromptMovedToHead: dict(queued_message_id=4, position=-1),
        ev.QueuedPromptPromoted: dict(queued_message_id=4, turn_id=uuid4(), prompt_message_id=7,
                                      messages=[small_message(6, text="[hook]"), full_message(7)],
                                      hook_allowed_tools=None, tool_policy_before=None, tool_policy=None,
                                      model_config_id=None, model_resolution=None, reasoning_effort="xhigh"),
        ev.QueuedPromptEdited: dict(queued_message_id=4, limits={"max_attachments_per_chat": 3}, parts=[TextPart(text="revised ✓"), FilePart(file_id="f3")],
                                    model_config_id=uuid4(), reasoning_effort="high"),
        ev.QueuedPromptEditBegun: dict(queued_message_id=4),
        ev.QueuedPromptEditEnded: dict(queued_message_id=4, cause="moved"),
        ev.ChatPaused: dict(queued_message_id=4),
        ev.ChatResumed: dict(cause="queued_deleted", status="waiting", queued_message_id=4),
        ev.InvalidStateReconciled: dict(last_error=ChatError(message="chat was in an invalid state", kind="generic"),
                                        status_before="paused", archived_before=True),
        ev.ToolCallsCanceled: dict(reason="Tool execution interrupted by user", dynamic_only=True,
                                   messages=[Message(message_id=8, role="tool", parts=[ToolResultPart(
                                       tool_call_id="call_9", tool_name="ask_user",
                                       result="Tool execution interrupted by user", is_error=True)])]),
        ev.InterruptRequested: dict(reason="User pressed stop"),
        ev.InterruptionFinished: dict(messages=[small_message(9, "assistant", "partial")], unowned=True,
                                      limits={"max_tool_output_bytes": 1},
                                      generation_attempt=0, runner_id=None, fence=None),
        ev.TurnFinished: dict(messages=[], generation_attempt=2, runner_id=uuid4(), fence=Fence(runner_id=uuid4(), history_version=7, generation_attempt=2)),
        ev.TurnFailed: dict(last_error=ChatError(message="provider overloaded", kind="overloaded"),
                            messages=[small_message(10, "assistant", "sorry")], generation_attempt=4,
                            runner_id=uuid4(), fence=Fence(generation_attempt=4)),
        ev.IdleChatFailed: dict(last_error=ChatError(message="workspace agent is unreachable")),
        ev.RequiresActionEntered: dict(deadline=datetime(2025, 3, 14, 17, 14, 26, 123456, tzinfo=PLUS_TWO),
                                       tool_call_ids=["call_2", "call_x"], generation_attempt=0, runner_id=uuid4(),
                                       fence=Fence(history_version=3)),
        ev.ToolResultsSubmitted: dict(limits={"max_tool_output_bytes": 5}, messages=[Message(message_id=11, role="tool", created_by=uuid4(), parts=[
            ToolResultPart(tool_call_id="call_2", tool_name="ask_user", result=[1, "two", {"three": 3.0}])])]),
        ev.RequiresActionCanceled: dict(reason="Tool execution timed out"),
        ev.CompactionRequested: dict(),
        ev.ContextCleared: dict(messages=[full_message(12)]),
        ev.StepCommitted: dict(messages=[full_message(13), small_message(14, "tool", "ok")], limits={"max_tool_output_bytes": 9},
                               consumed_compaction_request=True, generation_attempt=2, runner_id=uuid4(), fence=Fence(runner_id=uuid4(), history_version=7, generation_attempt=2)),
        ev.GenerationAttemptRecorded: dict(generation_attempt=3, settings=attempt_settings(), runner_id=uuid4(),
                                           fence=Fence(runner_id=uuid4(), generation_attempt=2)),
        ev.RetryStateRecorded: dict(retry_state={"attempt": 2, "delay_ms": 1500, "error": "rate limited",
                                                 "nested": {"ok": False, "list": [None, 1, 2.5, "x"]}},
                                    generation_attempt=2, runner_id=None, fence=None),
        ev.ChatEnded: dict(messages=[small_message(15, "assistant", "bye")], deleted_queued_message_ids=[5],
                           cascaded_from=uuid4(), cascaded_to=[uuid4(), uuid4()]),
        ev.ArchivedSet: dict(archived=True, cascaded_from=uuid4(), cascaded_to=[uuid4()]),
        ev.ChatAcquired: dict(worker_id=uuid4(), runner_id=uuid4()),
        ev.ChatAbandoned: dict(),
        ev.OwnershipCleared: dict(cause="send_message", worker_id=uuid4(), runner_id=uuid4()),
        ev.PlanModeSet: dict(plan_mode="plan"),
        ev.PinSet: dict(pinned=True),
        ev.WorkspaceBound: dict(workspace_id=uuid4(), build_id=uuid4(), agent_id=None),
        ev.SharingSet: dict(shared=True),
        ev.LabelsSet: dict(labels={"env": "prod", "team": "ünïcode"}),
    }


def build_stream(chat_id: UUID) -> list[LedgerEvent]:
    """One event of each class on one stream, consecutive versions; idempotency_key/actor on some."""
    out: list[LedgerEvent] = []
    for version, (cls, fields) in enumerate(samples(chat_id).items(), start=1):
        extra: dict[str, Any] = {}
        if issubclass(cls, LedgerCreated):
            extra["originator_topic"] = Chat.TOPIC
        if version % 2:
            extra.update(idempotency_key=f"key-{version}", actor=uuid4())
        out.append(cls(originator_id=chat_id, originator_version=version,
                       timestamp=T0 + timedelta(seconds=version, microseconds=version), **extra, **fields))
    return out


def assert_same_types(got: Any, want: Any, path: str = "$") -> None:
    """``got`` has the very types of ``want`` all the way down (Structs, Parts, UUIDs, aware datetimes)."""
    assert type(got) is type(want), f"{path}: {type(got).__name__} instead of {type(want).__name__}"
    if isinstance(want, msgspec.Struct):
        for name in want.__struct_fields__:
            assert_same_types(getattr(got, name), getattr(want, name), f"{path}.{name}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_types(g, w, f"{path}[{i}]")
    elif isinstance(want, dict):
        assert set(got) == set(want), path
        for k in want:
            assert_same_types(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, datetime):
        assert got.tzinfo is not None and got.utcoffset() is not None, f"{path}: naive datetime"


def assert_events_round_trip(got: list[Any], want: list[LedgerEvent]) -> None:
    assert [type(e) for e in got] == [type(e) for e in want]
    for g, w in zip(got, want):
        assert g == w, type(w).__name__
        for f in dataclasses.fields(w):
            assert_same_types(getattr(g, f.name), getattr(w, f.name), f"{type(w).__name__}.{f.name}")


# -- coverage guard (no database) ----------------------------------------------------------------------

def test_samples_cover_every_chat_event_class_and_field() -> None:
    """Adding an event class, or a field to one, without a sample here fails this test."""
    s = samples(uuid4())
    registered = chat_event_classes()
    assert registered, "no chat events registered"
    assert set(s) == registered, (
        f"missing samples: {sorted(c.__name__ for c in registered - set(s))}; "
        f"stale samples: {sorted(c.__name__ for c in set(s) - registered)}")
    for cls, fields in s.items():
        declared = {f.name for f in dataclasses.fields(cls)} - BASE_FIELDS
        assert set(fields) == declared, f"{cls.__name__}: sample fields differ from declared {sorted(declared)}"
    assert list(s)[0] is ev.ChatCreated
    # every Part kind appears
    kinds = {type(p) for p in every_part()}
    assert kinds == {TextPart, ReasoningPart, ToolCallPart, ToolResultPart, FilePart}


# -- round trip through the store ----------------------------------------------------------------------

@pytest.fixture(params=["json", "msgpack"])
def payload_format(request) -> str:
    return request.param


def test_every_chat_event_round_trips_through_the_store(db_url: str, payload_format: str) -> None:
    chat_id = uuid4()
    events = build_stream(chat_id)
    app = open_app(db_url, payload_format=payload_format)
    try:
        app.save(*events)

        # read by the event store
        assert_events_round_trip(list(app.events.get(chat_id)), events)
        # read by recorder + mapper
        stored = app.recorder.select_events(chat_id)
        assert [s.originator_version for s in stored] == list(range(1, len(events) + 1))
        assert [s.topic for s in stored] == [type(e).TOPIC for e in events]
        assert_events_round_trip([app.mapper.to_domain_event(s) for s in stored], events)
    finally:
        app.close()

    # read again by a fresh application in the other format (decoding sniffs the stored format)
    other = open_app(db_url, payload_format="msgpack" if payload_format == "json" else "json")
    try:
        back = list(other.events.get(chat_id))
    finally:
        other.close()
    assert_events_round_trip(back, events)

    by_class = {type(e): e for e in back}
    created, promoted, required = back[0], by_class[ev.QueuedPromptPromoted], by_class[ev.RequiresActionEntered]
    assert isinstance(created, ev.ChatCreated)
    assert isinstance(created.organization_id, UUID) and isinstance(created.parent_chat_id, UUID)
    assert created.timestamp.tzinfo is not None and created.timestamp == T0 + timedelta(seconds=1, microseconds=1)
    assert created.originator_topic == Chat.TOPIC and created.idempotency_key == "key-1"
    assert isinstance(created.actor, UUID)
    msg = created.messages[0]
    assert type(msg) is Message and type(msg.usage) is Usage and isinstance(msg.turn_id, UUID)
    assert [type(p) for p in msg.parts] == [type(p) for p in every_part()]
    assert msg.parts[2].args["opts"]["lines"] == [1, 20] and msg.parts[2].provider_executed is True
    assert msg.parts[4].is_error is True and msg.parts[4].result["tags"] == ["py", None, 1.25]
    assert isinstance(promoted, ev.QueuedPromptPromoted) and promoted.model_config_id is None
    assert promoted.model_resolution is None
    resolution = created.model_resolution
    assert type(resolution) is ModelResolution and isinstance(resolution.requested_model_config_id, UUID)
    assert (resolution.source, resolution.reason, resolution.reasoning_effort) == ("fallback_default", "disabled", "high")
    assert back[1].idempotency_key is None and back[1].actor is None  # left out of the payload, default back
    prompt = by_class[ev.PromptQueued].prompt
    assert type(prompt) is QueuedPrompt and all(type(m) is MessageInput for m in prompt.hook_prefix)
    assert prompt.created_at.tzinfo is not None
    assert isinstance(required, ev.RequiresActionEntered)
    assert required.deadline == datetime(2025, 3, 14, 15, 14, 26, 123456, tzinfo=timezone.utc)
    failed = by_class[ev.TurnFailed]
    assert type(failed.last_error) is ChatError and failed.last_error.kind == "overloaded"


def test_payload_bytes_are_in_the_configured_format(db_url: str, payload_format: str) -> None:
    chat_id = uuid4()
    events = build_stream(chat_id)
    app = open_app(db_url, payload_format=payload_format)
    try:
        app.save(*events)
    finally:
        app.close()
    for version, topic, data in RawDB(db_url).rows(chat_id):
        if payload_format == "json":
            assert data[:1] == b"{"
            payload = json.loads(data)
        else:
            assert data[:1] != b"{"
            payload = msgspec.msgpack.decode(data)
        assert isinstance(payload, dict)
        # the originator id and version are columns, not payload
        assert "originator_id" not in payload and "originator_version" not in payload
        assert "timestamp" in payload
        # class_version is only written when > 1; None idempotency_key/actor are left out
        code_version = TOPICS[topic].class_version
        assert payload.get("class_version", 1) == code_version and ("class_version" in payload) == (code_version > 1)
        assert ("idempotency_key" in payload) == bool(version % 2)


# -- payload formats on one database --------------------------------------------------------------------

def _cmd(**fields: Any) -> str:
    return json.dumps({k: str(v) if isinstance(v, UUID) else v for k, v in fields.items()})


def new_org(app: ChatLedgerApp) -> dict[str, UUID]:
    """A fresh organization with one member and a default model, so chats can be created in it."""
    org, owner = uuid4(), uuid4()
    execute_json(app, _cmd(type="add_organization_member", organization_id=org, user_id=owner))
    execute_json(app, _cmd(type="create_model_config", organization_id=org, provider="anthropic",
                           model="claude-sonnet-4-5", context_limit=200_000, is_default=True))
    return {"organization_id": org, "owner_id": owner}


def test_mixed_format_stream_is_readable_by_either_setting(db_url: str) -> None:
    as_json = open_app(db_url, payload_format="json")
    as_msgpack = open_app(db_url, payload_format="msgpack")
    try:
        chat_id = uuid4()
        execute_json(as_msgpack, _cmd(type="create_chat", chat_id=chat_id, **new_org(as_json),
                                      text="written as msgpack", title="Mixed formats"))  # v1
        execute_json(as_json, _cmd(type="send_message", chat_id=chat_id, text="queued as json"))  # v2
        execute_json(as_msgpack, _cmd(type="send_message", chat_id=chat_id, text="queued as msgpack"))  # v3
        execute_json(as_json, _cmd(type="commit_step", chat_id=chat_id, messages=[
            {"role": "assistant", "parts": [{"type": "text", "text": "answer as json"}]}]))  # v4
        execute_json(as_msgpack, _cmd(type="finish_turn", chat_id=chat_id))  # v5, v6 (promotion)

        rows = RawDB(db_url).rows(chat_id)
        assert [v for v, _, _ in rows] == [1, 2, 3, 4, 5, 6]
        json_versions = [v for v, _, s in rows if s[:1] == b"{"]
        assert json_versions == [2, 4]
        for _, _, data in rows:
            (json.loads if data[:1] == b"{" else msgspec.msgpack.decode)(data)  # each is valid in its format

        from_json = list(as_json.events.get(chat_id))
        from_msgpack = list(as_msgpack.events.get(chat_id))
        assert from_json == from_msgpack and len(from_json) == 6
        assert [type(e) for e in from_json] == [ev.ChatCreated, ev.PromptQueued, ev.PromptQueued,
                                                 ev.StepCommitted, ev.TurnFinished, ev.QueuedPromptPromoted]
        assert message_text(from_json[1].prompt.parts) == "queued as json"
        assert isinstance(from_json[1].prompt.created_by, UUID)

        s1, s2 = as_json.load(chat_id).state, as_msgpack.load(chat_id).state
        assert s1 == s2
        assert s1.version == 6 and s1.execution_state == "R1" and len(s1.messages) == 3
    finally:
        as_json.close()
        as_msgpack.close()


def test_json_payloads_are_readable_text_in_the_database(db_url: str) -> None:
    app = open_app(db_url, payload_format="json")
    try:
        chat_id = uuid4()
        execute_json(app, _cmd(type="create_chat", chat_id=chat_id, **new_org(app),
                               text="audit me", title="Readable ✓ título"))
        execute_json(app, _cmd(type="set_title", chat_id=chat_id, title="Renamed — ok"))
    finally:
        app.close()
    raw = RawDB(db_url)
    # parsed as JSON by the database itself (psql: convert_from(state, 'UTF8')::json)
    assert raw.json_field_in_db(chat_id, 1, "title") == "Readable ✓ título"
    assert raw.json_field_in_db(chat_id, 1, "originator_topic") == Chat.TOPIC
    assert raw.json_field_in_db(chat_id, 2, "title") == "Renamed — ok"
    assert str(raw.json_field_in_db(chat_id, 1, "timestamp")).endswith("Z")


def test_payload_format_setting(monkeypatch, sqlite_url: str) -> None:
    monkeypatch.setenv("CHAT_LEDGER_PAYLOAD_FORMAT", "msgpack")
    app = open_app(sqlite_url)
    try:
        assert app.mapper.format == "msgpack"
    finally:
        app.close()
    monkeypatch.delenv("CHAT_LEDGER_PAYLOAD_FORMAT")
    app = open_app(sqlite_url)
    try:
        assert app.mapper.format == "json"  # the default
    finally:
        app.close()
    with pytest.raises(LedgerError) as e:
        open_app(sqlite_url, payload_format="xml")
    assert e.value.code == "invalid_setting" and "xml" in e.value.message
    with pytest.raises(ValueError):
        MsgspecMapper(fmt="yaml")


# -- payloads that do not match their class ----------------------------------------------------------------

@pytest.fixture
def corrupt_env(db_url: str, payload_format: str) -> Iterator[tuple[ChatLedgerApp, RawDB, UUID]]:
    """A chat of 5 events (written in ``payload_format``) and raw access to its rows.

    v1 ChatCreated, v2 StepCommitted, v3 GenerationAttemptRecorded, v4 TurnFinished, v5 ArchivedSet.
    """
    app = open_app(db_url, payload_format=payload_format)
    chat_id = uuid4()
    execute_json(app, _cmd(type="create_chat", chat_id=chat_id, **new_org(app), text="corrupt me",
                           title="Original"))
    execute_json(app, _cmd(type="commit_step", chat_id=chat_id, messages=[
        {"role": "assistant", "parts": [{"type": "text", "text": "fine"}]}]))
    execute_json(app, _cmd(type="record_generation_attempt", chat_id=chat_id))
    execute_json(app, _cmd(type="finish_turn", chat_id=chat_id))
    execute_json(app, _cmd(type="set_archived", chat_id=chat_id, archived=True))
    assert [t for _, t, _ in RawDB(db_url).rows(chat_id)] == [
        ev.ChatCreated.TOPIC, ev.StepCommitted.TOPIC, ev.GenerationAttemptRecorded.TOPIC, ev.TurnFinished.TOPIC,
        ev.ArchivedSet.TOPIC]
    try:
        yield app, RawDB(db_url), chat_id
    finally:
        app.close()


def _read_error(app: ChatLedgerApp, chat_id: UUID) -> str:
    """Reading the stream fails with CodecError, by every read path; returns the message."""
    with pytest.raises(CodecError) as by_events:
        list(app.events.get(chat_id))
    with pytest.raises(CodecError) as by_load:
        app.load(chat_id)
    with pytest.raises(CodecError):
        [app.mapper.to_domain_event(s) for s in app.recorder.select_events(chat_id)]
    assert str(by_load.value) == str(by_events.value)
    return str(by_events.value)


def _set(path: list[Any], value: Any):
    def change(payload: dict[str, Any]) -> None:
        target: Any = payload
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return change


@pytest.mark.parametrize("version, path, value, field_text", [
    (1, ["title"], 123, "$.title"),
    (1, ["organization_id"], "not-a-uuid", "$.organization_id"),
    (1, ["status"], "exploded", "$.status"),
    (1, ["messages", 0, "parts", 0, "text"], 42, "$.messages[0].parts[0].text"),
    (1, ["messages", 0, "parts", 0, "type"], "hologram", "$.messages[0].parts[0]"),
    (2, ["messages", 0, "message_id"], "two", "$.messages[0].message_id"),
    (2, ["timestamp"], "yesterday", "$.timestamp"),
    (3, ["generation_attempt"], [1], "$.generation_attempt"),
    (5, ["archived"], {"yes": True}, "$.archived"),
])
def test_mismatched_payload_raises_codec_error_naming_topic_field_stream_version(
        corrupt_env, version: int, path: list[Any], value: Any, field_text: str) -> None:
    app, raw, chat_id = corrupt_env
    topic = raw.rows(chat_id)[version - 1][1]
    raw.rewrite(chat_id, version, _set(path, value))
    message = _read_error(app, chat_id)
    assert topic in message
    assert field_text in message
    assert str(chat_id) in message
    assert f"version {version}" in message


def test_missing_required_field_is_named(corrupt_env) -> None:
    app, raw, chat_id = corrupt_env
    raw.rewrite(chat_id, 3, lambda p: p.pop("generation_attempt"))
    message = _read_error(app, chat_id)
    assert ev.GenerationAttemptRecorded.TOPIC in message and "generation_attempt" in message
    assert str(chat_id) in message and "version 3" in message


@pytest.mark.parametrize("data, words", [
    (b"\xc1\xc1 not a payload", "cannot decode"),
    (b"{\"title\": ", "cannot decode"),
    (b"\x93\x01\x02\x03", "not an object"),  # a msgpack array
])
def test_undecodable_bytes_raise_codec_error(corrupt_env, data: bytes, words: str) -> None:
    app, raw, chat_id = corrupt_env
    raw.set_state(chat_id, 4, data)
    message = _read_error(app, chat_id)
    assert words in message
    assert ev.TurnFinished.TOPIC in message and str(chat_id) in message and "version 4" in message


def test_newer_class_version_than_the_code_is_refused(corrupt_env) -> None:
    app, raw, chat_id = corrupt_env
    raw.rewrite(chat_id, 4, _set(["class_version"], 7))
    message = _read_error(app, chat_id)
    assert "class_version 7 is newer" in message and "version 4" in message and str(chat_id) in message


def test_unknown_topic_is_named(corrupt_env) -> None:
    app, raw, chat_id = corrupt_env
    raw.set_topic(chat_id, 2, "chat-ledger:chat.NoSuchEvent")
    message = _read_error(app, chat_id)
    assert "chat-ledger:chat.NoSuchEvent" in message
    assert "unknown event topic" in message and str(chat_id) in message and "version 2" in message


def test_untouched_streams_stay_readable_next_to_a_corrupt_one(corrupt_env) -> None:
    app, raw, chat_id = corrupt_env
    other = uuid4()
    execute_json(app, _cmd(type="create_chat", chat_id=other, **new_org(app), text="ok"))
    raw.rewrite(chat_id, 1, _set(["title"], 1))
    _read_error(app, chat_id)
    assert app.load(other).state.title == "ok"


@pytest.mark.parametrize("version, path, value", [
    (3, ["generation_attempt"], "3"),
    (5, ["archived"], "true"),
    (5, ["archived"], 1),
], ids=["int-as-string", "bool-as-string", "bool-as-int"])
def test_wrong_scalar_type_is_not_silently_coerced(corrupt_env, version: int, path: list[Any], value: Any) -> None:
    app, raw, chat_id = corrupt_env
    raw.rewrite(chat_id, version, _set(path, value))
    message = _read_error(app, chat_id)
    assert f"$.{path[-1]}" in message


# -- payloads written before the worker fields existed (hand-written in the old shape, never regenerated) --

OLD_PAYLOADS = {
    ev.StepCommitted: b'{"timestamp":"2026-01-05T10:00:00.000001+00:00","messages":[{"message_id":3,"role":"assistant",'
                      b'"parts":[{"type":"text","text":"ok"}]}],"consumed_compaction_request":false}',
    ev.GenerationAttemptRecorded: b'{"timestamp":"2026-01-05T10:00:00+00:00","generation_attempt":2}',
    ev.RetryStateRecorded: b'{"timestamp":"2026-01-05T10:00:00+00:00","retry_state":{"attempt":2,"delay_ms":2000}}',
    ev.TurnFinished: b'{"timestamp":"2026-01-05T10:00:00+00:00","messages":[]}',
    ev.TurnFailed: b'{"timestamp":"2026-01-05T10:00:00+00:00","last_error":{"message":"boom"},"messages":[]}',
    ev.InterruptionFinished: b'{"timestamp":"2026-01-05T10:00:00+00:00","messages":[],"unowned":true}',
    ev.RequiresActionEntered: b'{"timestamp":"2026-01-05T10:00:00+00:00","deadline":"2026-01-05T10:05:00+00:00",'
                              b'"tool_call_ids":["c1"]}',
}


def test_worker_events_recorded_before_the_new_fields_decode_with_none() -> None:
    from eventsourcing.persistence import StoredEvent

    mapper = MsgspecMapper()
    for cls, data in OLD_PAYLOADS.items():
        e = mapper.to_domain_event(StoredEvent(originator_id=uuid4(), originator_version=4, topic=cls.TOPIC, state=data))
        assert type(e) is cls
        assert (getattr(e, "runner_id"), getattr(e, "fence")) == (None, None), cls.__name__
        if cls is ev.GenerationAttemptRecorded:
            assert (e.generation_attempt, e.settings) == (2, None)
        else:
            assert e.generation_attempt is None, cls.__name__
