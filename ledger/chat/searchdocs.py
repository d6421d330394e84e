"""What the search view indexes of a chat's events (pure): one document per message, queued prompt, title
and error, with the text a person would search for in it.

A document's ``body`` is its words as a reader sees them: text and reasoning, each tool call's name and
arguments, each result's tool name and content, file ids. JSON arguments and results contribute their
keys and values (``{"command": "rm -rf /"}`` is found by ``rm -rf``). Bodies are cut at ``MAX_BODY``
characters: PostgreSQL refuses a ``tsvector`` over 1 MB, and what an auditor searches is in a message's
beginning far more often than in the middle of a 12 MB tool output (docs/search.md says so).
"""

from __future__ import annotations

from typing import Any, Iterator

import msgspec

from ledger.chat.values import FilePart, Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

#: the characters of a document that are indexed (and kept in the view for snippets)
MAX_BODY = 200_000


def _json_words(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _json_words(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _json_words(v)
    elif value is not None:
        yield msgspec.json.encode(value).decode()


def parts_text(parts: list[Part]) -> tuple[str, list[str]]:
    """A message's searchable text and the tools its parts name (in order, each once)."""
    chunks: list[str] = []
    tools: list[str] = []
    for p in parts:
        if isinstance(p, (TextPart, ReasoningPart)):
            chunks.append(p.text)
        elif isinstance(p, ToolCallPart):
            chunks.append(p.tool_name)
            chunks.extend(_json_words(p.args))
        elif isinstance(p, ToolResultPart):
            chunks.append(p.tool_name)
            chunks.extend(_json_words(p.result))
        elif isinstance(p, FilePart):
            chunks.append(p.file_id)
        if isinstance(p, (ToolCallPart, ToolResultPart)) and p.tool_name not in tools:
            tools.append(p.tool_name)
        if sum(map(len, chunks)) > MAX_BODY:
            break
    return "\n".join(chunks)[:MAX_BODY], tools


def tool_filter(tool: str) -> dict[str, str]:
    """The ``contains`` filter on the ``tools`` column that matches one tool's name exactly (``tools_column``)."""
    return {"tools": f" {tool.strip()} "}


def tools_column(tools: list[str]) -> str:
    """The ``tools`` column: the names between spaces (`` execute read_file ``), so that a filter on one
    tool is a substring match on `` name ``."""
    return f" {' '.join(tools)} " if tools else ""
