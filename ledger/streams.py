"""Where each aggregate kind finds its stream, so aggregates of different kinds cannot take each other's ids.

Chats and conversations live at ids their callers mint (first come, first served). The other kinds live
at a *natural* id that someone else can choose too: an organization's catalog at the organization id, the
deployment at ``DEPLOYMENT_ID``, the published checkpoints at ``CHECKPOINTS_ID``, a target's data protection at ``protection_id(target)``, a model config's claim at the model config id, a tool-call execution at
its deterministic uuid5. A chat created at one of those ids before the stream exists would block that
organization (or the deployment, the config, the execution) forever.

``locate(app, kind, natural_id, load)`` is the one way those kinds find their stream: the natural id when
the stream there is empty or of that kind (every ledger written before this rule, and every stream no one
squatted), else ``uuid5(<the kind's namespace>, <that id>)``, again as often as that is taken by another
kind too. A squatter then blocks nothing. Streams never change kind and are never removed, so once a
stream of the kind exists the answer never changes; when it took a hop the answer is remembered per
application (per process), and checked again on each use (one read, which the caller needs anyway).

``RESERVED_IDS`` (the nil UUID and the deployment's id) are refused wherever a caller chooses an id.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable
from uuid import UUID, uuid5

from ledger.catalog.aggregate import Deployment, ModelConfigClaim, OrganizationCatalog
from ledger.catalog.state import DEPLOYMENT_ID
from ledger.errors import LedgerError
from ledger.evidence.published import CHECKPOINTS_ID, CheckpointLog
from ledger.protection.decide import Protection
from ledger.toolcalls.aggregate import ToolCallExecution

#: ids no caller may give to a chat, a conversation, an organization or a model config
RESERVED_IDS = frozenset({UUID(int=0), DEPLOYMENT_ID, CHECKPOINTS_ID})

#: aggregate topic -> the namespace of the ids its streams move to when their natural id is taken
NAMESPACES: dict[str, UUID] = {
    OrganizationCatalog.TOPIC: UUID("6f1d2a4e-8c3b-5e7f-9a10-2b4c6d8e0f11"),
    Deployment.TOPIC: UUID("6f1d2a4e-8c3b-5e7f-9a10-2b4c6d8e0f12"),
    ModelConfigClaim.TOPIC: UUID("6f1d2a4e-8c3b-5e7f-9a10-2b4c6d8e0f13"),
    ToolCallExecution.TOPIC: UUID("6f1d2a4e-8c3b-5e7f-9a10-2b4c6d8e0f14"),
    CheckpointLog.TOPIC: UUID("6f1d2a4e-8c3b-5e7f-9a10-2b4c6d8e0f15"),
    Protection.TOPIC: UUID("6f1d2a4e-8c3b-5e7f-9a10-2b4c6d8e0f16"),
}

#: hops tried before giving up (each one needs another stream of another kind squatting the next id)
MAX_HOPS = 64

_moved: weakref.WeakKeyDictionary[Any, dict[tuple[str, UUID], UUID]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def derived_id(kind: type, stream_id: UUID) -> UUID:
    """The id a stream of ``kind`` moves to when ``stream_id`` holds a stream of another kind."""
    return uuid5(NAMESPACES[kind.TOPIC], str(stream_id))


def locate(app: Any, kind: type, natural_id: UUID, load: Callable[[UUID], Any]) -> tuple[UUID, Any]:
    """The stream id of ``kind`` for ``natural_id`` and the aggregate there (None while it is empty).

    ``load(id)`` returns the aggregate at ``id`` or None (the caller's own read: ``UnitOfWork.read``,
    ``get_cached``, ``get`` or ``app.load``), so the common case costs no extra read."""
    key = (kind.TOPIC, natural_id)
    moved = _moved.get(app)
    known = moved.get(key) if moved is not None else None
    if known is not None:
        agg = load(known)
        if agg is None or _is_stream_of(agg, kind, natural_id):
            return known, agg
    candidate = natural_id
    for hop in range(MAX_HOPS):
        agg = load(candidate)
        if agg is None or _is_stream_of(agg, kind, natural_id):
            if hop:
                with _lock:
                    _moved.setdefault(app, {})[key] = candidate
            return candidate, agg
        candidate = derived_id(kind, candidate)
    raise LedgerError("stream_id_exhausted", f"no free stream id for {kind.__name__} {natural_id} after "
                                             f"{MAX_HOPS} ids taken by streams of other kinds")


def _is_stream_of(agg: Any, kind: type, natural_id: UUID) -> bool:
    """Whether ``agg`` is ``natural_id``'s stream of ``kind``. A catalog or a claim may sit at an id that is
    also a caller's natural id (a caller can choose an organization or model config id equal to another's
    derived id): it must be the one of this natural id. Executions and the deployment need no such check:
    their natural ids and derived ids are uuid5s of different namespaces."""
    if not isinstance(agg, kind):
        return False
    if kind is OrganizationCatalog:
        return agg.state.organization_id == natural_id
    if kind is ModelConfigClaim:
        return agg.state.model_config_id == natural_id
    return True


def refuse_reserved(field: str, value: UUID | None) -> None:
    """``invalid_command`` when a caller-chosen id is one of ``RESERVED_IDS``."""
    if value in RESERVED_IDS:
        raise LedgerError("invalid_command", f"{field} {value} is reserved and cannot be used")
