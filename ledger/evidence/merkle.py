"""The Merkle tree of RFC 9162 (Certificate Transparency v2; the same tree as RFC 6962), pure.

Hashes: a leaf is ``SHA-256(0x00 || data)``, an interior node ``SHA-256(0x01 || left || right)``; the tree of n
leaves splits at k, the largest power of two below n (RFC 9162 §2.1.1); the empty tree's hash is SHA-256 of
nothing. Every function here takes ``node(level, index)``: the hash of the complete subtree of 2**level leaves
starting at leaf ``index * 2**level`` (level 0: the leaf hashes) — the ledger reads them from its stored tree
(``ledger.evidence.tree``), ``nodes_of(leaves)`` makes them for a list. In the recursion of §2.1 every left
subtree is such an aligned complete one, so a root or a proof costs O(log n) node reads.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Sequence

Node = Callable[[int, int], bytes]

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def subtree(node: Node, start: int, n: int) -> bytes:
    """MTH of the n leaves from ``start`` (``start`` aligned as the recursion of §2.1 leaves it)."""
    if n == 0:
        return EMPTY_ROOT
    if n & (n - 1) == 0 and start % n == 0:
        level = n.bit_length() - 1
        return node(level, start >> level)
    k = split(n)
    return node_hash(subtree(node, start, k), subtree(node, start + k, n - k))


def root(node: Node, size: int) -> bytes:
    return subtree(node, 0, size)


def inclusion_proof(node: Node, index: int, size: int) -> list[bytes]:
    """PATH(index, D[size]) (RFC 9162 §2.1.3.1): the audit path of leaf ``index`` in the tree of ``size``."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    path: list[bytes] = []
    start, n = 0, size
    while n > 1:
        k = split(n)
        if index - start < k:
            path.append(subtree(node, start + k, n - k))
            n = k
        else:
            path.append(subtree(node, start, k))
            start, n = start + k, n - k
    return path[::-1]


def consistency_proof(node: Node, old: int, new: int) -> list[bytes]:
    """PROOF(old, D[new]) (RFC 9162 §2.1.4.1): that the tree of ``new`` leaves extends the one of ``old``."""
    if not 0 < old <= new:
        raise ValueError(f"no consistency proof from {old} to {new}")
    proof: list[bytes] = []
    start, m, n, whole = 0, old, new, True
    while m != n:
        k = split(n)
        if m <= k:
            proof.append(subtree(node, start + k, n - k))
            n = k
        else:
            proof.append(subtree(node, start, k))
            start, m, n, whole = start + k, m - k, n - k, False
    if not whole:
        proof.append(subtree(node, start, n))
    return proof[::-1]


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], expected_root: bytes) -> bool:
    """RFC 9162 §2.1.3.2."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == expected_root


def verify_consistency(old: int, new: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes) -> bool:
    """RFC 9162 §2.1.4.2."""
    if old == new:
        return not proof and old_root == new_root
    if not 0 < old < new or not proof:
        return False
    path = list(proof)
    if old & (old - 1) == 0:  # old is a power of two: its root is the first node of the proof
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root


def nodes_of(leaves: Sequence[bytes]) -> Node:
    """``node`` for a list of leaf hashes: every complete subtree, computed once."""
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])
    return lambda level, index: levels[level][index]


class Frontier:
    """The complete subtrees on the right edge of a growing tree (at most one per level): appending a leaf
    gives the nodes it completes, and the root is known at every size, in O(log n) memory — how the stored
    tree is extended and how ``events verify --checkpoint`` recomputes a root from the stored events alone."""

    def __init__(self, size: int = 0, edge: Sequence[bytes] = ()) -> None:
        self.size = size
        self.edge = list(edge)  # the complete subtrees of the right edge, largest first

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add a leaf; returns ``(level, index, hash)`` of every node it completes, the leaf itself first."""
        made = [(0, self.size, leaf)]
        self.edge.append(leaf)
        index, level = self.size, 0
        while index & 1:
            right = self.edge.pop()
            left = self.edge.pop()
            level, index = level + 1, index >> 1
            parent = node_hash(left, right)
            self.edge.append(parent)
            made.append((level, index, parent))
        self.size += 1
        return made

    def root(self) -> bytes:
        if not self.edge:
            return EMPTY_ROOT
        r = self.edge[-1]
        for left in reversed(self.edge[:-1]):
            r = node_hash(left, r)
        return r
