"""The library's PostgreSQL factory, connecting with the ledger URL's whole libpq connection string.

eventsourcing's ``PostgresDatastore`` hands its connection pool five keyword arguments (host, port, user,
password, dbname), so ``sslmode``, a socket directory in ``host``, ``application_name`` and every other
libpq parameter of the URL would be dropped, and an empty host would override ``PGHOST``. This factory
(named by ``PERSISTENCE_MODULE``, the library's own setting) builds the library's datastore as usual, then
gives its pool — not yet opened — the connection string ``POSTGRES_CONNINFO`` instead; its recorders are the
ledger's (``ledger.recorders``). Imported only when
a PostgreSQL ledger is opened.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.postgres import PostgresFactory

from ledger.recorders import LogKeepingFactory
from ledger.recorders.postgres import PostgresLedgerProcessRecorder, PostgresLedgerRecorder

#: The environment key holding the libpq connection string (``ledger.store.DatabaseURL.env``).
POSTGRES_CONNINFO = "POSTGRES_CONNINFO"
#: The pool keyword arguments the library sets from its POSTGRES_* settings; the conninfo replaces them.
_REPLACED = ("dbname", "host", "port", "user", "password")


class LibpqPostgresFactory(LogKeepingFactory, PostgresFactory):
    """Also hands out the ledger's recorders, which keep the hash chain (``LogKeepingFactory``)."""

    application_recorder_class = PostgresLedgerRecorder
    process_recorder_class = PostgresLedgerProcessRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        conninfo = self.env.get(POSTGRES_CONNINFO)
        if conninfo is not None:
            pool = self.datastore.pool
            pool.conninfo = conninfo
            pool.kwargs = {k: v for k, v in (pool.kwargs or {}).items() if k not in _REPLACED}
