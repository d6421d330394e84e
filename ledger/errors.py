"""The one error type the domain raises: a stable code plus a human message.

Codes and fixed messages are part of the public contract (docs/commands.md, "Results"): never rename one.
A refused command records nothing.
"""

from __future__ import annotations


class LedgerError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}

    def __repr__(self) -> str:
        return f"LedgerError({self.code!r}, {self.message!r})"


def transition_not_allowed(transition: str, state: str, reason: str | None = None) -> LedgerError:
    message = f"chat state transition {transition} not allowed from state {state}"
    if reason:
        message += f": {reason}"
    return LedgerError("transition_not_allowed", message)


def invalid_command(message: str) -> LedgerError:
    return LedgerError("invalid_command", message)


#: longest detail echoed back in an error message: decoders quote offending names and values whole (a 1 MB
#: unknown field name made a 1 MB error line)
MAX_DETAIL = 300


def clip(detail: str) -> str:
    return detail if len(detail) <= MAX_DETAIL else f"{detail[:MAX_DETAIL]}… ({len(detail):,} characters)"
