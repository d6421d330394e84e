"""Writes ``edits-before-recorded-prefix.jsonl`` (an ``events export``) and ``...-shows.json`` (each chat's
``show --json``): the edits whose stale hook prefix the ledger once guessed from "same turn id and same
time" (issue 24's regression) and the ones it deleted rightly.

The committed files were written by the code *before* the fix (commit 995bfa5), so that
``tests/chat/test_upstream_chatd.py`` can prove that a ledger recorded then replays, with today's code, to the
state it had: what was recorded is never changed by a new rule. Running this script again writes what the
current code records; do that only to add a case, and say so in the commit.

    PYTHONPATH=. python tests/chat/data/write_edit_ledger.py tests/chat/data
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

from commands.cli.main import main
from ledger.store import open_app
from tests.chat.helpers import ORG, OWNER, run, setup_org

CALL = {"type": "tool-call", "tool_call_id": "call_exec", "tool_name": "execute", "args": {"cmd": "ls"}}


def hook(text: str) -> dict:
    return {"role": "user", "visibility": "model", "parts": [{"type": "text", "text": text}]}


def write(app) -> list[str]:
    setup_org(app)
    chats = []
    # 1. TestSyntheticCancellation_EditMessage: an assistant tool call and a user message in one step; the
    #    user message is edited (the code before the fix soft-deleted the assistant message as a prefix).
    c = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="first")["chat_id"]
    run(app, type="commit_step", chat_id=c, messages=[
        {"role": "assistant", "parts": [CALL]}, {"role": "user", "parts": [{"type": "text", "text": "second user"}]}])
    run(app, type="edit_message", chat_id=c, message_id=3, text="edited")
    chats.append(c)
    # 2. a hook prefix sent from W, then its prompt edited (the prefix goes with it)
    c = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="hello")["chat_id"]
    run(app, type="finish_turn", chat_id=c)
    run(app, type="send_message", chat_id=c, text="do it", prefix_messages=[hook("[hook] OLD")])
    run(app, type="edit_message", chat_id=c, message_id=3, text="do it better", prefix_messages=[hook("[hook] NEW")])
    chats.append(c)
    # 3. a queued prompt with a prefix, promoted, then edited
    c = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="hello")["chat_id"]
    run(app, type="send_message", chat_id=c, text="queued", prefix_messages=[hook("[hook] Q")])
    run(app, type="finish_turn", chat_id=c)
    run(app, type="edit_message", chat_id=c, message_id=3, text="queued, again")
    chats.append(c)
    # 4. an assistant reply and a user message in one step, no tool call, then more turns (not edited)
    c = run(app, type="create_chat", organization_id=ORG, owner_id=OWNER, text="hello")["chat_id"]
    run(app, type="commit_step", chat_id=c, messages=[
        {"role": "assistant", "parts": [{"type": "text", "text": "hi"}]},
        {"role": "user", "parts": [{"type": "text", "text": "and?"}]}])
    run(app, type="finish_turn", chat_id=c)
    chats.append(c)
    return chats


def main_(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/ledger.db"
        app = open_app(url)
        chats = write(app)
        app.close()
        cli = CliRunner()
        export = cli.invoke(main, ["--db", url, "events", "export", "-o", str(out / "edits-before-recorded-prefix.jsonl")])
        assert export.exit_code == 0, export.output
        shows = {}
        for c in chats:
            r = cli.invoke(main, ["--db", url, "show", c, "--json"])
            assert r.exit_code == 0, r.output
            shows[c] = json.loads(r.output)
        (out / "edits-before-recorded-prefix-shows.json").write_text(json.dumps(shows, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main_(Path(sys.argv[1]))
