"""The security suite runs against the service's world (``tests/service/conftest.py``): a real ``serve``
process over SQLite and PostgreSQL, two organizations, chats, a token per role."""

from tests.service.conftest import world  # noqa: F401 - the fixture, shared
