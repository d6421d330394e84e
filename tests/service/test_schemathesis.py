"""schemathesis against the served /openapi.json: generated requests to every operation (the live stream
aside: it never ends) get no 5xx, and every response matches its documented schema and content type.
Bounded (a few examples per operation) so the suite stays fast."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.service.conftest import ROLES, seed
from tests.service.server import Server, tokens


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'ledger.db'}"
    seed(url)
    secret = tokens(url, admin=ROLES["admin"])["admin"]
    with Server(url) as server:
        yield server, secret


def test_no_server_error_and_responses_match_the_schema(served):
    server, secret = served
    schema = schemathesis.openapi.from_url(f"{server.base}/openapi.json").exclude(path="/v1/events/stream")
    headers = {"Authorization": f"Bearer {secret}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 13
    for operation in operations:

        @given(operation.as_strategy())
        @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            case.call_and_validate(base_url=server.base, headers=headers,
                                   checks=[not_a_server_error, response_schema_conformance, content_type_conformance])

        check()
