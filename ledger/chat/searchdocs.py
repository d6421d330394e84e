"""What the search view indexes of a chat's events (pure): one document per message, queued prompt, title
and error, with the text a person would search for in it.

A document's ``body`` is its words as a reader sees them: text and reasoning, each tool call's name and
arguments, each result's tool name and content, file ids. JSON arguments and results contribute their
keys and values (``{"command": "rm -rf /"}`` is found by ``rm -rf``). Bodies are cut at ``MAX_BODY``
characters: PostgreSQL refuses a ``tsvector`` over 1 MB, and what an auditor searches is in a message's
beginning far more often than in the middle of a 12 MB tool output (docs/search.md says so).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.chat.values import FilePart, Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

#: the characters of a document that are indexed (and kept in the view for snippets)
MAX_BODY = 200_000


def _json_words(value: Any, out: list[str]) -> None:
    """Append the words of a JSON value: its strings, keys and other values (in order)."""
    cls = value.__class__
    if cls is str:
        out.append(value)
    elif cls is dict:
        for k, v in value.items():
            out.append(str(k))
            _json_words(v, out)
    elif cls is list or cls is tuple:
        for v in value:
            _json_words(v, out)
    elif isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        _json_words(dict(value), out)
    elif isinstance(value, (list, tuple)):
        _json_words(list(value), out)
    elif value is not None:
        out.append(msgspec.json.encode(value).decode())


_TEXT = (TextPart, ReasoningPart)
_TOOL = (ToolCallPart, ToolResultPart)


def parts_text(parts: list[Part]) -> tuple[str, list[str]]:
    """A message's searchable text and the tools its parts name (in order, each once)."""
    chunks: list[str] = []
    tools: list[str] = []
    size = 0
    for p in parts:
        cls = p.__class__
        if cls in _TEXT:
            chunks.append(p.text)  # type: ignore[union-attr]
        elif cls in _TOOL:
            name = p.tool_name  # type: ignore[union-attr]
            chunks.append(name)
            _json_words(p.args if cls is ToolCallPart else p.result, chunks)  # type: ignore[union-attr]
            if name not in tools:
                tools.append(name)
        elif cls is FilePart:
            chunks.append(p.file_id)  # type: ignore[union-attr]
        else:
            continue
        size = sum(map(len, chunks))
        if size > MAX_BODY:
            break
    return "\n".join(chunks)[:MAX_BODY], tools


def tool_filter(tool: str) -> dict[str, str]:
    """The ``contains`` filter on the ``tools`` column that matches one tool's name exactly (``tools_column``)."""
    return {"tools": f" {tool.strip()} "}


def tools_column(tools: list[str]) -> str:
    """The ``tools`` column: the names between spaces (`` execute read_file ``), so that a filter on one
    tool is a substring match on `` name ``."""
    return f" {' '.join(tools)} " if tools else ""
