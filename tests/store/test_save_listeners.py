"""``ChatLedgerApp.listeners``: what a save hands its listeners is what the log holds (the service streams
its own writes from them without reading them back), and a listener's failure does not fail a save.

Every command type of the reliability script runs, on SQLite and PostgreSQL; each recording handed over
must equal the stored notification (id, stream, version, topic, payload bytes), and the event as the API
shows it (``logged_event``) from the recorded domain event must equal the one decoded from the log.
"""

from __future__ import annotations

import uuid
from typing import Any

from commands.eventlog import logged_event
from commands.handler import command_from_dict, command_types, execute
from ledger.errors import LedgerError
from tests.chat.helpers import ORG, OWNER, setup_org
from tests.reliability.command_script import NEEDS_SEALING, script


def _run_script(app: Any) -> set[str]:
    results: list[Any] = []
    types = set()
    for step in script("listeners"):
        command = step(results) if callable(step) else step
        types.add(command["type"])
        try:
            results.append(("ok", execute(app, command_from_dict(command))))
        except LedgerError as e:
            results.append(("refused", e.to_dict()))
    return types


def test_listeners_get_what_the_log_holds(app: Any) -> None:
    handed: list[Any] = []
    app.listeners.append(handed.extend)
    types = _run_script(app)
    assert types | {"reconcile_invalid_state"} | NEEDS_SEALING == set(command_types())
    stored = {n.id: n for n in app.notifications(0, 100_000)}
    assert [r.notification.id for r in handed] == sorted(stored)  # every event, once, in log order
    for r in handed:
        n = stored[r.notification.id]
        assert (r.notification.originator_id, r.notification.originator_version, r.notification.topic,
                bytes(r.notification.state)) == (n.originator_id, n.originator_version, n.topic, bytes(n.state))
        assert logged_event(app, r.notification, r.domain_event) == logged_event(app, n)


def test_a_failing_listener_does_not_fail_the_save(app: Any) -> None:
    def broken(recordings: Any) -> None:
        raise RuntimeError("listener broke")

    app.listeners.append(broken)
    setup_org(app)
    result = execute(app, command_from_dict({"type": "create_chat", "organization_id": ORG, "owner_id": OWNER,
                                             "text": "hello"}))
    assert result["version"] == 1
    assert [type(e).__name__ for e in app.stream(uuid.UUID(result["chat_id"]))] == ["ChatCreated"]
