"""Make text a graph produced storable on every backend.

Clients' text is refused at the edge when no backend can store it; a graph's
output cannot be refused after the fact, yet one NUL (PostgreSQL rejects it in
``text`` and ``jsonb``) or lone surrogate (SQLite's UTF-8 encoder raises) in a
reply used to make finalization fail and strand the run ``running``. Such
characters become U+FFFD in what we record (run columns, the event journal);
the checkpoint holds what the graph wrote, as its serializer stores it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """Return ``text`` with NUL and lone surrogates replaced (the common case: unchanged)."""
    return _UNSTORABLE.sub(REPLACEMENT, text) if _UNSTORABLE.search(text) else text


def _all_storable(value: Any) -> bool:
    """Say, in one ``orjson`` pass, that no string in ``value`` needs a change (False: maybe one does).

    orjson refuses lone surrogates and writes NUL as ``\\u0000``; a run's
    events hold every message of the thread, and walking them string by
    string cost ~2 ms a run. False positives (an escaped backslash before
    ``u0000``, a non-string key, a type orjson lacks) only take the walk.
    """
    try:
        return b"\\u0000" not in orjson.dumps(value)
    except TypeError:
        return False


def storable(value: Any) -> Any:
    """Return ``value`` (JSON-like, nested) with every string made storable, keys included.

    Unchanged (the same object) when nothing needs a change; else a copy, tuples as lists.
    """
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, (dict, list, tuple)) and _all_storable(value):
        return value
    return _walked(value)


def _walked(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {_walked(k): _walked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walked(v) for v in value]
    return value


def json_column(value: Any) -> str | None:
    """Return ``value`` as the text a ``JSONField`` column stores, for raw inserts (None stays SQL NULL).

    ``orjson`` encodes a run's events about ten times faster than Django's
    ``json.dumps``; what it refuses (a non-string key, an integer past 64
    bits, a lone surrogate) is left to ``json.dumps``, as Django would store it.
    NaN and the infinities become ``null`` (PostgreSQL's ``jsonb`` refuses them).
    """
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


def storable_json(value: Any) -> tuple[Any, str | None]:
    """Return ``storable(value)`` and its ``json_column`` text, from one ``orjson`` pass when nothing needs a change.

    A run's ``values`` events hold every message of the thread: checking them
    (``_all_storable``) and encoding them again doubled the largest work of
    the thread log's append.
    """
    if isinstance(value, (dict, list, tuple)):
        try:
            encoded = orjson.dumps(value)
        except TypeError:
            pass
        else:
            if b"\\u0000" not in encoded:
                return value, encoded.decode()
    value = storable(value)
    return value, json_column(value)
