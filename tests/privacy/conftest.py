"""Fixtures of the privacy tests."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from ledger.subjectkeys import MASTER_ENV, new_master_key


@pytest.fixture
def master(monkeypatch) -> str:
    """A master key in the environment: every ledger the test opens (and every process it starts) seals."""
    key = new_master_key()
    monkeypatch.setenv(MASTER_ENV, key)
    return key


@pytest.fixture
def sealed(master, db_url) -> Iterator[tuple[Any, Any]]:  # noqa: ARG001 (the master key: the ledger seals)
    """A sealing ledger on the test's backend and its views' backend."""
    from ledger.store import open_app
    from projections import open_backend

    app = open_app(db_url)
    backend = open_backend(db_url)
    yield app, backend
    backend.close()
    app.close()
