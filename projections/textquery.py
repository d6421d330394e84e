"""A search query as people type it, and its spelling for each database's full-text engine (pure).

The syntax is the web's: words (all must match), ``"quoted phrases"`` (words next to each other, in
order) and ``-excluded`` words or phrases. Matching is by word, case-insensitive, with no stemming; a
word is a run of letters and digits, so ``rm -rf`` is the phrase *rm rf* and ``/etc/passwd`` the phrase
*etc passwd* — as both engines index the text (``projections.sqlite`` and ``projections.postgres``,
``_create_text_search``). Every term is spelled quoted or as plain word characters, so no input can inject
the engines' own operators.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: a word as the indexes see it: letters and digits (no underscore: both engines split there)
WORD = re.compile(r"[^\W_]+")
_TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')
_SPACE = re.compile(r"\s+")
#: terms of a query at most (each is a condition of the match)
MAX_TERMS = 32


class Term(NamedTuple):
    words: tuple[str, ...]  # one word, or a phrase
    excluded: bool


class TextQueryError(ValueError):
    """A query that matches nothing by construction (no word to look for)."""


def parse(text: str) -> tuple[Term, ...]:
    """The terms of ``text``; ``TextQueryError`` when it has no word to include."""
    terms: list[Term] = []
    for m in _TOKEN.finditer(text):
        if m.group(2) is not None:
            excluded, raw = m.group(1) == "-", m.group(2)
        else:
            raw = m.group(3)
            excluded = raw.startswith("-") and len(raw) > 1
            raw = raw[1:] if excluded else raw
        words = tuple(w.lower() for w in WORD.findall(raw))
        if words:
            terms.append(Term(words, excluded))
    if not any(not t.excluded for t in terms):
        raise TextQueryError("the query has no word to look for (words are letters and digits; "
                             "a leading - excludes a word)")
    if len(terms) > MAX_TERMS:
        raise TextQueryError(f"the query has {len(terms)} terms; at most {MAX_TERMS}")
    return tuple(terms)


def words(terms: tuple[Term, ...]) -> list[str]:
    """The words to highlight: those of the included terms."""
    return [w for t in terms if not t.excluded for w in t.words]


def fts5(terms: tuple[Term, ...]) -> str:
    """SQLite FTS5's spelling: ``"a b" "c" NOT "d"`` (every term a quoted string: no operator inside)."""
    def quoted(t: Term) -> str:
        return '"' + " ".join(t.words) + '"'

    included = " AND ".join(quoted(t) for t in terms if not t.excluded)
    return " NOT ".join([f"({included})", *(quoted(t) for t in terms if t.excluded)])


def tsquery(terms: tuple[Term, ...]) -> str:
    """PostgreSQL's ``to_tsquery`` spelling: ``a <-> b & c & !d`` (words are letters and digits only)."""
    def spelled(t: Term) -> str:
        phrase = " <-> ".join(f"'{w}'" for w in t.words)
        return f"!({phrase})" if t.excluded else f"({phrase})"

    return " & ".join(spelled(t) for t in terms)


class Fragment(NamedTuple):
    text: str
    hit: bool


def snippet(body: str, highlight: list[str], width: int = 160) -> list[Fragment]:
    """A window of ``body`` around its first highlighted word (about ``width`` characters, cut at spaces),
    as fragments marking each word of ``highlight`` found in it. Plain text: the caller escapes it."""
    if not body:
        return []
    wanted = set(highlight)
    first = next((m for m in WORD.finditer(body) if m.group().lower() in wanted), None)  # (a body may be 200k)
    centre = first.start() if first is not None else 0
    start = max(0, centre - width // 3)
    end = min(len(body), start + width)
    if start > 0:
        space = body.rfind(" ", 0, start)
        start = space + 1 if space >= 0 and start - space < 20 else start
    window = _SPACE.sub(" ", body[start:end])  # (one line: newlines between parts read as spaces)
    out: list[Fragment] = [Fragment("…", False)] if start > 0 else []
    pos = 0
    for m in WORD.finditer(window):
        if m.group().lower() in wanted:
            if m.start() > pos:
                out.append(Fragment(window[pos:m.start()], False))
            out.append(Fragment(m.group(), True))
            pos = m.end()
    if pos < len(window):
        out.append(Fragment(window[pos:], False))
    if end < len(body):
        out.append(Fragment("…", False))
    return out
