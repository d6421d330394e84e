"""docs/library.md's example is the API as documented: it runs as written, on SQLite and PostgreSQL, and
prints what the ledger decided."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def example_code() -> str:
    text = (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "docs/library.md has one runnable example"
    return blocks[0]


def test_the_documented_example_runs(db_url: str) -> None:
    env = {**os.environ, "CHAT_LEDGER_DB": db_url}
    out = subprocess.run([sys.executable, "-c", example_code()], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "created R0"
    assert lines[1] == "queued prompt 1"
    assert lines[2] == "refused: queued_message_not_found"
    assert lines[3:5] == ["1 finish_turn True", "2 set_title True"]
    # the queued prompt was promoted by finish_turn: running again, queue empty
    assert lines[5] == "R0 []"
    assert "QueuedPromptPromoted" in lines[6] and lines[6].startswith("['ChatCreated'")
    assert lines[7] == "1 generate_assistant"
    followed = [line.split() for line in lines[8:]]
    assert [t for _, t in followed][-1] == "TitleSet"
    ids = [int(n) for n, _ in followed]
    assert ids == list(range(ids[0], ids[0] + len(ids))) and len(ids) == 2
