"""Input checks shared by the parser, the URL gate and serializers.

Everything here runs before a view writes anything, so a refused request
leaves no row behind. Three kinds of input no backend stores faithfully:

- text with NUL (PostgreSQL refuses it in ``text`` and ``jsonb``) or a lone
  UTF-16 surrogate (not encodable as UTF-8: SQLite stores it, then every
  answer that renders it fails);
- non-finite numbers (``NaN``, ``Infinity``, ``1e400``): Python's ``json``
  accepts them, JSON cannot carry them back, and the columns disagree;
- JSON nested deeper than the code walking it can recurse.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.conf import settings
from langchain_core.messages import convert_to_messages
from rest_framework.exceptions import ValidationError

UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")
_NAMES_SHOWN = 80
# What every route can address: no spaces, dots or non-ASCII letters a path would have to encode.
THREAD_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


class _NonFinite:
    """A parsed ``NaN``/``Infinity``/overflowing number, refused by the tree walk with its path."""

    def __init__(self, token: str) -> None:
        self.token = token


def _finite_float(token: str) -> float | _NonFinite:
    value = float(token)
    return value if math.isfinite(value) else _NonFinite(token)


def limits():
    """Return the configured ``limits:`` section."""
    return settings.DEERFLOW_CONFIG.limits


def body_too_large() -> str:
    """Return the 413 detail for a request body over ``limits.max_body_bytes``."""
    return f"Request body is larger than the limit of {limits().max_body_bytes} bytes (limits.max_body_bytes)"


def printable(text: str) -> str:
    """Return ``text`` safe to echo in an error: unstorable characters escaped, shortened."""
    shown = UNSTORABLE_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return shown if len(shown) <= _NAMES_SHOWN else shown[:_NAMES_SHOWN] + "…"


def text_problem(text: str) -> str | None:
    """Say what makes ``text`` unstorable, or return None."""
    match = UNSTORABLE_TEXT.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return "contains NUL (\\u0000), which no backend can store"
    return f"contains a lone surrogate (\\u{ord(match.group()):04x}), which is not valid Unicode text"


def _refuse(path: str, message: str):
    raise ValidationError({path: message} if path else [message])


def thread_id_problem(thread_id: Any) -> str | None:
    """Say why ``thread_id`` cannot name a thread, or return None.

    ``fullmatch``: ``re.match`` with ``$`` let ``"abc\\n"`` through.
    """
    if isinstance(thread_id, str) and THREAD_ID_PATTERN.fullmatch(thread_id):
        return None
    return f"Invalid thread id {thread_id!r}: use 1-64 letters, digits, '_' or '-'"


def json_tree_check(value: Any, *, max_depth: int) -> None:
    """Raise a 422 naming the first unstorable string, key, number or too-deep level."""
    # (value, path, depth, what to call a scalar: "" or "item 3 " inside a list)
    stack: list[tuple[Any, str, int, str]] = [(value, "", 1, "")]
    while stack:
        node, path, depth, item = stack.pop()
        if isinstance(node, str):
            if problem := text_problem(node):
                _refuse(path, f"{item}{problem}")
        elif isinstance(node, _NonFinite):
            _refuse(path, f"{item}{node.token} is not a finite number; JSON numbers must be finite")
        elif isinstance(node, dict):
            _depth_check(path, depth, max_depth)
            for key, child in node.items():
                if problem := text_problem(key):
                    _refuse(path, f"key {printable(key)!r} {problem}")
                stack.append((child, printable(f"{path}.{key}" if path else key), depth + 1, ""))
        elif isinstance(node, list):
            _depth_check(path, depth, max_depth)
            # Scalars are named "field: item i" (a list of labels reads as one field),
            # containers "field[i].key".
            for index, child in enumerate(node):
                if isinstance(child, (str, _NonFinite)):
                    stack.append((child, path, depth + 1, f"item {index} "))
                else:
                    stack.append((child, f"{path}[{index}]", depth + 1, ""))


def _depth_check(path: str, depth: int, max_depth: int) -> None:
    if depth > max_depth:
        _refuse(path, f"JSON is nested deeper than the limit of {max_depth} levels")


def json_loads(text: str, *, max_depth: int) -> Any:
    """Parse a request body; 422 for what no backend can store, ValueError for malformed JSON."""
    try:
        value = json.loads(text, parse_constant=_NonFinite, parse_float=_finite_float)
    except RecursionError:
        # Python's own parser recurses once per level and gives up near 1000.
        _refuse("", f"JSON is nested deeper than the limit of {max_depth} levels")
    json_tree_check(value, max_depth=max_depth)
    return value


def url_text_check(values: dict[str, Any]) -> None:
    """Raise a 422 naming the first path id or query parameter with unstorable text."""
    for name, value in values.items():
        for text in (name, *(value if isinstance(value, list) else [value])):
            if isinstance(text, str) and (problem := text_problem(text)):
                _refuse(printable(name), problem)


def json_size(value: Any) -> int:
    """Return the bytes of ``value`` as compact UTF-8 JSON (how the limits measure)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode())


def metadata_size_check(metadata: dict[str, Any] | None, *, field: str = "metadata") -> None:
    """Raise a 422 naming ``limits.max_metadata_bytes`` when ``metadata`` is larger."""
    limit = limits().max_metadata_bytes
    if metadata and (size := json_size(metadata)) > limit:
        _refuse(field, f"is {size} bytes of JSON, over the limit of {limit} bytes (limits.max_metadata_bytes)")


# -- messages -------------------------------------------------------------------


def _content_problem(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"content must be a string or a list of content blocks, got {type(content).__name__}"
    for index, block in enumerate(content):
        if isinstance(block, str):
            continue
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return f"content[{index}] must be a string or a content block object with a string 'type'"
    return None


def _message_problem(item: Any) -> str | None:
    if isinstance(item, dict):
        if not isinstance(item.get("type", item.get("role")), str):
            return "a message object needs a string 'type' or 'role'"
        if problem := _content_problem(item.get("content")):
            return problem
    try:
        convert_to_messages([item])
    except Exception as exc:  # LangChain raises several types for bad shapes
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        return f"not a message LangChain can read: {first_line}"
    return None


def messages_problems(messages: Any) -> dict[str, str]:
    """Return ``{"messages[i]": why}`` for what ``add_messages`` would fail to coerce.

    ``messages`` is a list of messages or one message (LangGraph's reducer
    wraps a single one), each as LangChain accepts it: a message object with
    ``type``/``role`` and string or content-block content, a string, or a
    ``[role, content]`` pair.
    """
    items = messages if isinstance(messages, list) else [messages]
    for index, item in enumerate(items):
        if problem := _message_problem(item):
            return {f"messages[{index}]": problem}
    return {}
