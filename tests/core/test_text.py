"""``storable``: NUL and lone surrogates become U+FFFD anywhere in a nested value; a clean value comes back as is."""

from __future__ import annotations

import pytest

from core.text import REPLACEMENT, storable

pytestmark = pytest.mark.backend_free  # no Django database: the SQLite pass runs it once


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a\x00b", f"a{REPLACEMENT}b"),
        ({"k": ["x\x00y", {"deep": "\ud800"}]}, {"k": [f"x{REPLACEMENT}y", {"deep": REPLACEMENT}]}),
        ({"key\x00": 1, "\udfff": [("t\x00",)]}, {f"key{REPLACEMENT}": 1, REPLACEMENT: [[f"t{REPLACEMENT}"]]}),
        # Not a NUL: an escaped backslash before "u0000" (the one-pass check's false positive takes the walk).
        ({"text": "a\\u0000b"}, {"text": "a\\u0000b"}),
        # Keys orjson refuses take the walk too, unchanged.
        ({1: "x\x00"}, {1: f"x{REPLACEMENT}"}),
    ],
)
def test_unstorable_characters_are_replaced_everywhere(value, expected):
    assert storable(value) == expected


def test_a_clean_value_is_returned_as_is():
    value = {"messages": [{"content": "fine", "n": 1, "ok": True, "none": None}], "tuple": ("a", "b")}
    assert storable(value) is value
