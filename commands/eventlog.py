"""The stored events as a whole: reading the log, and stats (``chat-ledger events ...``).

* ``logged_event`` / ``iter_notifications``: the log as the API shows it, page by page.
* ``stats`` counts stored events per topic and stored class version.

``verify`` is in ``commands.eventlog_verify``; ``export`` and ``import`` in ``commands.eventlog_transfer``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterator
from uuid import UUID

import msgspec

from ledger.audit.timeline import iso
from ledger.base import TOPICS

PAGE = 1000


def _uuid(v: Any) -> UUID:
    return v if isinstance(v, UUID) else UUID(str(v))


def raw_payload(app: Any, state: bytes) -> bytes:
    """The payload bytes as the codec sees them (after the cipher and compressor, if configured)."""
    mapper = app.mapper
    if mapper.cipher:
        state = mapper.cipher.decrypt(state)
    if mapper.compressor:
        state = mapper.compressor.decompress(state)
    return state


def logged_event(app: Any, n: Any, event: Any = None) -> dict[str, Any]:
    """One notification as the API shows it: ids, topic, type, time and the payload's fields as JSON values.
    ``event``: the domain event it stores, when at hand (the one a save recorded), else decoded from it."""
    if event is None:
        event = app.mapper.to_domain_event(n)
    data = msgspec.to_builtins({k: v for k, v in vars(event).items()
                                if k not in ("originator_id", "originator_version", "timestamp")})
    return {"notification_id": n.id, "stream_id": str(_uuid(n.originator_id)), "version": n.originator_version,
            "topic": n.topic, "type": type(event).__name__, "timestamp": iso(event.timestamp), "data": data}


def iter_notifications(app: Any, start: int = 0, stop: int | None = None) -> Iterator[Any]:
    while True:
        notes = app.notifications(start, PAGE, stop=stop)
        if not notes:
            return
        yield from notes
        start = notes[-1].id
        if stop is not None and start >= stop:
            return


# -- stats --------------------------------------------------------------------------------------------------

class _Version(msgspec.Struct):
    class_version: int = 1


_json_version = msgspec.json.Decoder(_Version)
_msgpack_version = msgspec.msgpack.Decoder(_Version)


def stored_class_version(data: bytes) -> int | None:
    try:
        return (_json_version if data[:1] == b"{" else _msgpack_version).decode(data).class_version
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def stats(app: Any) -> list[dict[str, Any]]:
    counts: Counter[tuple[str, int | None]] = Counter()
    for n in iter_notifications(app):
        counts[(n.topic, stored_class_version(raw_payload(app, n.state)))] += 1
    rows = []
    for (topic, version), count in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        cls = TOPICS.get(topic)
        rows.append({"topic": topic, "class_version": version, "count": count,
                     "code_class_version": getattr(cls, "class_version", None) if cls else None,
                     "known": cls is not None})
    return rows
