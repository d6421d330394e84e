"""One handler for every command: decode a JSON command, run it, return a result or a LedgerError.

The command union is assembled from the feature modules' ``@handles`` registrations.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable, Union
from uuid import UUID

import msgspec

import commands.catalog  # noqa: F401  (registers the catalog and deployment commands)
import commands.chat  # noqa: F401  (registers the chat commands)
import commands.conversation  # noqa: F401  (registers the conversation commands)
import commands.protection  # noqa: F401  (registers erasure, legal hold and retention)
import commands.toolcalls  # noqa: F401  (registers the tool-call execution commands)
from commands.base import HANDLERS, Command, command_type
from ledger.errors import LedgerError, clip, invalid_command


@functools.cache
def _decoder() -> msgspec.json.Decoder:
    return msgspec.json.Decoder(Union[tuple(HANDLERS)])  # type: ignore[arg-type]


def command_types() -> list[str]:
    return sorted(command_type(c) for c in HANDLERS)


def decode_command(data: bytes | str) -> Command:
    """Parse one JSON command; anything malformed (not JSON, not UTF-8, nested too deeply for the decoder,
    not a command, a UUID not in canonical form) is ``invalid_command`` naming what is wrong."""
    try:
        command = _decoder().decode(data)
    except msgspec.ValidationError as e:
        raise invalid_command(f"invalid command: {clip(str(e))}") from None
    except msgspec.DecodeError as e:
        raise invalid_command(f"malformed JSON: {clip(str(e))}") from None
    except RecursionError:
        raise invalid_command("malformed JSON: nested too deeply") from None
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _MAYBE_NONCANONICAL.search(raw):
        where = _noncanonical_uuid(command, msgspec.json.decode(raw), "$")
        if where is not None:
            raise invalid_command(f"invalid command: a UUID must be canonical (lowercase, hyphenated: "
                                  f"8-4-4-4-12 hex digits) - at `{where}`")
    return command


#: UUIDs are canonical in commands (docs/commands.md, "Conventions"), but the decoder also takes upper-case and unhyphenated
#: ones: a command whose text holds something that could be one (or a \u escape) is checked field by field
_MAYBE_NONCANONICAL = re.compile(rb'"[0-9a-fA-F]{32}"|"[0-9a-fA-F-]*[A-F][0-9a-fA-F-]*"|\\u')
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _noncanonical_uuid(typed: Any, raw: Any, path: str) -> str | None:
    """The path of the first UUID value of the decoded command whose JSON text is not canonical: ``typed``
    (the decoded value) and ``raw`` (the same JSON decoded untyped) are walked side by side."""
    if isinstance(typed, UUID):
        return None if isinstance(raw, str) and _CANONICAL_UUID.fullmatch(raw) else path
    if isinstance(typed, msgspec.Struct):
        if isinstance(raw, dict):
            for f in msgspec.structs.fields(typed):
                if f.encode_name in raw:
                    found = _noncanonical_uuid(getattr(typed, f.name), raw[f.encode_name], f"{path}.{f.encode_name}")
                    if found is not None:
                        return found
    elif isinstance(typed, (list, tuple)) and isinstance(raw, list):
        for i, (t, r) in enumerate(zip(typed, raw)):
            found = _noncanonical_uuid(t, r, f"{path}[{i}]")
            if found is not None:
                return found
    elif isinstance(typed, dict) and isinstance(raw, dict):
        for k, v in typed.items():
            if isinstance(k, UUID):
                return f"{path} (a key)" if any(not _CANONICAL_UUID.fullmatch(rk) for rk in raw) else None
            if isinstance(k, str) and k in raw:
                found = _noncanonical_uuid(v, raw[k], f"{path}.{k}")
                if found is not None:
                    return found
    return None


def command_from_dict(obj: dict[str, Any]) -> Command:
    return decode_command(msgspec.json.encode(obj))


def execute(app: Any, command: Command) -> dict[str, Any]:
    handler = HANDLERS.get(type(command))
    if handler is None:  # pragma: no cover - the union only admits registered types
        raise invalid_command(f"unknown command type {type(command).__name__}")
    return handler(app, command)


def execute_json(app: Any, data: bytes | str) -> dict[str, Any]:
    return execute(app, decode_command(data))


BOM = b"\xef\xbb\xbf"


def apply_lines(app: Any, lines: Iterable[bytes | str], stop_on_error: bool = False,
                out: Callable[[dict[str, Any]], None] = lambda _: None,
                prepare: Callable[[Command], Command] | None = None) -> tuple[int, int]:
    """Run JSONL commands in order, handing ``out`` one result line each (docs/commands.md, "Results"), as each line is
    run (so a caller streaming commands reads each result before sending the next). Returns (ok, refused).

    Lines are bytes (``str`` lines are encoded as UTF-8): every non-blank line gets exactly one result,
    whatever it holds — a line that is not UTF-8, not JSON or nested too deeply is ``invalid_command`` for
    that line alone. A UTF-8 byte order mark opening line 1 is ignored. ``prepare`` (the HTTP service's
    authorization, ``commands.access.authorize``) gets each decoded command and returns the one to run, or
    raises the line's refusal."""
    ok = refused = 0
    for number, line in enumerate(lines, start=1):
        line = as_line(number, line)
        if not line.strip():
            continue
        row = run_line(app, number, line, prepare)
        out(row)
        if row["ok"]:
            ok += 1
            continue
        refused += 1
        if stop_on_error:
            break
    return ok, refused


def as_line(number: int, line: bytes | str) -> bytes:
    """A line's bytes as a command is decoded from them: UTF-8, without the byte order mark of line 1."""
    if isinstance(line, str):
        line = line.encode("utf-8", "surrogatepass")  # a lone surrogate stays invalid UTF-8: refused below
    if number == 1 and line.startswith(BOM):
        line = line[len(BOM):]
    return line


def run_line(app: Any, number: int, line: bytes, prepare: Callable[[Command], Command] | None = None,
             ) -> dict[str, Any]:
    """One non-blank line's result row (docs/commands.md, "Results"): ``ok`` with the result, or refused with the error."""
    ctype = None
    try:
        command = decode_command(line)
        ctype = command_type(type(command))
        if prepare is not None:
            command = prepare(command)
        result = execute(app, command)
    except LedgerError as e:
        return refused_line(number, line, e, ctype)
    return {"line": number, "ok": True, "type": ctype, "result": result}


def refused_line(number: int, line: bytes, error: LedgerError, ctype: str | None = None) -> dict[str, Any]:
    """A refused line's result row; its ``type`` is the command's (or what the line names, if anything)."""
    return {"line": number, "ok": False, "type": ctype if ctype is not None else _type_of(line),
            "error": error.to_dict()}


class _Typed(msgspec.Struct):
    type: Any = None


_typed = msgspec.json.Decoder(_Typed)


def _type_of(line: bytes) -> str | None:
    """The ``type`` a refused line names, when it is a JSON object with a string ``type`` (best effort)."""
    try:
        t = _typed.decode(line).type
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return t if isinstance(t, str) else None


__all__ = ["LedgerError", "command_types", "decode_command", "command_from_dict", "execute", "execute_json",
           "apply_lines", "run_line", "refused_line"]
