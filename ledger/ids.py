"""Short ids, git-style: an id shown at the shortest prefix unique among the ids around it (at least
``MIN_SHOWN`` characters), and a prefix typed back resolved among candidates (pure functions; the service
layer's ``commands.idlookup`` finds the candidates in the ledger).

A prefix is matched case-insensitively against the canonical form (lower-case, hyphenated); a prefix
that matches one candidate names it, none is not found, several are ambiguous (``ambiguous_id``, the
message listing the candidates).
"""

from __future__ import annotations

import re
from typing import Iterable

from ledger.errors import LedgerError

#: the shortest prefix an id is shown at
MIN_SHOWN = 8
#: the shortest prefix accepted as input (git's rule)
MIN_PREFIX = 4
#: candidates an ``ambiguous_id`` message lists
SHOWN_CANDIDATES = 10

_PREFIX = re.compile(r"^[0-9a-fA-F][0-9a-fA-F-]*$")


def shortest_unique(ids: Iterable[str], min_len: int = MIN_SHOWN) -> dict[str, str]:
    """Each distinct id mapped to its shortest prefix (at least ``min_len``) that no other id starts with.
    An id that is a prefix of another stays whole."""
    distinct = sorted(set(ids))
    out: dict[str, str] = {}
    for i, x in enumerate(distinct):
        need = min_len
        for j in (i - 1, i + 1):  # in sorted order the longest common prefix is with a neighbour
            if 0 <= j < len(distinct):
                need = max(need, _common(x, distinct[j]) + 1)
        out[x] = x[:need]
    return out


def _common(a: str, b: str) -> int:
    n = 0
    for ca, cb in zip(a, b):
        if ca != cb:
            break
        n += 1
    return n


def looks_like_prefix(text: str) -> bool:
    """Whether ``text`` can be an id prefix: hex digits (and hyphens), at least ``MIN_PREFIX`` of them."""
    return bool(_PREFIX.match(text)) and len(text.replace("-", "")) >= MIN_PREFIX


def matching(prefix: str, candidates: Iterable[str]) -> list[str]:
    """The distinct candidates that start with ``prefix`` (case-insensitively), sorted."""
    p = prefix.lower()
    return sorted({c for c in candidates if c.lower().startswith(p)})


def resolve_prefix(prefix: str, candidates: Iterable[str], what: str = "id") -> str | None:
    """The one candidate ``prefix`` names; None when none matches; ``ambiguous_id`` when several do."""
    found = matching(prefix, candidates)
    if len(found) > 1:
        raise ambiguous(prefix, found, what)
    return found[0] if found else None


def ambiguous(prefix: str, found: list[str], what: str = "id") -> LedgerError:
    shown = ", ".join(found[:SHOWN_CANDIDATES]) + (f", … ({len(found)} in all)" if len(found) > SHOWN_CANDIDATES else "")
    return LedgerError("ambiguous_id", f"{what} prefix {prefix} is ambiguous: it matches {shown}")
