"""The chat's message index in chunks, so that a command's cost does not grow with its chat's length.

``MessageIndex`` is the sequence of a chat's ``MessageInfo`` (``ChatState.messages``): message ``i + 1`` at
position ``i`` (ids are contiguous, ``ledger.audit.invariants`` checks it). It behaves as a list for every
reader (``len``, indexing, slices, iteration, ``reversed``, ``==``), and keeps its rows in chunks of
``chunk_size`` messages. Every chunk but the last is full, and a full chunk only ever changes by a message
being soft-deleted (``mark_deleted``: ``MessageInfo.deleted`` is the one field evolve changes after insertion).

That is what lets a snapshot (``ledger.snapshots``) store a long chat's index apart from the head of its state:
each full chunk once, in its own row, at the chat version it was last changed at; the head holds the partial
last chunk and, per full chunk, that version (a few bytes per chunk). A state restored from a snapshot starts
with the full chunks not loaded; a reader that reaches into one loads it (and the ones just before it, for
backward scans) through the ``loader`` it was given, in one read. The decision rules read the tail (the latest
assistant message, the current turn, the latest boundary: ``ledger.chat.state``) or one message
(``edit_message``), so a command on a 50,000-event chat reads a chunk or none, where a list would be decoded
whole. A reader that needs everything (a full scan) loads every chunk in one read: the cost of the list.

A loader is ``loader(wanted: dict[chunk number, stored version]) -> dict[chunk number, list[MessageInfo]]``; it
must give back exactly the chunks as they were at those versions (``ledger.snapshots`` falls back to the
events when a chunk row is missing). Chunks built or changed in memory are "not stored" (``None``) until a
snapshot writes them (``mark_stored``). None of this bookkeeping takes part in ``==``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Callable, Iterable, Iterator

from ledger.chat.messageinfo import MessageInfo

#: messages per chunk of a new index (a snapshot records its own, so changing it invalidates nothing)
CHUNK = 128
#: chunks loaded at once when a reader reaches an unloaded one (it and the ones just before it)
BATCH = 4

Loader = Callable[[dict[int, int]], "dict[int, list[MessageInfo]]"]


def fits(k: int, chunk: Sequence[MessageInfo], chunk_size: int) -> bool:
    """Whether ``chunk`` can be full chunk ``k`` of an index of ``chunk_size``: that many messages, from id
    ``k * chunk_size + 1`` (ids are contiguous)."""
    return len(chunk) == chunk_size and chunk[0].message_id == k * chunk_size + 1


class MessageIndex(Sequence):  # type: ignore[type-arg]
    __slots__ = ("chunk_size", "_chunks", "_stored", "_len", "_loader")

    def __init__(self, messages: Iterable[MessageInfo] = (), chunk_size: int | None = None) -> None:
        self.chunk_size = chunk_size or CHUNK
        self._chunks: list[list[MessageInfo] | None] = []
        self._stored: list[int | None] = []
        self._len = 0
        self._loader: Loader | None = None
        for m in messages:
            self.append(m)

    # -- snapshots --------------------------------------------------------------------------------------
    @classmethod
    def restore(cls, length: int, chunk_size: int, versions: list[int], tail: list[MessageInfo],
                loader: Loader | None) -> MessageIndex:
        """The index a snapshot's head describes (``ledger.snapshots.StoredIndex``): its full chunks stored at
        ``versions`` and not loaded (read through ``loader``), then ``tail``."""
        index = cls(chunk_size=chunk_size)
        full = len(versions)
        if chunk_size <= 0 or length != full * chunk_size + len(tail) or len(tail) >= chunk_size:
            raise ValueError("a stored message index whose chunks do not add up")
        index._chunks = [None] * full
        index._stored = list(versions)
        if tail:
            index._chunks.append(list(tail))
            index._stored.append(None)
        index._len = length
        index._loader = loader
        return index

    def unstored(self) -> list[tuple[int, list[MessageInfo]]]:
        """The full chunks a snapshot must write before its head: built or changed since last stored."""
        full = self._len // self.chunk_size
        return [(k, self._chunks[k]) for k in range(full) if self._stored[k] is None]  # type: ignore[misc]

    def mark_stored(self, k: int, version: int) -> None:
        self._stored[k] = version

    def stored_form(self) -> tuple[list[int], list[MessageInfo]]:
        """The head's part: the versions of the full chunks (each must be stored: ``unstored`` is empty) and
        the partial last chunk."""
        full = self._len // self.chunk_size
        versions = self._stored[:full]
        if any(v is None for v in versions):
            raise ValueError("a chunk of the index is not stored")
        tail = self._chunks[full] if full < len(self._chunks) else []
        return versions, list(tail or ())  # type: ignore[return-value]

    def loaded_chunks(self) -> int:
        """How many chunks are in memory (for tests and measurements)."""
        return sum(c is not None for c in self._chunks)

    # -- loading ---------------------------------------------------------------------------------------
    def _load(self, ks: Iterable[int]) -> None:
        wanted = {k: self._stored[k] for k in ks if self._chunks[k] is None}
        if not wanted:
            return
        if self._loader is None:
            raise RuntimeError("message chunks not loaded and no loader to read them")
        got = self._loader(wanted)  # type: ignore[arg-type]
        for k in wanted:
            chunk = got[k]
            if not fits(k, chunk, self.chunk_size):
                raise ValueError(f"message chunk {k} does not fit the index")
            self._chunks[k] = chunk

    def _chunk(self, k: int) -> list[MessageInfo]:
        chunk = self._chunks[k]
        if chunk is None:
            self._load(range(max(0, k - BATCH + 1), k + 1))
            chunk = self._chunks[k]
        return chunk  # type: ignore[return-value]

    def last_loaded(self) -> MessageInfo | None:
        """The last message if it is in memory (no read), else None."""
        if not self._len:
            return None
        chunk = self._chunks[-1]
        return chunk[-1] if chunk else None

    # -- the sequence ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._len)
            if step != 1:
                return list(self)[i]
            if start >= stop:
                return []
            size = self.chunk_size
            first, last = start // size, (stop - 1) // size
            self._load(range(first, last + 1))
            out: list[MessageInfo] = []
            for k in range(first, last + 1):
                out.extend(self._chunks[k])  # type: ignore[arg-type]
            return out[start - first * size: stop - first * size]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("message index out of range")
        return self._chunk(i // self.chunk_size)[i % self.chunk_size]

    def __iter__(self) -> Iterator[MessageInfo]:
        self._load(range(len(self._chunks)))
        for chunk in self._chunks:
            yield from chunk  # type: ignore[misc]

    def __reversed__(self) -> Iterator[MessageInfo]:
        """Backward, loading chunks only as the reader gets to them (most scans stop in the last one)."""
        for k in range(len(self._chunks) - 1, -1, -1):
            yield from reversed(self._chunk(k))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (MessageIndex, list)):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageIndex({self._len} messages, {self.loaded_chunks()}/{len(self._chunks)} chunks loaded)"

    def __add__(self, other: Sequence[MessageInfo]) -> Sequence[MessageInfo]:
        return Joined(self, other) if other else self

    # -- changes (evolve only) ---------------------------------------------------------------------------
    def append(self, m: MessageInfo) -> None:
        size = self.chunk_size
        if self._len % size == 0:
            self._chunks.append([])
            self._stored.append(None)
        else:
            self._chunk(len(self._chunks) - 1)
        self._chunks[-1].append(m)  # type: ignore[union-attr]
        self._stored[-1] = None
        self._len += 1

    def mark_deleted(self, message_ids: Iterable[int]) -> None:
        """Soft-delete these messages (ids not in the index are ignored, as a scan would)."""
        size = self.chunk_size
        for mid in message_ids:
            i = mid - 1
            if not 0 <= i < self._len:
                continue
            k = i // size
            m = self._chunk(k)[i % size]
            if m.message_id != mid:  # (ids not contiguous: not a valid history; do what a scan would do)
                self._mark_by_scan(set(message_ids))
                return
            m.deleted = True
            self._stored[k] = None

    def _mark_by_scan(self, ids: set[int]) -> None:
        for k in range(len(self._chunks)):
            for m in self._chunk(k):
                if m.message_id in ids:
                    m.deleted = True
                    self._stored[k] = None

    def __deepcopy__(self, memo: dict[int, Any]) -> MessageIndex:
        """A copy whose loaded messages are its own (``deleted`` is mutable; the rest of a ``MessageInfo`` is
        never changed, so its parts are shared); the loader is shared."""
        new = MessageIndex(chunk_size=self.chunk_size)
        new._chunks = [None if c is None else [copy.copy(m) for m in c] for c in self._chunks]
        new._stored = list(self._stored)
        new._len = self._len
        new._loader = self._loader
        return new


class Joined(Sequence):  # type: ignore[type-arg]
    """The index followed by messages a command is adding (``Draft.index``), without copying the index."""

    __slots__ = ("head", "added")

    def __init__(self, head: MessageIndex, added: Sequence[MessageInfo]) -> None:
        self.head, self.added = head, added

    def __len__(self) -> int:
        return len(self.head) + len(self.added)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(self)[i]
        n = len(self.head)
        if i < 0:
            i += len(self)
        return self.head[i] if i < n else self.added[i - n]

    def __iter__(self) -> Iterator[MessageInfo]:
        yield from self.head
        yield from self.added

    def __reversed__(self) -> Iterator[MessageInfo]:
        yield from reversed(self.added)
        yield from reversed(self.head)
