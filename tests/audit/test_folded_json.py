"""``folded_json``: a page's view of a report is bounded whatever was recorded, and says when it folded."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.audit.render import folded_json

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=30),
                    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=5), inner, max_size=6),
                    max_leaves=60)

SMALL = {"depth": 3, "items": 4, "string": 10, "total": 400}


@given(JSON)
@settings(max_examples=300, deadline=None)
def test_what_is_not_folded_is_the_value_itself_and_what_is_folded_is_bounded(value):
    text, folded = folded_json(value, **SMALL)
    if not folded:
        assert json.loads(text) == value  # nothing was left out, nothing changed
    else:
        assert "⟩" in text  # the page says where it folded
    assert len(text) <= SMALL["total"] + 60


def test_a_deeply_nested_value_is_cut_to_its_bound():
    value: dict = {"leaf": "x"}
    for n in range(400):
        value = {"k": [value, n]}
    whole = json.dumps(value, indent=2)
    text, folded = folded_json(value)
    assert len(whole) > 1_000_000 and folded and len(text) < 5_000
    assert "⟨an object of 1 folded⟩" in text or "⟨a list of 2 folded⟩" in text


def test_long_strings_and_lists_say_how_much_was_left_out():
    text, folded = folded_json({"s": "a" * 600, "l": list(range(60))})
    assert folded and "⟨100 more characters⟩" in text and "⟨10 more folded⟩" in text
