"""Every failure an entry point can meet, as one ``LedgerError``: a stable code and a one-line message.

An entry point (the CLI's ``main`` group; a service's request handler) calls ``as_ledger_error`` on what
escaped a command and prints or returns ``code: message`` — never a traceback. The map, by class:

* ``LedgerError``: itself (its message made one line).
* the codec's ``CodecError`` (and the library's ``MapperDeserialisationError``): ``undecodable_event`` — a
  stored event the current code cannot read (the message names the stream and version).
* ``ProjectionError``: ``projection_error``.
* deadlocks and serialization failures (SQLSTATE class 40, transaction rollback): ``conflict`` — the
  transaction was rolled back, so nothing of it was kept.
* lost or refused connections, timeouts, locks (``psycopg.OperationalError``/``InterfaceError``, the pool's
  timeouts, ``sqlite3.OperationalError``, a file that is not a database, the library's ``InterfaceError``/
  ``OperationalError``): ``database_unavailable`` naming the database. A locked SQLite file says how long
  it waited and which setting sets that (``CHAT_LEDGER_SQLITE_TIMEOUT``).
* any other database error (a statement the database refused): ``database_error``.
* anything else: ``internal_error`` with the exception's one-line summary and how to see the traceback.

``DEBUG_ENV`` (``CHAT_LEDGER_DEBUG=1``) asks the entry point for the traceback as well.
"""

from __future__ import annotations

import os
import re
import sqlite3

from ledger.errors import LedgerError

DEBUG_ENV = "CHAT_LEDGER_DEBUG"


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "no", "false", "off")


def one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text.strip())


def _summary(e: BaseException) -> str:
    return one_line(str(e)) or type(e).__name__


def as_ledger_error(e: BaseException, where: str = "the database") -> LedgerError:
    """The code and one-line message for ``e``; ``where`` names the database (never its password)."""
    from eventsourcing.persistence import (
        InterfaceError, MapperDeserialisationError, OperationalError, PersistenceError,
    )
    from projections.engine import ProjectionError

    if isinstance(e, LedgerError):
        return LedgerError(e.code, one_line(e.message))
    if isinstance(e, MapperDeserialisationError):
        return LedgerError("undecodable_event", f"a stored event cannot be read with this code: {_summary(e)} "
                                                "(`chat-ledger events verify` lists every such event)")
    if isinstance(e, ProjectionError):
        return LedgerError("projection_error", _summary(e))
    pg = _psycopg_error(e, where)
    if pg is not None:
        return pg
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        from ledger.store import sqlite_timeout

        return LedgerError("database_unavailable",
                           f"{where} is locked by another process: gave up after {sqlite_timeout()} s "
                           "(CHAT_LEDGER_SQLITE_TIMEOUT sets the wait)")
    if isinstance(e, (sqlite3.OperationalError, sqlite3.InterfaceError)) or type(e) is sqlite3.DatabaseError:
        return LedgerError("database_unavailable", f"{where}: {_summary(e)}")
    if isinstance(e, (InterfaceError, OperationalError)):
        cause = e.__cause__
        if cause is not None and cause is not e:
            mapped = as_ledger_error(cause, where)
            if mapped.code in ("database_unavailable", "conflict"):
                return mapped
        return LedgerError("database_unavailable", f"{where}: {_summary(e)}")
    if isinstance(e, (PersistenceError, sqlite3.Error)):
        return LedgerError("database_error", f"{where} refused a statement: {type(e).__name__}: {_summary(e)}")
    return LedgerError("internal_error", f"{type(e).__name__}: {_summary(e)} (a bug: rerun with "
                                         f"{DEBUG_ENV}=1 for the traceback)")


def _psycopg_error(e: BaseException, where: str) -> LedgerError | None:
    try:
        import psycopg
        import psycopg_pool
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return None
    if isinstance(e, psycopg.Error) and (e.sqlstate or "").startswith("40"):  # class 40: transaction rollback
        return LedgerError("conflict", f"concurrent writers: {_summary(e)} (the transaction was rolled back: "
                                       "nothing of it was kept; run the command again)")
    if isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)):
        return LedgerError("database_unavailable", f"{where}: {_summary(e)}")
    if isinstance(e, psycopg.Error):
        return LedgerError("database_error", f"{where} refused a statement: {type(e).__name__}: {_summary(e)}")
    return None
