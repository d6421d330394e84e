"""Issue 28: the views under erasure, by hypothesis, on SQLite and PostgreSQL — chat commands with erasures of the
chats' owner and of another writer among them (the erased one writing again after: a new key), then the chat and
search views built incrementally by a random schedule of batches, crashes and redeliveries (an erasure in the same
batch as its chat's events, or not) equal the same views built in one pass and built stream by stream — which
reads every event with the keys as they are now, so no build holds a word whose key was destroyed."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.handler import command_from_dict, execute
from ledger.errors import LedgerError
from projections import catch_up, maintained_version, rebuild
from projections.chats import ChatViews
from projections.search import SearchView
from tests.chat.helpers import setup_org
from tests.projections.projection_kit import read_build
from tests.projections.test_chat_views import ACTIONS, ORG, OWNER, renamed
from tests.projections.test_projection_exactly_once import drive

WRITER = "5b1d7e9a-2c4f-4a6b-9d8e-00000000b0b0"  # writes in OWNER's chats (an admin, say)

STEPS = st.one_of(
    st.tuples(st.integers(0, 2), ACTIONS),
    st.tuples(st.integers(0, 2), st.just({"type": "send_message", "text": "writerword", "created_by": WRITER,
                                          "busy_behavior": "queue"})),
    st.tuples(st.just(-1), st.sampled_from([OWNER, WRITER])),  # an erasure
)


def record(app: Any, steps: list[Any]) -> None:
    if app.load(uuid.UUID(ORG)) is None:  # (the ledger is the test's, shared by its examples)
        setup_org(app, ORG, (OWNER, WRITER))
    ids = [execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                           "text": f"ownerword {i}", "dynamic_tools": ["ask"]}))["chat_id"]
           for i in range(3)]
    for i, action in steps:
        if i < 0:
            execute(app, command_from_dict({"type": "erase_subject", "user_id": action, "reason": "r"}))
            continue
        try:
            execute(app, command_from_dict({"chat_id": ids[i], **action}))
        except LedgerError:
            pass


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(steps=st.lists(STEPS, min_size=1, max_size=20),
       schedule=st.lists(st.tuples(st.sampled_from(["batch", "crash", "redeliver"]), st.integers(1, 12)),
                         min_size=1, max_size=8))
def test_views_with_erasures_built_incrementally_equal_a_rebuild(sealed, steps, schedule) -> None:
    app, backend = sealed
    record(app, steps)
    suffix = uuid.uuid4().hex[:6]
    for cls in (ChatViews, SearchView):
        p = renamed(cls, app, f"i{suffix}")
        version = maintained_version(p, backend)
        drive(app, backend, p, version, schedule)
        catch_up(app, p, backend, batch_size=3)
        full = renamed(cls, app, f"f{suffix}")
        catch_up(app, full, backend, batch_size=1000)
        streamwise = renamed(cls, app, f"s{suffix}")
        rebuild(app, streamwise, backend)
        # (the stream-wise build decodes every event with the keys as they are now: a row holding an erased word
        # would differ from it)
        assert read_build(backend, p, version) == read_build(backend, full) == read_build(backend, streamwise), \
            cls.name


def test_an_erasure_in_the_batch_that_changed_its_chat_drops_the_rows_that_batch_removed(sealed) -> None:
    """A queued prompt's row exists; then, in one batch, the turn ends (the prompt is promoted: its queue row goes)
    and the owner is erased: the row must be gone, as in a rebuild (the pending change dropped, the chat's rows
    deleted and written again)."""
    app, backend = sealed
    setup_org(app, ORG, (OWNER, WRITER))
    chat = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                           "text": "ownerword"}))["chat_id"]
    execute(app, command_from_dict({"type": "send_message", "chat_id": chat, "text": "queuedword",
                                    "busy_behavior": "queue"}))
    p = renamed(ChatViews, app, "pending")
    catch_up(app, p, backend)
    assert read_build(backend, p)["chat_queue"]
    execute(app, command_from_dict({"type": "finish_turn", "chat_id": chat}))
    execute(app, command_from_dict({"type": "erase_subject", "user_id": OWNER, "reason": "r"}))
    catch_up(app, p, backend, batch_size=1000)  # (both in one batch)
    streamwise = renamed(ChatViews, app, "pending_s")
    rebuild(app, streamwise, backend)
    assert read_build(backend, p) == read_build(backend, streamwise) and not read_build(backend, p)["chat_queue"]
