"""Make text a graph produced storable on every backend.

Clients' text is refused at the edge when no backend can store it; a graph's
output cannot be refused after the fact, yet one NUL (PostgreSQL rejects it in
``text`` and ``jsonb``) or lone surrogate (SQLite's UTF-8 encoder raises) in a
reply used to make finalization fail and strand the run ``running``. Such
characters become U+FFFD in what we record (run columns, the event journal);
the checkpoint holds what the graph wrote, as its serializer stores it.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """Return ``text`` with NUL and lone surrogates replaced (the common case: unchanged)."""
    return _UNSTORABLE.sub(REPLACEMENT, text) if _UNSTORABLE.search(text) else text


def storable(value: Any) -> Any:
    """Return ``value`` (JSON-like, nested) with every string made storable, keys included."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return value
