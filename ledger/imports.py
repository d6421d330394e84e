"""What an import records about itself when nothing proves the file it read (pure events and state).

``events import --unverified`` reads a version 1 export, whose lines carry no hash: an edited line cannot be
told from a true one. The streams it creates get hash chains like any (from the import on), so, to keep the
record honest, the same transaction records ``ImportedWithoutProof`` on a stream of its own, naming every
stream the file created. It is an event of the log like any other — the log's digest covers it — and ``events
verify`` reports those streams as imported without proof, never as linked."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import msgspec

from ledger.base import DeciderAggregate, LedgerCreated

IMPORT_TOPIC = "chat-ledger:imports.ImportRecord"


class ImportedWithoutProof(LedgerCreated):
    TOPIC = "chat-ledger:imports.ImportedWithoutProof"
    streams: list[UUID]
    events: int
    export_version: int
    at: datetime


#: people's data in these events (issue 28: ``ledger.privacy``): none — stream ids and counts
PERSONAL: dict[type, dict[str, str]] = {}
NOT_PERSONAL: dict[type, dict[str, str]] = {}


class ImportState(msgspec.Struct, kw_only=True):
    streams: list[UUID]
    events: int
    export_version: int
    at: datetime
    version: int = 0


def evolve(state: ImportState | None, event: Any) -> ImportState:
    if isinstance(event, ImportedWithoutProof):
        return ImportState(streams=list(event.streams), events=event.events, export_version=event.export_version,
                           at=event.at, version=event.originator_version)
    raise TypeError(f"not an import event: {type(event).__name__}")  # pragma: no cover - one event per stream


class ImportRecord(DeciderAggregate):
    """One stream per unverified import."""

    TOPIC: ClassVar[str] = IMPORT_TOPIC
    state: ImportState
    evolve = staticmethod(evolve)
