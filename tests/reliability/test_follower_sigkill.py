"""A projection catch-up killed with SIGKILL in the middle of a batch, then restarted: exactly once holds.

The catch-up runs in a child process over a big log (about 8,000 events, batches of 1,000); it is killed
after its first batch committed, while later batches are being applied. At the kill point the views must
be exactly the views of the events up to the committed position (each chat's status row has the version of
its events up to there: nothing of the interrupted batch, nothing twice); after a restart (a new child
process) the views equal a rebuild from the log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from commands.tools.workload import generate
from projections import open_backend
from projections.chats import ChatViews
from tests.reliability.kit import assert_views_equal_rebuild, read_views

CHILD = """
import sys
from ledger.store import open_app
from projections import catch_up, open_backend
from projections.chats import ChatViews
app = open_app(sys.argv[1])
with open_backend(sys.argv[1]) as backend:
    catch_up(app, ChatViews(app), backend, batch_size=int(sys.argv[2]))
app.close()
"""
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_child(url: str, batch: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", CHILD, url, str(batch)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_catch_up_killed_mid_batch_then_restarted(db_url: str, app: Any) -> None:
    generate(app, 8_000, chat_events=40, save_every=100)
    head = app.head()
    child = start_child(db_url, 1000)
    killed_at = None
    with open_backend(db_url) as backend:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            try:
                position = backend.position("chat_views", ChatViews.version)
            except Exception:  # noqa: BLE001 - the child may be creating the tables
                position = None
            if position:  # the first batch committed: the next one is being applied now
                # (at once: eight batches of 1,000 of these small chats now take well under 50 ms)
                child.send_signal(signal.SIGKILL)
                killed_at = position
                break
            time.sleep(0.005)
        child.wait(timeout=30)
        assert killed_at is not None, "the catch-up finished (or failed) before it could be killed: " \
                                      + child.stderr.read().decode()[-2000:]
        assert child.returncode == -signal.SIGKILL
        # The position and the rows in one snapshot: the server may still be committing a batch the
        # child sent just before it died.
        with backend.reading("chat_views", ChatViews.version) as r:  # not live yet: read the build being made
            position = r.position()
            rows = r.query("chat_status")
        assert 0 < position < head, "killed mid-run: some but not all batches committed"

        # exactly the events up to the committed position, each once
        upto: Counter[str] = Counter()
        for nid, e in app.iter_events(0):
            if nid <= position and type(e).__module__ == "ledger.chat.events":
                upto[str(e.originator_id)] += 1
        assert {r["chat_id"]: r["version"] for r in rows} == dict(upto)

    restarted = start_child(db_url, 1000)
    out, err = restarted.communicate(timeout=120)
    assert restarted.returncode == 0, err.decode()[-2000:]
    with open_backend(db_url) as backend:
        assert backend.position("chat_views", ChatViews.version) == head
        before_rebuild = read_views(backend)
    views = assert_views_equal_rebuild(app, db_url)
    assert views == before_rebuild
    assert len(views["chat_status"]) == len({str(e.originator_id) for _, e in app.iter_events(0)
                                             if type(e).__module__ == "ledger.chat.events"})
