"""Direct access to the stored-events table, for tests that inspect or corrupt what the store wrote.

SQLite keeps every event in ``stored_events`` (originator ids as 32-digit hex); PostgreSQL in
``<schema>.chatledger_events`` (originator ids as ``uuid``). Both have ``originator_version``, ``topic``
and ``state`` (the payload bytes).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Callable
from uuid import UUID

import msgspec
import psycopg
from psycopg import sql

from ledger.store import DatabaseURL


class RawDB:
    def __init__(self, url: str) -> None:
        self.db = DatabaseURL.parse(url)
        self.backend = self.db.backend

    # -- plumbing -------------------------------------------------------------------------------------
    def _sqlite(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db.path)

    def _pg(self) -> psycopg.Connection:
        return psycopg.connect(self.db.psycopg_conninfo(), autocommit=True)

    @property
    def _table(self) -> sql.Composable:
        return sql.Identifier(self.db.schema, "chatledger_events")

    def _query(self, sqlite_query: str, sqlite_params: tuple[Any, ...], pg_query: str,
               pg_params: tuple[Any, ...]) -> list[tuple]:
        if self.backend == "sqlite":
            con = self._sqlite()
            try:
                return con.execute(sqlite_query, sqlite_params).fetchall()
            finally:
                con.close()
        with self._pg() as conn:
            return conn.execute(sql.SQL(pg_query).format(table=self._table), pg_params).fetchall()

    # -- reading --------------------------------------------------------------------------------------
    def rows(self, stream: UUID) -> list[tuple[int, str, bytes]]:
        """(version, topic, state bytes) of every stored event of ``stream``, in version order."""
        rows = self._query(
            "SELECT originator_version, topic, state FROM stored_events "
            "WHERE originator_id IN (?, ?) ORDER BY originator_version", (stream.hex, str(stream)),
            "SELECT originator_version, topic, state FROM {table} "
            "WHERE originator_id = %s ORDER BY originator_version", (stream,))
        return [(int(v), t, bytes(s)) for v, t, s in rows]

    def count(self) -> int:
        return self._query("SELECT count(*) FROM stored_events", (), "SELECT count(*) FROM {table}", ())[0][0]

    def json_field_in_db(self, stream: UUID, version: int, field: str) -> Any:
        """Parse the stored payload as JSON *inside the database* and return one top-level field.

        PostgreSQL: ``convert_from(state, 'UTF8')::json`` (what an auditor types in psql);
        SQLite: ``json_extract(CAST(state AS TEXT), '$.field')``.
        """
        return self._query(
            f"SELECT json_extract(CAST(state AS TEXT), '$.{field}') FROM stored_events "
            "WHERE originator_id IN (?, ?) AND originator_version = ?", (stream.hex, str(stream), version),
            "SELECT convert_from(state, 'UTF8')::json ->> %s FROM {table} "
            "WHERE originator_id = %s AND originator_version = %s", (field, stream, version),
        )[0][0]

    # -- corrupting -----------------------------------------------------------------------------------
    def set_state(self, stream: UUID, version: int, data: bytes) -> None:
        n = self._update("state", stream, version, data)
        assert n == 1, f"no stored event {stream} v{version}"

    def set_topic(self, stream: UUID, version: int, topic: str) -> None:
        n = self._update("topic", stream, version, topic)
        assert n == 1, f"no stored event {stream} v{version}"

    def _update(self, column: str, stream: UUID, version: int, value: Any) -> int:
        if self.backend == "sqlite":
            con = self._sqlite()
            try:
                cur = con.execute(
                    f"UPDATE stored_events SET {column} = ? WHERE originator_id IN (?, ?) AND originator_version = ?",
                    (value, stream.hex, str(stream), version))
                con.commit()
                return cur.rowcount
            finally:
                con.close()
        with self._pg() as conn:
            cur = conn.execute(
                sql.SQL("UPDATE {table} SET {col} = %s WHERE originator_id = %s AND originator_version = %s").format(
                    table=self._table, col=sql.Identifier(column)),
                (value, stream, version))
            return cur.rowcount

    def rewrite(self, stream: UUID, version: int, change: Callable[[dict[str, Any]], None]) -> None:
        """Decode the stored payload schemaless (in whatever format it was written), let ``change``
        mutate the dict, and store it back in the same format."""
        (data,) = [s for v, _, s in self.rows(stream) if v == version]
        if data[:1] == b"{":
            payload = msgspec.json.decode(data)
            change(payload)
            self.set_state(stream, version, msgspec.json.encode(payload))
        else:
            payload = msgspec.msgpack.decode(data)
            change(payload)
            self.set_state(stream, version, msgspec.msgpack.encode(payload))

    # -- raw SQL (the tamper tests) ------------------------------------------------------------------------
    def execute(self, statement: str, *params: Any) -> int:
        """Run one statement on the events table, written with ``{t}`` for the table and ``?`` for parameters
        (a UUID parameter is given as the stream's hex on SQLite); the rows it changed."""
        if self.backend == "sqlite":
            con = self._sqlite()
            try:
                cur = con.execute(statement.format(t="stored_events"),
                                  [p.hex if isinstance(p, UUID) else p for p in params])
                con.commit()
                return cur.rowcount
            finally:
                con.close()
        with self._pg() as conn:
            table = self._table.as_string(conn)
            return conn.execute(statement.format(t=table).replace("?", "%s"), params).rowcount  # type: ignore[arg-type]

    def hashes(self, stream: UUID) -> list[bytes | None]:
        """Each stored event's chain hash, in version order."""
        rows = self._query("SELECT chain_hash FROM stored_events WHERE originator_id = ? ORDER BY originator_version",
                           (stream.hex,),
                           "SELECT chain_hash FROM {table} WHERE originator_id = %s ORDER BY originator_version",
                           (stream,))
        return [bytes(h) if h is not None else None for (h,) in rows]

    def delete(self, stream: UUID, version: int) -> None:
        assert self.execute("DELETE FROM {t} WHERE originator_id = ? AND originator_version = ?", stream, version) == 1

    def insert_copy(self, stream: UUID, at: int, of: int) -> None:
        """Insert, at version ``at``, a copy of version ``of`` (topic, payload and hash), moving the versions
        from ``at`` on one up (an event slipped into the middle of a stream)."""
        big = 1 << 40
        self.execute("UPDATE {t} SET originator_version = originator_version + ? WHERE originator_id = ? "
                     "AND originator_version >= ?", big, stream, at)
        self.execute("UPDATE {t} SET originator_version = originator_version - ? + 1 WHERE originator_id = ? "
                     "AND originator_version >= ?", big, stream, big)
        assert self.execute("INSERT INTO {t} (originator_id, originator_version, topic, state, chain_hash) "
                            "SELECT originator_id, ?, topic, state, chain_hash FROM {t} WHERE originator_id = ? "
                            "AND originator_version = ?", at, stream, of) == 1

    def swap(self, stream: UUID, v1: int, v2: int) -> None:
        """Two events of a stream trade places (each keeps its topic, payload and hash)."""
        big = 1 << 40
        self.execute("UPDATE {t} SET originator_version = ? WHERE originator_id = ? AND originator_version = ?",
                     big, stream, v1)
        self.execute("UPDATE {t} SET originator_version = ? WHERE originator_id = ? AND originator_version = ?",
                     v1, stream, v2)
        self.execute("UPDATE {t} SET originator_version = ? WHERE originator_id = ? AND originator_version = ?",
                     v2, stream, big)

    def drop_chain_column(self) -> None:
        """The events table as a ledger made before hash chains has it."""
        self.execute("ALTER TABLE {t} DROP COLUMN chain_hash")
