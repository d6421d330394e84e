"""A chat's snapshot keeps its message index in chunks stored apart from the head (``ledger.chat.index``,
``ledger.snapshots``): a chat restored from them, with chunks read only when a rule reaches into them, is the
full replay at every version (edits rewrite the chunks they touch), on SQLite and PostgreSQL; a command that
reads only the tail reads no chunk; missing chunk rows cost a replay, never an answer; a snapshot of the
shape before chunks (the index as one list) is ignored."""

from __future__ import annotations

import uuid
from typing import Any

from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.handler import command_from_dict, execute
from ledger.chat import index as chat_index
from ledger.chat.aggregate import Chat
from ledger.chat.index import MessageIndex
from ledger.chat.messageinfo import MessageInfo
from ledger.chat.state import ChatState
from ledger.snapshots import ChatSnapshot, ChunkLoader, _head_type, chunk_stream, delete_older
from ledger.store import open_app
from tests.projections.test_chat_views import ACTIONS, record
from tests.store.test_snapshots import _chats, replayed, same


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(chunk=st.integers(1, 4), interval=st.integers(1, 6),
       steps=st.lists(st.tuples(st.just(0), ACTIONS), min_size=1, max_size=25))
def test_a_chat_from_its_head_and_chunks_is_the_full_replay(app: Any, db_url: str, monkeypatch: Any, chunk: int,
                                                            interval: int, steps: list[Any]) -> None:
    monkeypatch.setattr(chat_index, "CHUNK", chunk)
    app.snapshotting_intervals = {Chat: interval}
    known = set(_chats(app))
    record(app, 1, steps)
    (chat_id,) = set(_chats(app)) - known
    head = app.load(chat_id).version
    other = open_app(db_url)  # another process: every load through the store, chunks read on demand
    try:
        restored = other.load(chat_id)
        snapshot = other.repository._snapshot(chat_id, None)
        if snapshot is not None and snapshot.originator_version == head:
            assert restored.state.messages.loaded_chunks() <= 1  # the head's partial chunk at most
        assert same(restored, replayed(other, chat_id))
        for version in range(1, head + 1):
            assert same(other.load(chat_id, version=version), replayed(app, chat_id, version))
        # the rules' backward reads on a restored index give what they give on the list
        again = other.load(chat_id).state.messages
        full = list(replayed(other, chat_id).state.messages)
        assert list(reversed(again)) == full[::-1]
        for i in range(-len(full), len(full)):
            assert other.load(chat_id).state.messages[i] == full[i]
        assert again[1:-1] == full[1:-1] and again[len(full):] == []
    finally:
        other.close()


def long_chat(app: Any, turns: int = 20) -> uuid.UUID:
    """A chat of a few dozen messages, snapshotted every 8 events, in chunks of 2 messages."""
    app.snapshotting_intervals = {Chat: 8}
    record(app, 1, [(0, a) for _ in range(turns) for a in (
        {"type": "commit_step", "messages": [{"role": "assistant", "parts": [
            {"type": "tool-call", "tool_call_id": "c1", "tool_name": "read", "args": {"p": 1}}]}]},
        {"type": "commit_step", "messages": [{"role": "tool", "parts": [
            {"type": "tool-result", "tool_call_id": "c1", "tool_name": "read", "result": "ok"}]}]},
        {"type": "finish_turn"}, {"type": "send_message", "text": "more"})])
    return _chats(app)[0]


