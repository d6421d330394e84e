"""Chat tests run in an organization whose members include the owners they use and whose default model
config is ``MODEL`` (create_chat requires both)."""

from __future__ import annotations

import pytest

from tests.chat.helpers import setup_org


@pytest.fixture
def memory_app(memory_app):
    setup_org(memory_app)
    return memory_app


@pytest.fixture
def app(app):
    setup_org(app)
    return app
