"""Rules that span streams hold at commit (issue 13 point 7): a chat is created only by a member.

``create_chat`` decides membership from the organization's catalog, another stream than the chat it
writes. One real process removes and re-adds the owner in a loop (``chat-ledger apply``) while two other
real processes create chats owned by that user. Afterwards the catalog is folded along the log (the
global notification order, which is commit order on both backends): at every ``ChatCreated`` its owner
must be a member at that point. Without the check at commit, a create that read "member" before the
removal committed after it (44 of 633 chats on PostgreSQL before the fix).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from ledger.catalog import events as cev
from ledger.catalog.evolve import evolve_catalog
from ledger.chat import events as ev
from ledger.store import open_app
from tests.chat.helpers import OWNER, setup_org

TOGGLES = 150  # remove + add pairs
CREATES = 150  # per creating process
CLI = [sys.executable, "-c", "from commands.cli.main import main; main()"]


def _write(path: Path, commands: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in commands))
    return path


def _apply(url: str, path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CHAT_LEDGER_DB": url}
    return subprocess.Popen([*CLI, "apply", str(path)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2])


def _results(proc: subprocess.Popen[bytes], lines: int) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, 1), err.decode()
    results = [json.loads(line) for line in out.decode().splitlines()]
    assert len(results) == lines, err.decode()
    return results


def creates_by_non_members(app: Any, org: str) -> tuple[int, list[tuple[int, str]]]:
    """(chats of ``org`` created, the notification id and chat id of each created while its owner was not a
    member)."""
    catalog = None
    created, violations = 0, []
    for nid, e in app.iter_events(0):
        if isinstance(e, cev.CatalogEvent) and e.originator_id == uuid.UUID(org):
            catalog = evolve_catalog(catalog, e)
        elif isinstance(e, ev.ChatCreated) and e.organization_id == uuid.UUID(org):
            created += 1
            if catalog is None or e.owner_id not in catalog.members:
                violations.append((nid, str(e.originator_id)))
    return created, violations


def one_round(db_url: str, tmp_path: Path, org: str) -> tuple[int, int]:
    """The three processes on one organization; returns (creates accepted, creates sent)."""
    app = open_app(db_url)
    try:
        setup_org(app, org, model=str(uuid.uuid4()))
    finally:
        app.close()
    toggles = _write(tmp_path / f"toggle-{org}.jsonl", [
        {"type": t, "organization_id": org, "user_id": OWNER}
        for _ in range(TOGGLES) for t in ("remove_organization_member", "add_organization_member")])
    creates = [_write(tmp_path / f"create{w}-{org}.jsonl", [
        {"type": "create_chat", "organization_id": org, "owner_id": OWNER, "text": f"w{w} chat {i}"}
        for i in range(CREATES)]) for w in range(2)]

    creators = [_apply(db_url, path) for path in creates]
    toggler = _apply(db_url, toggles)
    toggled = _results(toggler, 2 * TOGGLES)
    created = [r for proc in creators for r in _results(proc, CREATES)]

    assert all(r["ok"] for r in toggled), [r for r in toggled if not r["ok"]][:3]
    refused = {r["error"]["code"] for r in created if not r["ok"]}
    # conflict: the catalog changed under every one of the create's attempts (nothing recorded)
    assert refused <= {"not_organization_member", "conflict"}, refused
    ok = sum(r["ok"] for r in created)
    app = open_app(db_url)
    try:
        chats, violations = creates_by_non_members(app, org)
    finally:
        app.close()
    assert chats == ok  # every accepted create is in the log once, and nothing refused is
    assert violations == [], f"{len(violations)} of {chats} chats created while the owner was not a member"
    return ok, len(created)


def test_no_chat_is_created_by_a_non_member_in_log_order(db_url: str, tmp_path: Path) -> None:
    # The scheduler decides whether the creates overlap the toggles (on a loaded machine a process may run
    # alone): a new organization each round, until one round saw both outcomes.
    for _ in range(4):
        ok, sent = one_round(db_url, tmp_path, str(uuid.uuid4()))
        if 0 < ok < sent:
            return
    raise AssertionError("the race did not happen in 4 rounds: every create was accepted, or none")
