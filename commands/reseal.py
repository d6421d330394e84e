"""``chat-ledger events encrypt-existing --to URL`` (issue 28, point 6; docs/privacy.md, "Sealing an existing
ledger"): a ledger that stored people's data unsealed is copied, event by event in notification order, into a new
empty ledger opened with a master key, which seals each personal value as it records it; then every event of the
copy is read back and compared with the original field by field.

Sealing what is stored changes the stored bytes, so the copy is a **new log**: its hash chains and Merkle tree are
its own (the original's checkpoints, copied as events, describe the original). That is a rewrite of history, so it
is never done in place or silently: the original is left as it was, to be kept (or deleted) by its owner, and the
copy's verification names the first event that differs, if one does.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from commands.eventlog import _uuid
from ledger.chain import scan
from ledger.errors import LedgerError

CHUNK = 1000


def encrypt_existing(old: Any, new: Any, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Copy ``old``'s events into the empty ledger ``new`` (opened with a master key), sealed, in one transaction;
    then compare them. ``{events, keys, verified, first_difference}``."""
    from ledger.bulkload import StoreNotEmpty, insert_into_empty
    from ledger.subjectkeys import KeyRing

    sealer = getattr(new.mapper, "sealer", None)
    if sealer is None:
        raise LedgerError("master_key_required", "the new ledger seals people's data: give it a master key "
                                                 "(CHAT_LEDGER_MASTER_KEY or CHAT_LEDGER_MASTER_KEY_FILE)")
    if KeyRing.exists(old):
        raise LedgerError("invalid_setting", "this ledger already seals people's data (it has subject keys)")
    if new.head() != 0:
        raise LedgerError("database_not_empty", "the new ledger must be empty (it has events)")
    head = old.head()
    # whose each stream is, from its first event as it passes (the copy has no events to read it from): kept for
    # every stream of the log
    sealer._owners_max = max(sealer._owners_max, head)

    import tempfile

    from commands.eventlog_transfer import _spool, _spooled

    # two passes (as an import): every event sealed into a spool first — each subject's key made in a transaction
    # of its own — then the spool recorded in one transaction (the SQLite writer is held by it)
    with tempfile.TemporaryFile() as spool:
        for n in scan(old, head, by_notification=True):
            event = old.mapper.to_domain_event(n)
            if n.originator_version == 1:
                sealer.whose(event.originator_id, event)
            _spool(spool, new.mapper.to_stored_event(event))
            if progress is not None and n.id % CHUNK == 0:
                progress(n.id, head)
        spool.seek(0)
        try:
            count = insert_into_empty(new.recorder, _spooled(spool))
        except StoreNotEmpty:
            raise LedgerError("database_not_empty", "the new ledger must be empty (it has events)") from None
    verified, difference = compare(old, new, head)
    return {"events": count, "keys": len(sealer.keys.rows()), "verified": verified, "first_difference": difference}


def compare(old: Any, new: Any, head: int) -> tuple[int, dict[str, Any] | None]:
    """Each event of ``new`` read back and compared with ``old``'s, in order: (how many are equal, the first that
    is not: its stream, version and fields)."""
    from itertools import zip_longest

    pairs = zip_longest(scan(old, head, by_notification=True), scan(new, new.head(), by_notification=True))
    equal = 0
    for a, b in pairs:
        if a is None or b is None:  # one log holds more events than the other
            n = a if a is not None else b
            return equal, {"stream": str(_uuid(n.originator_id)), "version": n.originator_version, "fields": ["(missing)"]}
        first = _fields(old.mapper.to_domain_event(a))
        second = _fields(new.mapper.to_domain_event(b))
        if first != second:
            fields = sorted(k for k in first.keys() | second.keys() if first.get(k) != second.get(k))
            return equal, {"stream": str(_uuid(a.originator_id)), "version": a.originator_version, "fields": fields}
        equal += 1
    return equal, None


def _fields(event: Any) -> dict[str, Any]:
    import dataclasses

    return {f.name: msgspec.to_builtins(getattr(event, f.name), builtin_types=(bytes,))
            for f in dataclasses.fields(event)}
