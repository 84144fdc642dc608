"""Build the API's payload dicts from model rows."""

from __future__ import annotations

from typing import Any


def fields_of(obj: object, *names: str) -> dict[str, Any]:
    """Return ``{name: obj.name}`` for each name, in order: a payload's columns passed through as stored."""
    return {name: getattr(obj, name) for name in names}
