"""Issue 25, point 5: every recorder the application's factory hands out that writes the log keeps the chain.

The eventsourcing library's own recorder contract tests (``eventsourcing.tests.persistence``), subclassed
for the recorders the ledger's factories hand out for the log — ``application_recorder()`` and
``process_recorder()`` — on SQLite and on PostgreSQL (``aggregate_recorder("events")`` is refused). After each library test, every stream the
test wrote must verify (``ledger.chain.check_stream``): no row without its hash, no break. And the library's
own recorder classes, given the ledger's table directly (not through the factory), are caught: on SQLite the
table refuses their rows; on PostgreSQL ``events verify`` names the unhashed row.
"""

from __future__ import annotations

import tempfile
import uuid
from contextlib import contextmanager
from typing import Any, Iterator
from unittest import TestCase

import pytest
from eventsourcing.persistence import InfrastructureFactoryError, StoredEvent
from eventsourcing.tests.persistence import (
    ApplicationRecorderTestCase, NonInterleavingNotificationIDsBaseCase,
    ProcessRecorderTestCase,
)

from ledger.chain import check_stream, scan
from ledger.recorders.sqlite import SQLiteLedgerProcessRecorder, SQLiteLedgerRecorder
from ledger.store import ChatLedgerApp, open_app
from tests.conftest import PG_URL, _with_schema, drop_schema, require_pg


@contextmanager
def _ledger(backend: str) -> Iterator[ChatLedgerApp]:
    """A new, empty ledger on ``backend``, closed and removed after."""
    if backend == "postgres":
        require_pg()
    with tempfile.TemporaryDirectory() as tmp:
        url = (_with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}") if backend == "postgres"
               else f"sqlite:///{tmp}/ledger.db")
        app = open_app(url)
        try:
            yield app
        finally:
            app.close()
            if backend == "postgres":
                drop_schema(url)


class _OnLedger(TestCase):
    """A fresh ledger per test (the library's tests expect an empty table); after it, the chain holds."""

    backend = "sqlite"

    def setUp(self) -> None:
        self.context = _ledger(self.backend)
        self.app = self.context.__enter__()

    def tearDown(self) -> None:
        try:
            self.assert_every_stream_chained()
        finally:
            self.context.__exit__(None, None, None)

    def factory_recorder(self, kind: str) -> Any:
        factory = self.app.factory
        return {"application": factory.application_recorder, "process": factory.process_recorder}[kind]()

    def assert_every_stream_chained(self) -> None:
        streams: dict[Any, list[Any]] = {}
        for n in _hashed_rows(self.app):
            streams.setdefault(n.originator_id, []).append(n)
        for stream, rows in streams.items():
            rows.sort(key=lambda r: r.originator_version)
            check = check_stream(rows)
            assert check.unhashed == 0 and check.broken_at is None, (stream, check.summary())


def _hashed_rows(app: ChatLedgerApp) -> list[Any]:
    """Every stored row with its chain hash (``ledger.chain.scan``: what the table holds)."""
    return list(scan(app, app.head() or 0))


class _Application(_OnLedger, ApplicationRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory_recorder("application")

    def test_performance(self) -> None:  # a timing printed, nothing asserted: measured in the benchmarks
        pytest.skip("prints a timing only; the write path is measured by `chat-ledger bench`")

    def test_concurrent_throughput(self) -> None:
        pytest.skip("prints a timing only; the write path is measured by `chat-ledger bench`")


class _Process(_OnLedger, ProcessRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory_recorder("process")

    def test_performance(self) -> None:
        pytest.skip("prints a timing only; the write path is measured by `chat-ledger bench`")


class _NonInterleaving(_OnLedger, NonInterleavingNotificationIDsBaseCase):
    def create_recorder(self) -> Any:
        return self.factory_recorder("application")


class TestSQLiteApplicationRecorder(_Application):
    pass


class TestSQLiteProcessRecorder(_Process):
    pass


class TestSQLiteNonInterleaving(_NonInterleaving):
    pass


class TestPostgresApplicationRecorder(_Application):
    backend = "postgres"


class TestPostgresProcessRecorder(_Process):
    backend = "postgres"


class TestPostgresNonInterleaving(_NonInterleaving):
    backend = "postgres"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_factory_hands_out_only_chain_keeping_recorders_for_the_log(backend: str) -> None:
    with _ledger(backend) as app:
        from ledger.recorders.postgres import PostgresLedgerProcessRecorder, PostgresLedgerRecorder

        app_type, process_type = ((SQLiteLedgerRecorder, SQLiteLedgerProcessRecorder) if backend == "sqlite"
                                  else (PostgresLedgerRecorder, PostgresLedgerProcessRecorder))
        assert type(app.recorder) is app_type
        with pytest.raises(InfrastructureFactoryError, match="application_recorder"):
            app.factory.aggregate_recorder("events")
        assert type(app.factory.process_recorder()) is process_type
        assert not isinstance(app.factory.aggregate_recorder("snapshots"), app_type)  # not the log: the library's


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_librarys_own_recorders_on_the_ledgers_table_are_refused_or_named(backend: str) -> None:
    """What the issue found, kept found: a recorder the factory does not hand out, pointed at the ledger's
    table by hand, cannot quietly extend a chain. SQLite refuses its row; on PostgreSQL the row goes in without
    a hash and ``events verify``'s check names it (and the ledger's next insert on that stream is unhashed)."""
    from eventsourcing.postgres import PostgresAggregateRecorder
    from eventsourcing.sqlite import SQLiteAggregateRecorder

    with _ledger(backend) as app:
        stream = uuid.uuid4()
        app.recorder.insert_events([StoredEvent(stream, 1, "t", b"one")])
        library_class = SQLiteAggregateRecorder if backend == "sqlite" else PostgresAggregateRecorder
        library = library_class(app.recorder.datastore, events_table_name=app.recorder.events_table_name)
        if backend == "sqlite":
            with pytest.raises(Exception, match="5 columns but 4 values"):
                library.insert_events([StoredEvent(stream, 2, "t", b"two")])
            rows = [r for r in _hashed_rows(app) if r.originator_id == stream]
            assert [r.originator_version for r in rows] == [1]
        else:
            library.insert_events([StoredEvent(stream, 2, "t", b"two")])
            rows = sorted((r for r in _hashed_rows(app) if r.originator_id == stream),
                          key=lambda r: r.originator_version)
            check = check_stream(rows)
            assert check.broken_at == 2 and "no hash" in (check.reason or ""), check.summary()


del _Application, _Process, _NonInterleaving
del ApplicationRecorderTestCase, ProcessRecorderTestCase
del NonInterleavingNotificationIDsBaseCase
