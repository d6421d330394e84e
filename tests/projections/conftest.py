"""Projection fixtures. ``db_url``, ``app``, ``pg_url`` and ``sqlite_url`` come from ``tests/conftest.py``
(SQLite and a real PostgreSQL with its own schema per test; Postgres skipped when unreachable, failing
under CI); this adds the projection backend over the same database."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from projections import open_backend


@pytest.fixture
def backend(db_url: str, app: Any) -> Iterator[Any]:
    b = open_backend(db_url)
    yield b
    b.close()
