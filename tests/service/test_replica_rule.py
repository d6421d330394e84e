"""The read-your-writes rule of ``serve --replica-url`` (``commands.http.replica``), as a property: whatever the
interleaving of writes, standby replay and reads, a read the standby answers is at or past every write its token
made before it; a token that never wrote is always answered by the standby (it waits for nobody); a standby
missing a stream hands the read to the primary."""

from __future__ import annotations

from uuid import UUID

from hypothesis import given, settings, strategies as st

from commands.http.replica import ReplicaReads
from ledger.errors import LedgerError


class FakeLedger:
    """A log head and a views position (the standby's lag behind the primary's)."""

    def __init__(self) -> None:
        self.log = 0
        self.views = 0

    def head(self) -> int:
        return self.log

    def views_position(self, *names: str) -> int:
        return self.views


TOKENS = [UUID(int=1), UUID(int=2), UUID(int=3)]
steps = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(TOKENS)),
    st.tuples(st.just("replay"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("read"), st.sampled_from(TOKENS), st.booleans()),
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_a_read_the_standby_answers_has_every_write_of_its_token(program) -> None:
    primary, standby = FakeLedger(), FakeLedger()
    reads = ReplicaReads(primary, standby, wait=0.0)
    written: dict[UUID, int] = {}
    for step in program:
        if step[0] == "write":
            primary.log += 1
            primary.views = primary.log
            written[step[1]] = primary.log
            reads.wrote(step[1])
        elif step[0] == "replay":  # the standby replays some of what it lacks (its views may trail its log)
            standby.log = min(primary.log, standby.log + step[1])
            standby.views = standby.log if step[2] else min(standby.views, standby.log)
        else:
            token, with_views = step[1], step[2]
            names = ("chat_views",) if with_views else ()
            chosen = reads.choose(token, names)
            if chosen is standby:
                seen = min(standby.log, standby.views) if with_views else standby.log
                assert seen >= written.get(token, 0)
            if token not in written:
                assert chosen is standby


def test_a_stream_the_standby_has_not_seen_is_asked_of_the_primary() -> None:
    primary, standby = FakeLedger(), FakeLedger()
    reads = ReplicaReads(primary, standby, wait=0.0)

    def show(ledger: FakeLedger) -> str:
        if ledger is standby:
            raise LedgerError("chat_not_found", "not on the standby yet")
        return "from the primary"

    assert reads.read(TOKENS[0], (), show) == "from the primary"
    assert reads.served == {"replica": 0, "primary": 1}

    def refused(ledger: FakeLedger) -> str:
        raise LedgerError("not_chat_owner", "refused")

    try:
        reads.read(TOKENS[0], (), refused)
    except LedgerError as e:  # any other refusal is the answer: never retried on the primary
        assert e.code == "not_chat_owner"
    else:
        raise AssertionError("the refusal was swallowed")
