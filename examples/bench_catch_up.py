"""Log-order catch-up against the stream-wise rebuild of the same ledger, in one process (issue 17 point 4).

    .venv/bin/python -m commands.tools.bench_children generate URL 200000 2000   # a ledger of 2,000 chats at once
    .venv/bin/python examples/bench_catch_up.py URL                             # this checkout's code
    PYTHONPATH=/path/to/other/checkout .venv/bin/python examples/bench_catch_up.py URL   # another's, same ledger

Prints one JSON line: scan + decode of the chat events (better of two), the stream-wise rebuild (1 worker)
and a log-order build of the same events from an empty build (what ``catch-up`` does after a pause: windows
as ``projections.pacing`` sizes them when no batch size is given), their time ratio and the peak RSS.
"""

from __future__ import annotations

import json
import resource
import sys
import time

from commands.tools.bench_streamwise import _scan_decode_chat
from ledger.store import open_app
from projections import open_backend, rebuild
from projections.chats import ChatViews


def main(url: str) -> dict[str, object]:
    app, backend = open_app(url), open_backend(url)
    n, scan_s = min((_scan_decode_chat(app) for _ in range(2)), key=lambda x: x[1])
    out: dict[str, object] = {"events": n, "scan_ev_s": round(n / scan_s)}
    for label, streamwise in (("streamwise", True), ("log_order", False)):
        t = time.perf_counter()
        result = rebuild(app, ChatViews(app), backend, streamwise=streamwise, workers=1)
        dt = time.perf_counter() - t
        out[label] = {"seconds": round(dt, 2), "events_per_s": round(result.events / dt)}
    out["log_order_vs_streamwise"] = round(out["log_order"]["seconds"] / out["streamwise"]["seconds"], 2)  # type: ignore[index]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    backend.close()
    app.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
