"""Counters of what the service layer did in this process, for ``/metrics`` (Prometheus text format).

``COUNTERS`` is per process (each ``serve`` process reports its own; Prometheus sums them): commands by type
and outcome, refusals by code, conflict retries (``commands.uow.run`` counts one each time an attempt is
decided again after another writer won), requests by route and status.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Iterable


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()

    def add(self, name: str, n: int = 1, **labels: Any) -> None:
        key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
        with self._lock:
            self._values[key] += n

    def get(self, name: str, **labels: Any) -> int:
        key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
        with self._lock:
            return self._values.get(key, 0)

    def items(self) -> list[tuple[str, tuple[tuple[str, str], ...], int]]:
        with self._lock:
            return sorted((name, labels, v) for (name, labels), v in self._values.items())


COUNTERS = Counters()

#: metric name -> (type, help)
HELP = {
    "chat_ledger_commands_total": ("counter", "Commands run, by type and outcome (ok, refused)."),
    "chat_ledger_refusals_total": ("counter", "Refused commands and requests, by code."),
    "chat_ledger_conflict_retries_total": ("counter", "Command attempts decided again after a concurrent write."),
    "chat_ledger_group_commits_total": ("counter", "Transactions that saved several requests' commands together "
                                        "(group commit), by outcome (saved; redo: each command then run alone; unavailable: tried "
                                        "again together; unknown; failed)."),
    "chat_ledger_group_committed_commands_total": ("counter", "Commands saved by group commit transactions."),
    "chat_ledger_http_requests_total": ("counter", "HTTP requests, by route and status."),
    "chat_ledger_projection_position": ("gauge", "Notification id each projection's live build stands at."),
    "chat_ledger_projection_lag": ("gauge", "Events each projection's live build is behind the log's head."),
    "chat_ledger_log_head": ("gauge", "Notification id of the last recorded event."),
}


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(gauges: Iterable[tuple[str, dict[str, Any], float]] = ()) -> str:
    """Every counter of this process and the given gauges, as Prometheus text."""
    samples: dict[str, list[str]] = {name: [] for name in HELP}
    for name, labels, value in COUNTERS.items():
        samples.setdefault(name, []).append(_sample(name, dict(labels), value))
    for name, labels, value in gauges:
        samples.setdefault(name, []).append(_sample(name, labels, value))
    lines: list[str] = []
    for name, rows in samples.items():
        kind, text = HELP.get(name, ("untyped", name))
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *rows]
    return "\n".join(lines) + "\n"


def _sample(name: str, labels: dict[str, Any], value: float) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value:g}" if inner else f"{name} {value:g}"
