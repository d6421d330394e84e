"""Audit pages rendered with Jinja2 from the plain data of ``ledger.audit.page`` (autoescaped).

Templates (package data under ``ledger/audit/templates/``): ``base.html`` (the layout: inline CSS, no
scripts, no network assets), ``_macros.html`` (state badges, ids, the timeline, the legend) and one page per
kind: ``chat.html``, ``catalog.html``, ``conversation.html``. Every link goes through ``link(kind, id)``:
the static page (``static_link``) uses anchors on the page and relative files for other streams; a server
passes its own routes, and may pass ``explain(what, id)`` for explain links. ``short(id)`` shows an id at its
shortest unique length on the page.
"""

from __future__ import annotations

import re

from functools import lru_cache
from typing import Any, Callable

Link = Callable[[str, Any], str]
#: ``explain(what, id)``: the address of the explanation of a tool call, queued prompt or turn
Explain = Callable[[str, Any], str]

#: the kinds of ``link``: things on the page (an anchor) and other streams (another page)
ON_PAGE = ("event", "message", "call", "result", "execution", "turn", "queued")
ANCHOR_PREFIX = {"event": "ev", "message": "msg", "call": "call", "result": "result", "execution": "exec",
                 "turn": "turn", "queued": "q"}


def anchor(kind: str, ident: Any) -> str:
    return f"{ANCHOR_PREFIX[kind]}-{ident}"


def static_link(kind: str, ident: Any) -> str:
    """The static page's links: ``#anchor`` on the page; another chat or stream is the file ``<id>.html``
    beside it (``chat-ledger audit ID --html ID.html``)."""
    if kind in ON_PAGE:
        return "#" + anchor(kind, ident)
    return f"{ident}.html"


#: characters that change how text around them is shown without being seen: bidirectional overrides and
#: isolates, marks, zero-width characters, soft hyphen, BOM, line and paragraph separators. On a page they could
#: reorder or hide what the record says (``abc\u202efed`` reads as "abcdef"); the pages show each as
#: ``⟨U+202E⟩`` instead.
INVISIBLE = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]")


def visible(value: Any) -> Any:
    """``value`` with ``INVISIBLE`` characters spelled out (strings only; the environment's ``finalize``: every
    ``{{ expression }}`` of every page goes through it, before escaping)."""
    if isinstance(value, str) and INVISIBLE.search(value):
        shown = INVISIBLE.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", value)
        return type(value)(shown) if type(value) is not str else shown  # (markup stays markup: ⟨U+…⟩ is no HTML)
    return value


#: how much of a report a page shows (``folded_json``): deeper containers, longer lists and strings are folded,
#: and the whole text is cut at ``FOLD_TOTAL`` characters; the page links the full JSON
FOLD_DEPTH, FOLD_ITEMS, FOLD_STRING, FOLD_TOTAL = 8, 50, 500, 100_000


def folded_json(value: Any, *, depth: int = FOLD_DEPTH, items: int = FOLD_ITEMS, string: int = FOLD_STRING,
                total: int = FOLD_TOTAL) -> tuple[str, bool]:
    """``value`` as indented JSON for a page, bounded: a container deeper than ``depth`` becomes a note of its
    size, a list or object past ``items`` entries and a string past ``string`` characters are cut with a note
    of how much was left out, and the text stops at ``total`` characters. So a page's size grows with what it
    shows, not with what was recorded (indented JSON of a deeply nested value grows with the square of its
    depth). Returns the text and whether anything was folded."""
    import json

    folded = False

    def fold(v: Any, level: int) -> Any:
        nonlocal folded
        if isinstance(v, str):
            if len(v) <= string:
                return v
            folded = True
            return f"{v[:string]}… ⟨{len(v) - string} more characters⟩"
        if isinstance(v, (dict, list, tuple)):
            if level >= depth and v:
                folded = True
                return f"⟨{'an object of' if isinstance(v, dict) else 'a list of'} {len(v)} folded⟩"
            entries = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
            kept = [(k, fold(x, level + 1)) for k, x in entries[:items]]
            if len(entries) > items:
                folded = True
                kept.append(("…", f"⟨{len(entries) - items} more folded⟩"))
            return {str(k): x for k, x in kept} if isinstance(v, dict) else [x for _, x in kept]
        return v

    text = json.dumps(fold(value, 0), indent=2, ensure_ascii=False, default=str)
    if len(text) > total:
        folded = True
        text = f"{text[:total]}\n… ⟨{len(text) - total} more characters folded⟩"
    return text, folded


@lru_cache(maxsize=1)
def environment() -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(loader=PackageLoader("ledger.audit", "templates"), autoescape=select_autoescape(["html"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, finalize=visible)
    env.globals["anchor"] = anchor
    return env


def render_page(page: dict[str, Any], link: Link = static_link, *, template: str | None = None,
                explain: Explain | None = None, proof_link: Callable[[int], str] | None = None, **extra: Any) -> str:
    """The page for ``page`` (``ledger.audit.page.chat_page`` or ``stream_page`` data); ``template`` one that
    extends the kind's page (the service's ``ui_chat.html``), ``explain`` where the explain links go (none on
    the static page), ``proof_link(version)`` where an event's inclusion proof is (with ``page["evidence"]``)."""
    from ledger.chat.state import state_legend

    template = template or {"chat": "chat.html", "catalog": "catalog.html", "conversation": "conversation.html"}.get(
        page["kind"], "catalog.html")
    ids = page.get("ids") or {}
    return render(template, page=page, link=link, short=lambda v: "-" if v is None else ids.get(str(v), str(v)[:8]),
                  legend=state_legend(), explain=explain, proof_link=proof_link, **extra)


def render(template: str, **context: Any) -> str:
    """Any template of the set (the service's own pages: lists, models, login, errors)."""
    return environment().get_template(template).render(**context)
