"""The PostgreSQL recorder: one attempt per insert, in-doubt commits reported, expected versions checked,
reads retried for a bounded time (``ledger.recorders``, which also holds the timeouts)."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from typing import Any, Callable, Mapping, Sequence, TypeVar
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    IntegrityError, InterfaceError, Notification, OperationalError, ProgrammingError, StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresProcessRecorder
from psycopg.sql import SQL, Identifier

from ledger.chain import COLUMN
from ledger.recorders import (
    EXPECTED_VERSIONS, READ_BACK_LOCK_TIMEOUT, READ_RETRY_SECONDS, ConnectionLost, DependencyChanged,
    KeysWithEvents, ReplicationUnconfirmed, SaveInDoubt, StatementTimedOut, commit_timeout,
    stale_versions,
)

F = TypeVar("F", bound=Callable[..., Any])


def bounded_retry(seconds: float) -> Callable[[F], F]:
    """Retry on connection errors while less than ``seconds`` have passed since the first attempt."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            deadline = time.monotonic() + seconds
            pause = 0.05
            while True:
                try:
                    return fn(*args, **kwargs)
                except (InterfaceError, OperationalError):
                    if time.monotonic() + pause > deadline:
                        raise
                    time.sleep(pause)  # back off before reconnecting
                    pause = min(pause * 2, 0.4)

        return wrapper  # type: ignore[return-value]

    return decorate


def _unretried(method: Any) -> Any:
    """A library method without its own retry decorator (``functools.wraps`` keeps the original)."""
    return getattr(method, "__wrapped__", method)


def _connection_failed(conn: Any, error: BaseException) -> bool:
    """Whether ``error`` is the connection failing (none had, a broken or closed one, or no answer from
    the server) rather than the server refusing a statement on a connection that still works."""
    if conn is None or conn.closed or conn.broken:
        return True
    cause = error.__cause__ if error.__cause__ is not None else error
    return isinstance(error, (InterfaceError, OperationalError)) and getattr(cause, "sqlstate", None) is None


#: how PostgreSQL begins the WARNING it sends when a COMMIT's wait for a synchronous standby is canceled (the
#: transaction is then committed locally, not confirmed by any standby)
SYNC_REP_CANCELED = "canceling wait for synchronous replication"


def _cancel(conn: Any) -> None:
    """Ask the server to cancel what ``conn`` is running (a COMMIT waiting for a standby)."""
    try:
        getattr(conn, "cancel_safe", conn.cancel)()
    except Exception:  # noqa: BLE001 - the connection ended meanwhile: nothing left to cancel
        pass


#: the largest save (its payloads' bytes) sent as one pipeline; larger ones go statement by statement
PIPELINE_BYTES = 256 * 1024


