"""Issue 25, point 4: the backup and restore drill of docs/operations.md ("Backups"), run as written.

A cluster made by the test archives its WAL (``archive_command``); the ledger records commands; a digest of the
log is kept (``events verify --json``); a base backup is taken (``pg_basebackup``); more commands; the moment to
restore to is noted; more commands that the restore must not hold; the cluster is lost. A new cluster is made
from the base backup and the archive, recovering to that moment (``recovery_target_time``). Then, on the
restored ledger: the kept digest is proven (``events verify --upto HEAD --expect-digest HEX``), the whole log
verifies with its views, it ends exactly at the moment (the digest taken then), and nothing after it is there.
Runs as root with PostgreSQL's server binaries; skipped with the reason elsewhere."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from tests.reliability.clusters import CLI, Cluster, apply, cluster_root

pytestmark = pytest.mark.slow

ORG, USER = "0a000000-0000-4000-8000-0000000000d1", "0b000000-0000-4000-8000-0000000000d1"


def verify(url: str, *args: str) -> dict:
    out = subprocess.run([*CLI, "--db", url, "events", "verify", "--json", *args], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def send(url: str, chat: str, *texts: str) -> None:
    rows = apply(url, *({"type": "send_message", "chat_id": chat, "text": t} for t in texts))
    assert rows and all(r["ok"] for r in rows), rows


def test_a_base_backup_and_the_wal_archive_restore_the_ledger_to_a_point_in_time() -> None:
    bindir, root = cluster_root("chat-ledger-drill-")
    archive = root / "archive"
    archive.mkdir()
    shutil.chown(archive, "postgres", "postgres")
    primary, restored = Cluster(bindir, root, "primary"), Cluster(bindir, root, "restored")
    try:
        primary.run("initdb", "-D", str(primary.data), "-A", "trust", "-U", "postgres")
        primary.start("-c wal_level=replica", "-c archive_mode=on", f"-c archive_command='cp %p {archive}/%f'")
        url = f"postgresql://postgres@127.0.0.1:{primary.port}/postgres?schema=drill"
        rows = apply(url, {"type": "add_organization_member", "organization_id": ORG, "user_id": USER},
                     {"type": "create_model_config", "organization_id": ORG, "provider": "anthropic",
                      "model": "claude", "context_limit": 200000},
                     {"type": "create_chat", "organization_id": ORG, "owner_id": USER, "text": "before the backup"})
        assert all(r["ok"] for r in rows), rows
        chat = rows[-1]["result"]["chat_id"]
        send(url, chat, *(f"kept {n}" for n in range(5)))

        # the digest an operator keeps elsewhere, then the backup
        kept = verify(url)
        assert kept["ok"], kept["anomalies"]
        primary.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                    "-D", str(restored.data), "-X", "stream", "--checkpoint=fast")

        send(url, chat, *(f"after the backup {n}" for n in range(5)))
        moment = verify(url)  # the log as it is at the moment restored to
        (target,) = primary.sql("SELECT clock_timestamp()::text")[0]
        send(url, chat, "after the moment: not restored")
        (segment,) = primary.sql("SELECT pg_walfile_name(pg_switch_wal())")[0]
        deadline = time.monotonic() + 60
        while not (archive / segment).exists():  # the archiver has copied the segment holding the moment
            assert time.monotonic() < deadline, f"WAL segment {segment} was not archived"
            time.sleep(0.1)  # polling the condition above
        primary.kill()  # the primary's machine is lost

        # restore: the base backup, the archive, and the moment (docs/operations.md, "Backups")
        (restored.data / "recovery.signal").touch()
        shutil.chown(restored.data / "recovery.signal", "postgres", "postgres")
        restored.start(f"-c restore_command='cp {archive}/%f %p'", f"-c recovery_target_time='{target}'",
                       "-c recovery_target_action=promote")
        deadline = time.monotonic() + 120
        while restored.sql("SELECT pg_is_in_recovery()") != [(False,)]:
            assert time.monotonic() < deadline, "the restored cluster did not finish recovery"
            time.sleep(0.1)  # polling the condition above
        restored_url = f"postgresql://postgres@127.0.0.1:{restored.port}/postgres?schema=drill"

        proven = verify(restored_url, "--upto", str(kept["head"]), "--expect-digest", kept["chain"]["digest"])
        assert proven["ok"], proven["anomalies"]
        whole = verify(restored_url)
        assert whole["ok"], whole["anomalies"]
        assert (whole["head"], whole["chain"]["digest"]) == (moment["head"], moment["chain"]["digest"])
        assert all(p["lag"] == 0 for p in whole["projections"] if p["position"] is not None), whole["projections"]
        shown = subprocess.run([*CLI, "--db", restored_url, "show", chat, "--json"], capture_output=True, text=True,
                               timeout=120)
        texts = json.dumps(json.loads(shown.stdout))
        assert "after the backup 4" in texts and "after the moment" not in texts

        # and the restored ledger takes commands
        send(restored_url, chat, "after the restore")
        assert verify(restored_url)["ok"]
    finally:
        restored.stop()
        primary.stop()
        shutil.rmtree(root, ignore_errors=True)
