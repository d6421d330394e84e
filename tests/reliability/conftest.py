"""Fixtures of the reliability suite: a second PostgreSQL schema for fault-free runs, a lossy proxy, a partition."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from ledger.store import DatabaseURL
from tests.conftest import PG_URL, _with_schema, drop_schema, require_pg
from tests.reliability.partition import Partition, partition_for
from tests.reliability.pgproxy import PgProxy


@pytest.fixture
def clean_pg_url() -> Iterator[str]:
    """Another fresh schema (dropped after the test): where the fault-free run of the same commands goes."""
    require_pg()
    url = _with_schema(PG_URL, f"t_{uuid.uuid4().hex[:12]}")
    yield url
    drop_schema(url)


@pytest.fixture
def pg_proxy() -> Iterator[PgProxy]:
    """A ``PgProxy`` in front of the test server (``PgProxy.through`` points a schema's URL at it)."""
    require_pg()
    db = DatabaseURL.parse(PG_URL)
    with PgProxy((db.host, db.port)) as proxy:
        yield proxy


@pytest.fixture
def partition() -> Iterator[Partition]:
    """A network partition that can be made between the test server and its clients (skipped, saying why,
    where it cannot)."""
    require_pg()
    with partition_for(PG_URL) as made:
        yield made
