"""Issue 28, point 1: every text field of every event type is declared, next to its class, as someone's personal
data (and whose) or as not personal (and why). A new text field without a declaration fails here."""

from __future__ import annotations

import importlib
import typing

import pytest

import ledger.registry  # noqa: F401 - every event class
from ledger.base import TOPICS, LedgerEvent
from ledger.privacy import BASE_NOT_PERSONAL, Whose, covered, event_text_fields, undeclared

EVENTS = sorted((c for c in set(TOPICS.values()) if isinstance(c, type) and issubclass(c, LedgerEvent)
                 and not c.__dict__.get("abstract", False) and c.__module__.startswith("ledger.")),
                key=lambda c: c.TOPIC)  # (tests register event classes of their own)


def declarations(cls: type) -> tuple[dict[str, str], dict[str, str]]:
    module = importlib.import_module(cls.__module__)
    assert hasattr(module, "PERSONAL") and hasattr(module, "NOT_PERSONAL"), \
        f"{cls.__module__} declares no PERSONAL / NOT_PERSONAL (ledger.privacy)"
    return module.PERSONAL.get(cls, {}), module.NOT_PERSONAL.get(cls, {})


@pytest.mark.parametrize("cls", EVENTS, ids=lambda c: c.TOPIC)
def test_every_text_field_is_declared_one_way_and_every_declaration_names_one(cls) -> None:
    personal, not_personal = declarations(cls)
    assert undeclared(cls, personal, not_personal) == []
    assert set(personal.values()) <= set(typing.get_args(Whose))
    fields = event_text_fields(cls)
    for path in [*personal, *not_personal]:
        assert any(covered(f, [path]) for f in fields), f"{cls.__name__}: {path} names no text field (a typo?)"
    assert not set(personal) & set(not_personal)


def test_the_modules_declare_only_their_own_events() -> None:
    for module_name in {c.__module__ for c in EVENTS}:
        module = importlib.import_module(module_name)
        for cls in [*module.PERSONAL, *module.NOT_PERSONAL]:
            assert cls.__module__ == module_name and cls in EVENTS, (module_name, cls)


def test_a_new_text_field_without_a_declaration_is_found() -> None:
    """The check itself: an event type given a text field (here a subclass, kept out of the registry) is
    reported until it is declared."""
    import dataclasses

    from ledger.chat import events as ev

    @dataclasses.dataclass(frozen=True)
    class Annotated(ev.TitleSet):
        abstract: typing.ClassVar[bool] = True
        note: str = ""

    personal, not_personal = declarations(ev.TitleSet)
    assert undeclared(Annotated, personal, not_personal) == ["note"]
    assert undeclared(Annotated, {**personal, "note": "owner"}, not_personal) == []
    assert "idempotency_key" in BASE_NOT_PERSONAL
