"""What both SQL backends share: bookkeeping tables, the exactly-once batch, reads, blue/green diffs.

Tables (in the SQLite file of the events, or in the events' Postgres schema):

* ``<projection>_v<version>_<table>``: the rows of one *build* of a projection. A build is one
  version number; ``definition_version`` records which ``Projection.version`` produced it (a blue/green
  rebuild of an unchanged definition gets the next number).
* ``projection_tracking``: per projection and version, the last notification id applied
  (``position``), the definition (table specs, so readers decode and drops find the tables without the
  code), its fingerprint, and the token of the writer that committed last (validates its row cache).
* ``projection_live``: per projection, the version readers use. Only a switch (one transaction) changes it.
* ``projection_switches``: the log of switches (from, to, when, at which position, diff digest and size,
  whether it was accepted with a diff).
* ``projection_leases``: who holds the lease of a build, or of a projection's rebuild (``projections.leases``).
* ``projection_failures``: per build, the event it could not apply (stream, version, notification, reason),
  until a batch of that build commits past it.

Exactly once: ``apply_batch`` moves rows and position together or not at all (``projections.batch``).

Dialects supply connections/transactions, type mapping and a few spellings; everything else is in the
layers ``SqlBackend`` is assembled from (below).
"""

from __future__ import annotations

from typing import Any

from projections.batch import Batches
from projections.compare import Comparing


class SqlBackend(Batches, Comparing):
    """Base of ``SqliteBackend`` and ``PostgresBackend``. Use them through ``projections.open_backend``.

    Its layers, each a module: ``sqlbase`` (dialect hooks, leases, SQL helpers) <- ``builds`` (bookkeeping:
    builds, failures, switches) <- ``reading`` (readers) <- ``compare`` (blue/green diffs), and ``builds`` <-
    ``batch`` (the exactly-once batch, stream-wise inserts)."""

    def __enter__(self) -> SqlBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def reopen(self) -> SqlBackend:  # pragma: no cover - dialect
        """A new backend on the same database, with connections of its own (for a worker process)."""
        raise NotImplementedError
