"""Issue 28: a view that reads no personal field (``Projection.personal`` False: the usage view) is built from its
events as stored, no sealed value opened (``MsgspecMapper.to_clear_event``). By hypothesis over chat commands with
usage reports, several writers and erasures among them, on SQLite and PostgreSQL: such a view, built incrementally
by a random schedule of batches, crashes and redeliveries without opening a single box, holds exactly the rows a
build that opens every box (tombstones where a key was destroyed) holds, and its rebuild too."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.views import all_projections
from ledger.chat.values import USAGE_FIELDS
from ledger.sealer import is_sealed
from projections import catch_up, maintained_version, rebuild
from tests.projections.projection_kit import read_build
from tests.projections.test_chat_views import ACTIONS, OWNER, renamed
from tests.privacy.test_erasure_views import WRITER, record
from tests.projections.test_projection_exactly_once import drive

usages = st.fixed_dictionaries({}, optional={name: st.integers(0, 10**6) for name in USAGE_FIELDS})
STEPS = st.one_of(
    st.tuples(st.integers(0, 2), ACTIONS),
    st.tuples(st.integers(0, 2), st.builds(lambda usage, author: {
        "type": "commit_step", "messages": [{"role": "assistant", "created_by": author, "usage": usage,
                                             "parts": [{"type": "text", "text": "spent"}]}]},
        usages, st.sampled_from([OWNER, WRITER]))),
    st.tuples(st.just(-1), st.sampled_from([OWNER, WRITER])),  # an erasure
)


def clear_views(app: Any) -> list[type]:
    """The classes of the views that read no personal field."""
    return [type(p) for p in all_projections(app) if not p.personal]


def refuse(*_: Any, **__: Any) -> Any:
    raise AssertionError("a view that reads no personal field opened a sealed value")


def test_the_usage_view_is_the_one_that_reads_no_personal_field(memory_app) -> None:
    """The list the property below runs over (a view added with ``personal`` False joins it)."""
    assert [cls.name for cls in clear_views(memory_app)] == ["usage"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(steps=st.lists(STEPS, min_size=1, max_size=20),
       schedule=st.lists(st.tuples(st.sampled_from(["batch", "crash", "redeliver"]), st.integers(1, 12)),
                         min_size=1, max_size=8))
def test_a_view_built_without_opening_a_box_equals_one_that_opens_every_box(sealed, monkeypatch, steps,
                                                                             schedule) -> None:
    app, backend = sealed
    record(app, steps)
    assert sum(is_sealed(bytes(n.state)) for n in app.recorder.select_notifications(start=1, limit=10_000)) >= 3
    suffix = uuid.uuid4().hex[:6]
    for cls in clear_views(app):
        opening = type(f"{cls.__name__}_opening", (cls,), {"name": f"{cls.name}_o{suffix}", "personal": True})(app)
        catch_up(app, opening, backend, batch_size=1000)
        p = renamed(cls, app, f"i{suffix}")
        streamwise = renamed(cls, app, f"s{suffix}")
        with monkeypatch.context() as m:  # (opening any sealed value fails the test: the sealer's two ways in)
            m.setattr(app.mapper.sealer, "open_payload", refuse)
            m.setattr(app.mapper.sealer, "unseal", refuse)
            version = maintained_version(p, backend)
            drive(app, backend, p, version, schedule)
            catch_up(app, p, backend, batch_size=3)
            rebuild(app, streamwise, backend)
        built = read_build(backend, p, version)
        assert built == read_build(backend, streamwise) == read_build(backend, opening), cls.name
        assert built[next(iter(built))], cls.name  # (rows there were: three chats at least)
