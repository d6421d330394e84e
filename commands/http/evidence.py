"""Proofs of the log over HTTP (issue 27, point 4): ``GET /v1/proofs/inclusion`` and ``/v1/proofs/consistency``,
checked by a client against a checkpoint it holds (docs/evidence.md). Scoped like every read: an inclusion proof
carries the event as stored, so only a token that may read the event's stream gets one; a consistency proof
carries hashes and sizes only (the log's size is every token's to see: ``GET /v1/events`` gives its head)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import get
from litestar.datastructures import State
from litestar.params import Parameter, QueryParameter

from commands.access import Principal
from commands.http.routes import ERRORS, principal_dependency, service
from ledger.errors import LedgerError

SIZE = Parameter(ge=1, le=2**62, description="a tree size (events of the log, from the first)")


@get("/v1/proofs/inclusion", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="An inclusion proof of one event in the log's first `size` events (RFC 9162)")
def get_inclusion(principal: Principal, state: State, stream: UUID, version: int = Parameter(ge=0, le=2**62),
                  size: int = SIZE) -> dict[str, Any]:
    from commands.evidence import inclusion_at

    svc = service(state)
    resource = svc.scopes.of(stream)
    if resource is None:
        raise LedgerError("stream_not_found", f"no events recorded for {stream}")
    svc.scopes.check_read(principal, resource)
    return inclusion_at(svc.app, stream, version, size)


@get("/v1/proofs/consistency", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="A consistency proof: the log's first `to` events extend its first `from` unchanged (RFC 9162)")
def get_consistency(principal: Principal, state: State, from_size: int = QueryParameter(name="from", ge=1, le=2**62),
                    to_size: int = QueryParameter(name="to", ge=1, le=2**62)) -> dict[str, Any]:
    from commands.evidence import consistency_at

    return consistency_at(service(state).app, from_size, to_size)


ROUTES = [get_inclusion, get_consistency]
