"""Thread search by state ``values`` and the ``extract`` paths, without a storage read per thread per search.

``values`` filters threads whose head state contains the given top-level
pairs (JSON containment, as ``metadata``). The head lives in checkpoints, so
each thread row keeps a mirror of the head's small top-level values
(``values_mirror``: each at most ``MIRROR_VALUE_MAX_BYTES`` of JSON, so a
long ``messages`` list is not mirrored), stamped with the ``updated_at`` it
was read at. Every run and state update moves ``updated_at``, so a mirror is
current exactly while the stamps agree. A values search first refreshes the
stale mirrors among the caller's candidates (one head read each), then
filters and pages in SQL: a thread's head is read once per change, not once
per search, and the total is exact.

``extract`` maps aliases to paths into the thread object
(``values.messages[-1].content``), evaluated in Python on what the thread
payload holds: a path is parsed and checked up front and never reaches SQL.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Q, QuerySet

from checkpoints.accessor import UnreadableStateError
from checkpoints.errors import CheckpointModeMismatchError
from core.errors import Invalid
from threads.models import ThreadMeta
from threads.selectors import thread_head_values

MIRROR_VALUE_MAX_BYTES = 1024

EXTRACT_MAX_PATHS = 10
EXTRACT_ROOTS = ("values", "metadata", "config", "interrupts")
EXTRACT_PATH_MAX_CHARS = 512
EXTRACT_MAX_STEPS = 32
ALIAS_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# One step after the root: ".key" (no dot, bracket or control character) or "[index]".
STEP_PATTERN = re.compile(r"\.([^.\[\]\x00-\x1f]{1,128})|\[(-?\d{1,9})\]")
STEP_SYNTAX = ".key or [index] steps, e.g. values.messages[-1]"


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode())


# -- values ------------------------------------------------------------------------


def mirror_of(values: dict[str, Any]) -> dict[str, Any]:
    """Return the top-level values small enough to mirror on the thread row."""
    return {key: value for key, value in values.items() if _json_size(value) <= MIRROR_VALUE_MAX_BYTES}


def values_filter_check(values: dict[str, Any]) -> None:
    """Refuse a filter value no mirrored value can equal (it is larger than any mirrored value)."""
    for key, value in values.items():
        if _json_size(value) > MIRROR_VALUE_MAX_BYTES:
            raise Invalid(
                f"values.{key}",
                f"larger than {MIRROR_VALUE_MAX_BYTES} bytes of JSON: only smaller state values are searchable",
            )


def _stale(queryset: QuerySet[ThreadMeta]) -> QuerySet[ThreadMeta]:
    current = Q(values_mirror__isnull=False, values_mirror_version__isnull=False) & Q(
        values_mirror_version=F("updated_at")
    )
    return queryset.exclude(current)


def threads_values_mirror_refresh(*, queryset: QuerySet[ThreadMeta]) -> int:
    """Bring the values mirror of every stale thread in ``queryset`` up to date; return how many heads were read.

    The write is conditional on ``updated_at``: a thread that changed while
    its head was read keeps a stale mirror and is read again next time. A
    thread this process may not read (a delta thread in a full-mode process)
    keeps no mirror and so matches no values filter here.
    """
    read = 0
    for thread in _stale(queryset).only("thread_id", "assistant_id", "status", "updated_at").iterator():
        read += 1
        try:
            values, _, _ = thread_head_values(thread, in_list=True)
        except (CheckpointModeMismatchError, UnreadableStateError):
            continue
        ThreadMeta.objects.filter(pk=thread.pk, updated_at=thread.updated_at).update(
            values_mirror=mirror_of(values if isinstance(values, dict) else {}),
            values_mirror_version=thread.updated_at,
        )
    return read


# -- extract -------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtractPath:
    """A parsed extract path: the root field of the thread object, then keys (str) and indexes (int)."""

    text: str
    root: str
    steps: tuple[str | int, ...]


def extract_path_parse(alias: str, text: Any) -> ExtractPath:
    """Parse one extract path, raising ``Invalid`` naming the alias on anything but the documented syntax."""
    field = f"extract.{alias}"
    if not isinstance(text, str) or not text:
        raise Invalid(field, "must be a non-empty string path")
    if len(text) > EXTRACT_PATH_MAX_CHARS:
        raise Invalid(field, f"longer than {EXTRACT_PATH_MAX_CHARS} characters")
    root = next((r for r in EXTRACT_ROOTS if text == r or text.startswith((r + ".", r + "["))), None)
    if root is None:
        raise Invalid(field, f"must start with one of {', '.join(EXTRACT_ROOTS)}, then {STEP_SYNTAX}")
    steps: list[str | int] = []
    position = len(root)
    while position < len(text):
        match = STEP_PATTERN.match(text, position)
        if match is None:
            raise Invalid(field, f"bad step at character {position} of {text!r}: use {STEP_SYNTAX}")
        steps.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
        position = match.end()
    if len(steps) > EXTRACT_MAX_STEPS:
        raise Invalid(field, f"more than {EXTRACT_MAX_STEPS} steps")
    return ExtractPath(text=text, root=root, steps=tuple(steps))


def extract_parse(extract: dict[str, Any], *, reserved: tuple[str, ...]) -> dict[str, ExtractPath]:
    """Parse a search's ``extract`` (alias → path); aliases are identifiers that are not thread fields."""
    if len(extract) > EXTRACT_MAX_PATHS:
        raise Invalid("extract", f"at most {EXTRACT_MAX_PATHS} paths, got {len(extract)}")
    parsed = {}
    for alias, text in extract.items():
        if not ALIAS_PATTERN.match(alias):
            raise Invalid("extract", f"alias {alias!r} must be an identifier (letters, digits, '_'; 64 at most)")
        if alias in reserved:
            raise Invalid("extract", f"alias {alias!r} is a thread field name")
        parsed[alias] = extract_path_parse(alias, text)
    return parsed


def extract_value(thread: dict[str, Any], path: ExtractPath) -> Any:
    """Return the value at ``path`` in a thread object, None where the path does not lead."""
    current = thread.get(path.root)
    for step in path.steps:
        if isinstance(step, int):
            if not isinstance(current, list) or not -len(current) <= step < len(current):
                return None
            current = current[step]
        elif isinstance(current, dict):
            current = current.get(step)
        else:
            return None
        if current is None:
            return None
    return current


def extracted(thread: dict[str, Any], paths: dict[str, ExtractPath]) -> dict[str, Any]:
    """Return the ``extracted`` object of a thread: each alias's value."""
    return {alias: extract_value(thread, path) for alias, path in paths.items()}
