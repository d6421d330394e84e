"""Any single change to a SQLite ledger's stored events before a checkpoint is detected against it, and an edit is
named at its entry (hypothesis; the rows are changed with sqlite3 directly, as a database writer would)."""

from __future__ import annotations

import sqlite3
import tempfile
import uuid
from pathlib import Path

from eventsourcing.persistence import StoredEvent
from hypothesis import given, settings, strategies as st

from commands.evidence import check_checkpoint, make_checkpoint
from ledger.evidence.checkpoint import create_keys, load_public
from ledger.store import open_app

KEYS = Path(tempfile.mkdtemp())
PRIVATE, PUBLIC = create_keys("k", KEYS)

logs = st.lists(st.tuples(st.integers(0, 2), st.binary(min_size=1, max_size=12)), min_size=2, max_size=12)
CHANGES = ("payload", "topic", "delete", "swap", "duplicate", "truncate")


@settings(max_examples=25, deadline=None)
@given(logs, st.sampled_from(CHANGES), st.data())
def test_any_change_before_the_checkpoint_is_detected(log, change, data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "l.db"
        app = open_app(f"sqlite:///{db}")
        streams = [uuid.uuid4() for _ in range(3)]
        versions = [0, 0, 0]
        for s, payload in log:
            versions[s] += 1
            app.recorder.insert_events([StoredEvent(streams[s], versions[s], "t", payload)])
        cp = make_checkpoint(app, PRIVATE)
        assert check_checkpoint(app, cp, load_public(PUBLIC)) == []
        n = len(log)
        i = data.draw(st.integers(1, n))  # the rowid changed
        with sqlite3.connect(db) as conn:
            if change == "payload":
                conn.execute("UPDATE stored_events SET state = CAST(state || x'00' AS BLOB) WHERE rowid = ?", (i,))
            elif change == "topic":
                conn.execute("UPDATE stored_events SET topic = 'u' WHERE rowid = ?", (i,))
            elif change == "delete":
                conn.execute("DELETE FROM stored_events WHERE rowid = ?", (i,))
            elif change == "swap":
                j = i % n + 1
                a, b = (conn.execute("SELECT state FROM stored_events WHERE rowid = ?", (r,)).fetchone()[0]
                        for r in (i, j))
                if a == b:
                    return  # the same bytes: nothing changed
                conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (b, i))
                conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (a, j))
                i = min(i, j)
            elif change == "duplicate":  # an event inserted before the checkpoint's end, under an earlier id
                conn.execute("UPDATE stored_events SET rowid = rowid + 1000 WHERE rowid >= ?", (i,))
                conn.execute("INSERT INTO stored_events (rowid, originator_id, originator_version, topic, state) "
                             "VALUES (?, ?, 99, 't', x'01')", (i, uuid.uuid4().hex))
            else:
                conn.execute("DELETE FROM stored_events WHERE rowid = ?", (n,))
                i = n
        found = check_checkpoint(app, cp, load_public(PUBLIC))
        app.close()
        assert found and all(x["check"] == "checkpoint" for x in found), (change, found)
        if change in ("payload", "topic", "swap"):
            assert found[0]["notification_id"] == i, (change, i, found)
        else:
            assert found[0]["notification_id"] in (None, i, i + 1000), (change, i, found)
