"""Issue 23, point 8: schemathesis in stateful mode over the whole API, with valid and invalid data, following
the links the OpenAPI document declares (a created chat's id to its reads, a listing's first chat and next
page, the event log's next page, a chat's organization to its models): no request, whatever came before it,
gets a 5xx, and every answer matches its documented schema. Run as a member and as an admin of the served
world, so the links cross what each may and may not read."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.service.conftest import ROLES, seed
from tests.service.server import Server, tokens


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('stateful') / 'ledger.db'}"
    seed(url)
    secrets = tokens(url, admin=ROLES["admin"], alice=ROLES["alice"])
    # the fuzzer sends hundreds of commands a second: the write limit is not what this test is about
    with Server(url, "--write-rate", "0") as server:
        yield server, secrets


def test_the_document_declares_links_between_operations(served):
    server, _ = served
    schema = schemathesis.openapi.from_url(f"{server.base}/openapi.json")
    doc = schema.raw_schema
    links = {(path, name) for path, ops in doc["paths"].items() for op in ops.values() if isinstance(op, dict)
             for name in op.get("responses", {}).get("200", {}).get("links", {})}
    assert ("/v1/commands", "CreatedChat") in links and ("/v1/chats", "NextPage") in links
    ids = {op["operationId"] for ops in doc["paths"].values() for op in ops.values() if isinstance(op, dict)}
    for ops in doc["paths"].values():
        for op in ops.values():
            for link in (op.get("responses", {}).get("200", {}).get("links", {}) if isinstance(op, dict) else {}).values():
                assert link["operationId"] in ids  # every link resolves


#: the entry points of a run: reads start from the listings; writes from ``POST /v1/commands`` (schemathesis
#: starts only from the listings when there are any, so the writers' run leaves them out)
ROOTS = {"reads": (), "writes": ("/v1/chats", "/v1/search", "/v1/events")}


@pytest.mark.parametrize("who", ["alice", "admin"])
@pytest.mark.parametrize("start", ["reads", "writes"])
def test_stateful_runs_over_the_links_get_no_server_error(served, who, start):
    server, secrets = served
    schema = schemathesis.openapi.from_url(f"{server.base}/openapi.json").exclude(path="/v1/events/stream")
    for path in ROOTS[start]:
        schema = schema.exclude(path=path)
    schema.config.update(base_url=server.base, headers={"Authorization": f"Bearer {secrets[who]}"})
    schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
    machine = schema.as_state_machine()
    steps: list[str] = []

    class Workflow(machine):  # type: ignore[misc, valid-type]
        def validate_response(self, response, case, additional_checks=None, **kwargs):
            steps.append(f"{case.method} {case.path}")
            checks = [not_a_server_error]
            if 200 <= response.status_code < 300 or response.status_code >= 500:
                checks += [response_schema_conformance, content_type_conformance]
            case.validate_response(response, checks=checks, transport_kwargs=kwargs or None)

    Workflow.run(settings=settings(max_examples=40, stateful_step_count=8, deadline=None, database=None,
                                   suppress_health_check=list(HealthCheck)))
    assert len(steps) > 25 and len(set(steps)) >= 3, steps  # it went somewhere: several operations, chained
    if start == "writes":  # a command's answer led to the chat it made
        assert {"POST /v1/commands", "GET /v1/chats/{chat_id}"} <= set(steps), sorted(set(steps))