class CancelWatch:
    """One thread that sends a cancel request to a connection whose deadline passes (a COMMIT waiting for a
    synchronous standby that has gone): a timer per save started a thread per save, a third of a save's time.
    ``disarm`` returns only when no cancel for that arming is under way or will be sent, so a connection goes
    back to its pool with nothing aimed at its next use."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, Any]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None
        self._wakes_at = float("inf")  # when the thread looks next (it is woken only for an earlier deadline)

    def arm(self, conn: Any, seconds: float) -> int:
        with self._cond:
            self._next += 1
            deadline = time.monotonic() + seconds
            self._armed[self._next] = (deadline, conn)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="commit-cancels", daemon=True)
                self._thread.start()
            elif deadline < self._wakes_at:
                self._cond.notify()
            return self._next

    def disarm(self, key: int | None) -> None:
        if key is not None:
            with self._cond:  # (held while a cancel is sent: after this, none is under way for ``key``)
                self._armed.pop(key, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                due = [k for k, (deadline, _) in self._armed.items() if deadline <= now]
                for k in due:
                    _cancel(self._armed.pop(k)[1])
                soonest = min((deadline for deadline, _ in self._armed.values()), default=None)
                self._wakes_at = float("inf") if soonest is None else soonest
                self._cond.wait(None if soonest is None else max(soonest - now, 0.001))


CANCELS = CancelWatch()


def binary_rows(datastore: Any, sql: str, params: Any, prepare: bool | None = None) -> list[tuple[Any, ...]]:
    """The rows of one query (its own transaction) as tuples, in PostgreSQL's binary format: a payload arrives as
    its bytes, where the text format sends bytea as hex, twice its size, decoded by the client — half the time of
    a log scan. The event reads of the recorder and of the projections' rebuilds (``projections.notes``,
    ``projections.streamwise``)."""
    from psycopg.rows import tuple_row

    with datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row, binary=True) as curs:
        curs.execute(sql, params, prepare=prepare)
        return curs.fetchall()


def _piece(e: str) -> str:
    """The bytes an event adds to its chain, as ``ledger.chain.link`` hashes them, in SQL."""
    return (f"int8send({e}.originator_version) || int4send(octet_length(convert_to({e}.topic, 'UTF8'))) || "
            f"convert_to({e}.topic, 'UTF8') || {e}.state")


class PostgresLedgerRecorder(KeysWithEvents, PostgresApplicationRecorder):
    """The library's application recorder with one insert attempt (``insert_events``), the expected
    versions checked at commit, bounded read retries, and the hash chain: ``chain_hash`` is computed by
    the insert statement itself — a recursive query linking each inserted event to the previous version's
    hash, read from the table in the insert's own transaction, after its EXCLUSIVE table lock."""

    chain_column: bool | None = None  # None: not asked yet (``ledger.chain.has_column``)

    def __init__(self, datastore: Any, *, events_table_name: str = "stored_events", **kwargs: Any) -> None:
        super().__init__(datastore, events_table_name=events_table_name, **kwargs)
        schema, table = Identifier(self.datastore.schema), Identifier(self.events_table_name)
        columns = "notification_id, originator_id, originator_version, topic, state"
        self.select_notifications_sql = SQL(f"SELECT {columns} FROM {{0}}.{{1}}").format(schema, table).as_string(None)
        self.select_events_sql = SQL(f"SELECT {columns} FROM {{0}}.{{1}} WHERE originator_id = %s").format(
            schema, table).as_string(None)
        id_type = Identifier(self.datastore.originator_id_type)
        create = self.sql_create_statements[self.create_table_statement_index]
        self.sql_create_statements[self.create_table_statement_index] = SQL(  # type: ignore[call-overload]
            create.as_string().replace("notification_id bigserial, ", f"notification_id bigserial, {COLUMN} bytea, "))
        assert COLUMN in self.sql_create_statements[self.create_table_statement_index].as_string()
        # The events go in as four parallel arrays (no composite type to build per row in Python), and the insert
        # checks the expected versions itself: a stream the decision read (and does not write) that has moved
        # makes it insert nothing (``insert_events`` then reads how far it moved), one statement after the lock.
        unnest = ("unnest(%s::{2}[], %s::bigint[], %s::text[], %s::bytea[]) WITH ORDINALITY"
                  " AS u(originator_id, originator_version, topic, state, ord)")
        unmoved = (" NOT EXISTS (SELECT 1 FROM unnest(%s::{2}[], %s::bigint[]) AS x(id, v)"
                   " WHERE COALESCE((SELECT max(m.originator_version) FROM {0}.{1} m WHERE m.originator_id = x.id),"
                   " 0) <> x.v)")
        self.library_insert_statement = SQL(  # (rendered once, as the hashed one: psycopg caches a str's parse)
            "INSERT INTO {0}.{1} (originator_id, originator_version, topic, state)"
            " SELECT u.originator_id, u.originator_version, u.topic, u.state FROM " + unnest
            + " WHERE" + unmoved + " ORDER BY u.ord RETURNING notification_id"
        ).format(schema, table, id_type).as_string(None)
        self.hashed_insert_statement = SQL(
            "WITH RECURSIVE e AS (SELECT u.originator_id, u.originator_version, u.topic, u.state, u.ord FROM "
            + unnest + "), c AS ("
            " SELECT e.ord, e.originator_id, e.originator_version, e.topic, e.state, sha256("
            "  CASE WHEN p.originator_id IS NULL AND e.originator_version <= 1 THEN '\\x" + "00" * 32 + "'::bytea"
            "  ELSE p.{3} END || " + _piece("e")
            + ") AS h"
            " FROM e LEFT JOIN {0}.{1} p ON p.originator_id = e.originator_id"
            "  AND p.originator_version = e.originator_version - 1"
            " WHERE NOT EXISTS (SELECT 1 FROM e b WHERE b.originator_id = e.originator_id"
            "  AND b.originator_version = e.originator_version - 1)"
            " UNION ALL"
            " SELECT e.ord, e.originator_id, e.originator_version, e.topic, e.state, sha256(c.h || " + _piece("e")
            + ") FROM c JOIN e ON e.originator_id = c.originator_id AND e.originator_version = c.originator_version + 1"
            ") INSERT INTO {0}.{1} (originator_id, originator_version, topic, state, {3})"
            " SELECT originator_id, originator_version, topic, state, h FROM c WHERE" + unmoved
            + " ORDER BY ord RETURNING notification_id"
        ).format(schema, table, id_type, Identifier(COLUMN)).as_string(None)  # rendered once (psycopg caches str)
        # the statements before the insert, rendered once: the bounds, the notification (sent at commit), the lock
        self.prelude_statement = ("SELECT set_config('statement_timeout', %s, true), "
                                  "set_config('lock_timeout', %s, true), pg_notify(%s, '')")
        self.lock_statement = SQL("LOCK TABLE {0}.{1} IN EXCLUSIVE MODE").format(schema, table).as_string(None)
        self.column_statement = SQL(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "AND column_name = %s")
        self.add_column_statement = SQL("ALTER TABLE {0}.{1} ADD COLUMN IF NOT EXISTS {2} bytea").format(
            schema, table, Identifier(COLUMN))
        self.current_versions_statement = SQL(
            "SELECT originator_id, MAX(originator_version) AS version FROM {0}.{1} "
            "WHERE originator_id = ANY(%s::{2}[]) GROUP BY originator_id"
        ).format(schema, table, id_type)
        # SHARE conflicts with the EXCLUSIVE lock every insert holds until it ends: once granted, no insert
        # that had the lock (the one whose reply was lost among them) is still in flight.
        self.read_back_statements = [
            SQL("SET LOCAL lock_timeout = '{0}ms'").format(int(READ_BACK_LOCK_TIMEOUT * 1000)),
            SQL("LOCK TABLE {0}.{1} IN SHARE MODE").format(schema, table),
        ]
        self.read_back_statement = SQL(
            "SELECT e.originator_id, e.originator_version, e.topic, e.state FROM {0}.{1} e "
            "JOIN unnest(%s::{2}[], %s::bigint[]) AS k(originator_id, originator_version) "
            "USING (originator_id, originator_version)"
        ).format(schema, table, id_type)

    def create_table(self) -> None:
        """The tables (with the chain column); a table made before hash chains gets the column. A ledger whose
        events table already has the column is left alone: every command that may create a ledger opens it
        with ``create``, and the library's statements, committed, would make each such command wait for a
        synchronous standby (unbounded, were it gone) for nothing."""
        if self.probe_chain_column():
            self._use_chain(True)
            return
        super().create_table()
        if not self.probe_chain_column():
            with self.datastore.transaction(commit=True) as curs:
                curs.execute(self.add_column_statement)
        self._use_chain(True)

    def probe_chain_column(self) -> bool:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.column_statement, (self.datastore.schema, self.events_table_name, COLUMN))
            return curs.fetchone() is not None

    def _use_chain(self, present: bool) -> None:
        self.chain_column = present
        self.insert_events_statement = self.hashed_insert_statement if present else self.library_insert_statement

    def _insert_stored_events(self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        """The insert (after the lock), checking the expected versions: it inserts nothing if one moved."""
        if self.chain_column is None:  # a ledger opened without creating anything: is it hashed?
            self._use_chain(self.probe_chain_column())
        expected: Mapping[UUID, int] = kwargs.get(EXPECTED_VERSIONS) or {}
        curs.execute(self.insert_events_statement, (
            [e.originator_id for e in stored_events], [e.originator_version for e in stored_events],
            [e.topic for e in stored_events], [e.state for e in stored_events],
            list(expected), list(expected.values())), prepare=True)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """``_insert_once``, with the new data keys of the saved streams in its transaction (``KeysWithEvents``)."""
        return self._with_new_keys(stored_events, lambda new: self._insert_once(stored_events, new, **kwargs))

    def _insert_once(self, stored_events: Sequence[StoredEvent], new_keys: list[Any],
                     **kwargs: Any) -> Sequence[int] | None:
        """One attempt, never retried here: bound the save's statements, lock the table, insert (checking the
        expected versions), then COMMIT. Two round trips for a save of at most ``PIPELINE_BYTES``: everything
        before COMMIT goes as one pipeline, and COMMIT alone after its answers, so that a connection failing
        before COMMIT was sent is known to have recorded nothing (``ConnectionLost``; after: ``SaveInDoubt``).
        A larger save goes statement by statement."""
        if self.chain_column is None and stored_events:
            self._use_chain(self.probe_chain_column())
        expected: Mapping[UUID, int] = kwargs.get(EXPECTED_VERSIONS) or {}
        conn: Any = None
        commit_sent = False
        seconds = commit_timeout()
        unconfirmed: list[str] = []
        watch: Any = None
        # psycopg 3.3 with libpq 18 leaves the end of a pipelined statement of more than a few MB in its output
        # buffer and waits for a reply the server cannot send, forever, holding the table's lock
        # (tests/store/test_large_saves.py): large saves are not pipelined
        pipelined = sum(len(e.state) for e in stored_events) <= PIPELINE_BYTES

        def notice(diag: Any) -> None:  # the server's word that it stopped waiting for a standby
            if (diag.message_primary or "").startswith(SYNC_REP_CANCELED):
                unconfirmed.append(diag.message_primary)

        try:
            with self.datastore.get_connection() as conn:
                conn.add_notice_handler(notice)
                with conn.cursor() as curs, conn.cursor() as insert:
                    try:
                        # BEGIN as a statement: psycopg's transaction block would sync the pipeline at its start
                        with conn.pipeline() if pipelined else contextlib.nullcontext():
                            curs.execute("BEGIN")
                            # every statement of this save is bounded (and COMMIT below: ``CANCELS``)
                            curs.execute(self.prelude_statement, (f"{int(seconds * 1000)}ms",
                                                                  f"{self.datastore.lock_timeout}s",
                                                                  self.channel_name), prepare=True)
                            curs.execute(self.lock_statement, prepare=True)
                            self._insert_events(curs, stored_events, **kwargs)  # (a process recorder's tracking)
                            if stored_events:
                                self._insert_stored_events(insert, stored_events, **kwargs)
                            if new_keys:
                                self.new_keys.keys.insert_new(curs, [k.row for k in new_keys])
                        notification_ids = ([r["notification_id"] for r in insert.fetchall()]
                                            if stored_events else [])
                        if len(notification_ids) < len(stored_events) or (expected and not stored_events):
                            # a stream the decision read has moved (the insert wrote nothing): which, and how far
                            curs.execute(self.current_versions_statement, (list(expected),), prepare=True)
                            stale = stale_versions(expected, {r["originator_id"]: r["version"]
                                                              for r in curs.fetchall()})
                            if stale or stored_events:
                                conn.rollback()
                                raise DependencyChanged(stale) if stale else ProgrammingError(
                                    f"{len(notification_ids)} of {len(stored_events)} events inserted")
                        # PostgreSQL's statement timeout ends before COMMIT's wait for a synchronous standby: that
                        # wait is bounded by a cancel request (the server then stops waiting, commits locally
                        # and says so: ``notice``)
                        watch = CANCELS.arm(conn, seconds)
                        commit_sent = True
                        curs.execute("COMMIT")
                    except BaseException:
                        if not conn.broken and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                            conn.rollback()  # a statement failed: the transaction is open, aborted
                        raise
                CANCELS.disarm(watch)  # (a cancel under way is sent before the connection goes back to the pool)
                watch = None
                conn.remove_notice_handler(notice)
            if unconfirmed:
                raise ReplicationUnconfirmed(stored_events, seconds)
            return notification_ids
        except Exception as e:
            CANCELS.disarm(watch)
            if conn is not None:
                try:
                    conn.remove_notice_handler(notice)
                except ValueError:
                    pass
            canceled = e if isinstance(e, psycopg.errors.QueryCanceled) else e.__cause__
            if isinstance(canceled, psycopg.errors.QueryCanceled) and not unconfirmed:
                raise StatementTimedOut(f"a statement of the save took more than {seconds:g} s and was "
                                        "canceled: nothing was recorded") from e
            if isinstance(e, (IntegrityError, ReplicationUnconfirmed, StatementTimedOut, ProgrammingError)) \
                    or not _connection_failed(conn, e):
                raise
            if commit_sent:
                raise SaveInDoubt(stored_events, e) from e
            raise ConnectionLost("connection lost before COMMIT was sent, nothing recorded: "
                                 f"{str(e).strip() or type(e).__name__}") from e

    def commit_confirmation_problem(self) -> str | None:
        """Why a commit here cannot be confirmed now, or None: the server makes commits wait for a synchronous
        standby (``synchronous_standby_names``, ``synchronous_commit`` beyond ``local``) and none is connected as
        one (``pg_stat_replication``). A server with no synchronous standby configured confirms by itself."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute("SELECT current_setting('synchronous_standby_names') AS names, "
                         "current_setting('synchronous_commit') AS mode, "
                         "(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')) AS sync")
            row = curs.fetchone()
        if not row["names"].strip() or row["mode"] in ("off", "local") or row["sync"]:
            return None
        return (f"no synchronous standby is connected (synchronous_standby_names = {row['names']!r}): every commit "
                f"waits for one, and is answered replication_unconfirmed after {commit_timeout():g} s")

    def read_back(self, keys: Sequence[tuple[UUID, int]]) -> dict[tuple[UUID, int], tuple[str, bytes]]:
        """The rows at the ``(originator_id, originator_version)`` keys, read under a SHARE lock on the
        table: key -> (topic, state). One attempt; a connection error or lock timeout propagates."""
        with self.datastore.get_connection() as conn, conn.transaction(force_rollback=True), \
                conn.cursor() as curs:
            for statement in self.read_back_statements:
                curs.execute(statement)
            curs.execute(self.read_back_statement, ([k[0] for k in keys], [k[1] for k in keys]))
            return {(r["originator_id"], r["originator_version"]): (r["topic"], bytes(r["state"]))
                    for r in curs.fetchall()}

    # The two reads below are the library's (same rows, same order, same types), with the columns they return
    # named (not ``SELECT *``: the chain hash is not read) and their results in the binary format (``binary_rows``).

    @bounded_retry(READ_RETRY_SECONDS)
    def select_events(self, originator_id: UUID | str, *, gt: int | None = None, lte: int | None = None,
                      desc: bool = False, limit: int | None = None) -> Sequence[StoredEvent]:
        sql, params = self.select_events_sql, [originator_id]
        for bound, clause in ((gt, " AND originator_version > %s"), (lte, " AND originator_version <= %s")):
            if bound is not None:
                sql += clause
                params.append(bound)
        sql += " ORDER BY originator_version DESC" if desc else " ORDER BY originator_version ASC"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return [StoredEvent(originator_id=oid, originator_version=version, topic=topic, state=state)
                for _, oid, version, topic, state in binary_rows(self.datastore, sql, params, prepare=True)]

    @bounded_retry(READ_RETRY_SECONDS)
    def select_notifications(self, start: int | None, limit: int, stop: int | None = None,
                             topics: Sequence[str] = (), *, inclusive_of_start: bool = True) -> Sequence[Notification]:
        where, params = [], []
        if start is not None:
            where.append("notification_id >= %s" if inclusive_of_start else "notification_id > %s")
            params.append(start)
        if stop is not None:
            where.append("notification_id <= %s")
            params.append(stop)
        if topics:
            where.append("topic = ANY(%s)")
            params.append(list(topics))
        sql = self.select_notifications_sql + (" WHERE " + " AND ".join(where) if where else "")
        return [Notification(id=nid, originator_id=oid, originator_version=version, topic=topic, state=state)
                for nid, oid, version, topic, state in binary_rows(
                    self.datastore, sql + " ORDER BY notification_id LIMIT %s", [*params, limit], prepare=True)]

    @bounded_retry(READ_RETRY_SECONDS)
    def max_notification_id(self) -> int | None:
        return _unretried(PostgresApplicationRecorder.max_notification_id)(self)


class PostgresLedgerProcessRecorder(PostgresLedgerRecorder, PostgresProcessRecorder):
    """The library's process recorder (new events and the tracking record of what they answer, in one
    transaction: its ``_insert_events`` writes the tracking row) keeping the chain, the expected versions and
    the one-attempt insert."""

    def create_table(self) -> None:
        # the library's statements make both tables (IF NOT EXISTS: this is no command's path); the ledger's
        # then add the chain column to an events table made before it
        PostgresProcessRecorder.create_table(self)
        super().create_table()