def test_a_command_on_the_tail_reads_no_more_chunks_than_its_rule_needs(app: Any, db_url: str,
                                                                          monkeypatch: Any) -> None:
    monkeypatch.setattr(chat_index, "CHUNK", 2)
    chat_id = long_chat(app)
    assert len(app.load(chat_id).state.messages) > 40
    reads: list[dict[int, int]] = []
    original = ChunkLoader.__call__

    def counted(self: Any, wanted: dict[int, int]) -> Any:
        reads.append(dict(wanted))
        return original(self, wanted)

    monkeypatch.setattr(ChunkLoader, "__call__", counted)
    fresh = open_app(db_url)
    try:
        execute(fresh, command_from_dict({"type": "set_title", "chat_id": str(chat_id), "title": "renamed"}))
        assert reads == []  # a title reads no message
        # a tool result: the rule reads back to the latest assistant message (in the last chunks)
        execute(fresh, command_from_dict({"type": "commit_step", "chat_id": str(chat_id), "messages": [
            {"role": "assistant", "parts": [{"type": "tool-call", "tool_call_id": "c9", "tool_name": "read",
                                             "args": {}}]}]}))
        execute(fresh, command_from_dict({"type": "commit_step", "chat_id": str(chat_id), "messages": [
            {"role": "tool", "parts": [{"type": "tool-result", "tool_call_id": "c9", "tool_name": "read",
                                        "result": "ok"}]}]}))
        assert sum(len(r) for r in reads) <= chat_index.BATCH
        assert same(fresh.load(chat_id), replayed(fresh, chat_id))
    finally:
        fresh.close()


