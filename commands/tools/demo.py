"""What ``chat-ledger demo`` records: the example scenarios as fresh chats (new ids on every run), each with
the refusals it expects; then a small simulation (``commands.tools.simulate``)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Callable

import commands.tools.scenarios as _scenarios


#: the example scenarios (examples/scenarios in a checkout, installed as the package commands.tools.scenarios)
SCENARIOS = Path(_scenarios.__file__).resolve().parent
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def scenario_files(folder: Path = SCENARIOS) -> list[Path]:
    return sorted(folder.glob("*.jsonl"))


def fresh_ids(lines: list[str], keep: Callable[[str], bool] = lambda _org: False) -> tuple[list[str], dict[str, str]]:
    """Give the scenario's chats, organizations and model configs new ids, so the demo records new ones on
    every run — but an organization ``keep`` says the ledger has not seen keeps its id, with its model
    configs (so a first demo on a new ledger has the organizations the README names). The mapping returned is
    that of the chats."""
    chat_ids: set[str] = set()
    other_ids: set[str] = set()
    for line in lines:
        if not line.strip():
            continue
        obj = json.loads(line)
        if obj.get("type") == "create_chat" and "chat_id" in obj:
            chat_ids.add(obj["chat_id"])
        if obj.get("organization_id") and keep(obj["organization_id"]):
            continue
        if obj.get("type") == "create_model_config" and obj.get("model_config_id"):
            other_ids.add(obj["model_config_id"])
        if obj.get("organization_id"):
            other_ids.add(obj["organization_id"])
    mapping = {old: str(uuid.uuid4()) for old in chat_ids}
    every = {**{old: str(uuid.uuid4()) for old in other_ids}, **mapping}
    return [_UUID.sub(lambda m: every.get(m.group(0), m.group(0)), l) for l in lines], mapping


def expected_refusals(path: Path) -> dict[str, str] | None:
    expected = path.with_name(path.stem + ".expected.json")
    if not expected.exists():
        return None
    return json.loads(expected.read_text(encoding="utf-8")).get("refused", {})
