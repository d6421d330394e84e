"""Evidence over HTTP (issue 27): proofs of the log (``GET /v1/proofs/inclusion`` and ``/v1/proofs/consistency``),
checked by a client against a checkpoint it holds (docs/evidence.md), and the checkpoints the service published
(``GET /v1/checkpoints/latest``, ``/v1/checkpoints/{size}``) with witnesses' cosignatures (``POST``): every token's
to read, as the log's size is. Scoped like every read: an inclusion proof
carries the event as stored, so only a token that may read the event's stream gets one; a consistency proof
carries hashes and sizes only (the log's size is every token's to see: ``GET /v1/events`` gives its head)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec
from litestar import get, post
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


@get("/v1/checkpoints/latest", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="The latest checkpoint the service published, with its witnesses' cosignatures")
def get_latest_checkpoint(principal: Principal, state: State) -> dict[str, Any]:
    from commands.evidence import latest_checkpoint

    return latest_checkpoint(service(state).app)


@get("/v1/checkpoints/{size:int}", sync_to_thread=True, dependencies=principal_dependency, responses=ERRORS,
     summary="The published checkpoint of `size` events, with its witnesses' cosignatures")
def get_checkpoint(principal: Principal, state: State, size: int = Parameter(ge=0, le=2**62)) -> dict[str, Any]:
    from commands.evidence import checkpoint_of_size

    return checkpoint_of_size(service(state).app, size)


class Cosignature(msgspec.Struct, forbid_unknown_fields=True):
    """A witness's cosignature of a checkpoint (docs/evidence.md, "Witnesses")."""

    witness_key_id: str
    time: str
    signature: str


class Cosigned(msgspec.Struct):
    recorded: bool  # False: this witness had cosigned the checkpoint already (nothing recorded)


@post("/v1/checkpoints/{size:int}/cosignatures", sync_to_thread=True, dependencies=principal_dependency,
      responses=ERRORS, status_code=200,
      summary="Record a witness's cosignature of the latest checkpoint (checked against serve --witness-key)")
def post_cosignature(principal: Principal, state: State, data: Cosignature,
                     size: int = Parameter(ge=0, le=2**62)) -> Cosigned:
    """Any token may hand one in: what makes it count is the witness's signature, checked against the keys the
    service was started with; the checkpoint's log then records it."""
    from commands.evidence import record_cosignature

    svc = service(state)
    return Cosigned(record_cosignature(svc.app, size, msgspec.structs.asdict(data), list(svc.checkpoints.witness_keys)))


ROUTES = [get_inclusion, get_consistency, get_latest_checkpoint, get_checkpoint, post_cosignature]
