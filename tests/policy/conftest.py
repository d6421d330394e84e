"""Policy tests that go through the handler run in an organization set up the way chats need."""

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
