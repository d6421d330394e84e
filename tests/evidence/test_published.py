"""The checkpoints a service publishes, recorded in the log (issue 27, points 2 and 5): the rules of the stream
(pure, by hypothesis against a model), and the service layer on SQLite and PostgreSQL — a published checkpoint
verifies with the log's key and against the events, an idle log publishes nothing new, the checkpoint of any
size is found, and only a trusted witness's valid cosignature of the latest one is recorded, once."""

from __future__ import annotations

from datetime import datetime, timezone
from uuid import uuid4

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from commands.evidence import (
    check_checkpoint, checkpoint_of_size, latest_checkpoint, publish_checkpoint, record_cosignature,
)
from ledger.base import Emitter
from ledger.errors import LedgerError
from ledger.evidence import published
from ledger.evidence.checkpoint import Checkpoint, check_cosignature, cosign_checkpoint, key_id
from ledger.store import open_app
from tests.store.test_chain import _paris

NOW = datetime(2026, 12, 4, tzinfo=timezone.utc)
ID = published.CHECKPOINTS_ID


def _fold(events: list, state: published.LogState | None) -> published.LogState | None:
    for e in events:
        state = published.evolve(state, e)
    return state


# -- the rules, pure ------------------------------------------------------------------------------------------

ops = st.lists(st.one_of(
    st.tuples(st.just("grow"), st.integers(0, 5)),  # other events recorded in the log
    st.tuples(st.just("publish"), st.just(0)),
    st.tuples(st.just("cosign"), st.integers(0, 2)),  # a witness (0..2) cosigns what it was shown
    st.tuples(st.just("cosign_old"), st.integers(0, 2)),  # ... a checkpoint older than the latest
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_stream_of_checkpoints_keeps_its_rules(operations) -> None:
    """Against a model: a checkpoint is recorded exactly when the log holds an event after the last one that is
    not the stream's own; sizes strictly grow; each witness cosigns the latest once; older ones are refused."""
    state, log, stream, published_sizes = None, 0, [], []
    own_since_last = 0  # events of this stream recorded after the last checkpoint's last entry
    for op, arg in operations:
        version = state.version if state is not None else 0
        if op == "grow":
            log += arg
        elif op == "publish":
            events = published.publish(state, Emitter(ID, version, NOW), log_size=log, root_hash="ab" * 32,
                                       time="t", key_id="k", signature="s")
            others = log - (published_sizes[-1] if published_sizes else 0) - own_since_last
            assert bool(events) == (not published_sizes or others > 0), (log, published_sizes, own_since_last)
            if events:
                published_sizes.append(log)
                own_since_last = len(events)
        else:
            target = published_sizes[-1] if published_sizes else 0
            if op == "cosign_old":
                target -= 1
            try:
                events = published.cosign(state, Emitter(ID, version, NOW), log_size=target, root_hash="ab" * 32,
                                          witness_key_id=str(arg), time="t", signature="s")
            except LedgerError as e:
                assert op == "cosign_old" or not published_sizes, e
                assert e.code in ("checkpoint_superseded", "checkpoint_not_found")
                continue
            assert op == "cosign" and published_sizes
            already = any(c.witness_key_id == str(arg) for c in state.cosignatures)
            assert bool(events) == (not already)
            own_since_last += len(events)
        state = _fold(events if op != "grow" else [], state)
        stream.extend(events if op != "grow" else [])
        log += len(events) if op != "grow" else 0
    sizes = [e.log_size for e in stream if isinstance(e, published.CheckpointPublished)]
    assert sizes == published_sizes and sizes == sorted(set(sizes))
    assert [e.log_size for e in stream if hasattr(e, "log_size")] == sorted(e.log_size for e in stream
                                                                            if hasattr(e, "log_size"))


# -- the service layer, both backends -------------------------------------------------------------------------

@pytest.fixture
def key():
    return Ed25519PrivateKey.generate()


def test_published_checkpoints_verify_and_an_idle_log_publishes_nothing(db_url, key) -> None:
    _paris(db_url)
    app = open_app(db_url)
    try:
        with pytest.raises(LedgerError) as e:
            latest_checkpoint(app)
        assert e.value.code == "checkpoint_not_found"
        first = publish_checkpoint(app, key)
        assert first is not None and first.log_size == app.head() - 2  # its own two events come after it
        assert check_checkpoint(app, first, key.public_key()) == []
        assert publish_checkpoint(app, key) is None  # nothing but its own events since
        assert latest_checkpoint(app)["log_size"] == first.log_size

        _grow(app)  # more events
        second = publish_checkpoint(app, key)
        assert second is not None and second.log_size > first.log_size
        served = latest_checkpoint(app)
        assert Checkpoint.from_json(served) == second and served["cosignatures"] == []
        for cp in (first, second):
            assert Checkpoint.from_json(checkpoint_of_size(app, cp.log_size)) == cp
        for size in (0, first.log_size + 1, second.log_size + 1):
            with pytest.raises(LedgerError) as e:
                checkpoint_of_size(app, size)
            assert e.value.code == "checkpoint_not_found"
    finally:
        app.close()


def test_many_checkpoints_are_found_by_size(db_url, key) -> None:
    """Bisecting the stream finds each of many checkpoints (and its cosignatures, not another's)."""
    app = open_app(db_url)
    witness = Ed25519PrivateKey.generate()
    try:
        sizes = []
        for i in range(23):
            _grow(app)
            cp = publish_checkpoint(app, key)
            assert cp is not None
            sizes.append(cp.log_size)
            if i % 3 == 0:
                assert record_cosignature(app, cp.log_size, cosign_checkpoint(witness, cp, "2026-12-04T00:00:00Z"),
                                          [witness.public_key()])
        for i, size in enumerate(sizes):
            doc = checkpoint_of_size(app, size)
            assert doc["log_size"] == size
            assert [c["witness_key_id"] for c in doc["cosignatures"]] == ([key_id(witness.public_key())]
                                                                          if i % 3 == 0 else [])
    finally:
        app.close()


def test_only_a_trusted_witness_valid_cosignature_of_the_latest_is_recorded_once(db_url, key) -> None:
    app = open_app(db_url)
    witness, stranger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    trusted = [witness.public_key()]
    try:
        _grow(app)
        old = publish_checkpoint(app, key)
        _grow(app)
        cp = publish_checkpoint(app, key)
        head = app.head()

        def refused(size, cosignature, code):
            with pytest.raises(LedgerError) as e:
                record_cosignature(app, size, cosignature, trusted)
            assert e.value.code == code, e.value
            assert app.head() == head  # nothing recorded

        good = cosign_checkpoint(witness, cp, "2026-12-04T00:00:00Z")
        refused(cp.log_size, cosign_checkpoint(stranger, cp, "2026-12-04T00:00:00Z"), "witness_unknown")
        refused(cp.log_size, {**good, "time": "2026-12-05T00:00:00Z"}, "invalid_request")  # not what was signed
        refused(old.log_size, cosign_checkpoint(witness, old, "2026-12-04T00:00:00Z"), "checkpoint_superseded")
        refused(cp.log_size + 1, good, "checkpoint_not_found")
        assert record_cosignature(app, cp.log_size, good, trusted) is True
        assert record_cosignature(app, cp.log_size, good, trusted) is False  # once
        served = latest_checkpoint(app)
        assert len(served["cosignatures"]) == 1
        check_cosignature(Checkpoint.from_json(served), served["cosignatures"][0], witness.public_key())
    finally:
        app.close()


def _grow(app) -> None:
    from commands.tokens import issue_token

    issue_token(app, user=uuid4(), deployment_admin=True)
