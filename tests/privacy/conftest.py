"""Fixtures of the privacy tests."""

from __future__ import annotations

import pytest

from ledger.subjectkeys import MASTER_ENV, new_master_key


@pytest.fixture
def master(monkeypatch) -> str:
    """A master key in the environment: every ledger the test opens (and every process it starts) seals."""
    key = new_master_key()
    monkeypatch.setenv(MASTER_ENV, key)
    return key