def test_missing_chunk_rows_cost_a_replay_not_an_answer(app: Any, db_url: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(chat_index, "CHUNK", 2)
    chat_id = long_chat(app)
    expected = replayed(app, chat_id)
    delete_older(app.snapshots.recorder, chunk_stream(chat_id), 2**62)  # every chunk row, the heads kept
    fresh = open_app(db_url)
    try:
        restored = fresh.load(chat_id)
        assert restored.state.messages.loaded_chunks() <= 1 and same(restored, expected)
    finally:
        fresh.close()


def test_a_chunk_row_that_is_not_its_chunk_costs_a_replay(app: Any, db_url: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(chat_index, "CHUNK", 2)
    chat_id = long_chat(app)
    expected = replayed(app, chat_id)
    rows = app.snapshots.recorder.select_events(chunk_stream(chat_id))
    first, second = rows[0], rows[1]  # chunk 0's row gets chunk 1's messages (same key, wrong content)
    delete_older(app.snapshots.recorder, chunk_stream(chat_id), (first.originator_version + 1,
                                                                 first.originator_version))
    app.snapshots.recorder.insert_events([StoredEvent(originator_id=first.originator_id,
                                                      originator_version=first.originator_version,
                                                      topic=second.topic, state=second.state)])
    fresh = open_app(db_url)
    try:
        assert same(fresh.load(chat_id), expected)
    finally:
        fresh.close()


def test_an_edit_rewrites_the_chunks_it_touches(app: Any, db_url: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(chat_index, "CHUNK", 2)
    chat_id = long_chat(app)
    fresh = open_app(db_url)  # edits a chat restored from chunks, snapshots it again (every 8 events)
    try:
        fresh.snapshotting_intervals = {Chat: 8}
        for i in range(3):
            users = [m.message_id for m in fresh.load(chat_id).state.messages if m.role == "user" and not m.deleted]
            execute(fresh, command_from_dict({"type": "edit_message", "chat_id": str(chat_id),
                                              "message_id": users[-3], "text": f"edit {i}"}))
            for _ in range(3):
                execute(fresh, command_from_dict({"type": "commit_step", "chat_id": str(chat_id), "messages": [
                    {"role": "assistant", "parts": [{"type": "text", "text": "ok"}]}]}))
    finally:
        fresh.close()
    rows = app.snapshots.recorder.select_events(chunk_stream(chat_id))
    chunks = [r.originator_version >> 32 for r in rows]
    assert len(chunks) == len(set(chunks))  # one row per chunk: a rewrite deleted the chunk's older row
    third = open_app(db_url)
    try:
        restored = third.load(chat_id)
        assert sum(m.deleted for m in restored.state.messages) > 0
        assert same(restored, replayed(third, chat_id))
    finally:
        third.close()


#: the head's shape before chunks: the index as one list of ``MessageInfo``
OldHead = _head_type(ChatState, {"messages": list[MessageInfo]}, "OldHead")


def test_a_snapshot_of_the_shape_before_chunks_is_ignored(app: Any, db_url: str, monkeypatch: Any) -> None:
    chat_id = long_chat(app)
    state = replayed(app, chat_id, 8).state
    fields = {f: getattr(state, f) for f in OldHead.__struct_fields__ if f != "messages"}
    old = ChatSnapshot(originator_id=chat_id, originator_version=app.load(chat_id).version + 1,
                       timestamp=state.created_at, fingerprint=ChatSnapshot.current_fingerprint(),
                       created_on=state.created_at, modified_on=state.created_at,
                       state=OldHead(messages=list(state.messages), **fields))
    app.snapshots.put([old])  # even with the current fingerprint, it does not decode as a head
    fresh = open_app(db_url)
    try:
        assert same(fresh.load(chat_id), replayed(fresh, chat_id))
    finally:
        fresh.close()
    ChatSnapshot.current_fingerprint.cache_clear()
    first = ChatSnapshot.current_fingerprint()
    ChatSnapshot.current_fingerprint.cache_clear()
    monkeypatch.setattr(ChatSnapshot, "STATE", OldHead)
    assert ChatSnapshot.current_fingerprint() != first  # and its fingerprint is another
    monkeypatch.undo()
    ChatSnapshot.current_fingerprint.cache_clear()
    assert "ledger.chat.index" in ChatSnapshot.FOLD_MODULES


def test_the_index_is_a_list_to_its_readers() -> None:
    at = __import__("datetime").datetime(2026, 1, 1)
    msgs = [MessageInfo(i, "user", "both", None, None, False, False, (), (), False, at) for i in range(1, 8)]
    index = MessageIndex(msgs, chunk_size=3)
    assert index == msgs and list(reversed(index)) == msgs[::-1] and index[2:5] == msgs[2:5]
    assert index[-1] is msgs[-1] and index[::2] == msgs[::2] and len(index + msgs[:2]) == 9
    assert list(reversed(index + msgs[:2])) == (msgs + msgs[:2])[::-1]
    index.mark_deleted([2, 9])
    assert [m.message_id for m in index if m.deleted] == [2]
    fresh = MessageIndex(msgs, chunk_size=3)
    assert [k for k, _ in fresh.unstored()] == [0, 1]  # full chunks only: the third is the head's tail
    fresh.mark_stored(0, 5)
    fresh.mark_stored(1, 6)
    assert fresh.stored_form() == ([5, 6], msgs[6:])
    fresh.mark_deleted([4])  # a change makes its chunk unstored again
    assert [k for k, _ in fresh.unstored()] == [1]


SHAPE_BASE = '''
from __future__ import annotations
from typing import Literal
import msgspec
Effort = Literal["low", "high"]
class Leaf(msgspec.Struct, forbid_unknown_fields=True):
    a: int
    effort: Effort = "low"
class Root(msgspec.Struct):
    leaves: list[Leaf]
    note: str | None = None
'''


def _shape(source: str) -> str:
    import sys
    import types

    from ledger.snapshots import state_shape

    module = types.ModuleType("shape_probe")
    sys.modules["shape_probe"] = module
    try:
        exec(compile(source, "shape_probe", "exec"), module.__dict__)
        return state_shape(module.Root)
    finally:
        del sys.modules["shape_probe"]


def test_the_state_shape_follows_nested_types_aliases_defaults_and_configuration() -> None:
    base = _shape(SHAPE_BASE)
    assert _shape(SHAPE_BASE) == base  # the same definitions, the same shape
    variants = [
        SHAPE_BASE.replace("    a: int", "    a: str"),  # a nested field's type
        SHAPE_BASE.replace('Literal["low", "high"]', 'Literal["low", "max"]'),  # an alias's allowed values
        SHAPE_BASE.replace('effort: Effort = "low"', 'effort: Effort = "high"'),  # a default
        SHAPE_BASE.replace("forbid_unknown_fields=True", "array_like=True"),  # the encoding of a nested type
        SHAPE_BASE.replace("    note: str | None = None", "    memo: str | None = None"),  # a field's name
    ]
    shapes = [_shape(v) for v in variants]
    assert all(s != base for s in shapes) and len(set(shapes)) == len(shapes)
