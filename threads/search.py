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

The console's full-text search reads a message index: one row per thread
holding the newest ``MESSAGE_INDEX_MAX_CHARS`` characters of its head's
messages (role, text, tool calls), so a thread's share stays bounded however
long it grows. It is rewritten from a run's final values in the
transaction that records the outcome (``thread_message_index_write``: no
extra storage read) and removed with the thread; SQLite searches it with FTS5, PostgreSQL with a ``tsvector``
(words, by prefix) and ``pg_trgm`` (quoted phrases). A run that ends without final
values (a shutdown, a failed read) leaves the previous text.

``extract`` maps aliases to paths into the thread object
(``values.messages[-1].content``), evaluated in Python on what the thread
payload holds: a path is parsed and checked up front and never reaches SQL.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import F, Q, QuerySet
from django.db.models.expressions import RawSQL

from checkpoints.accessor import UnreadableStateError, state_accessor
from checkpoints.errors import CheckpointModeMismatchError, CheckpointModeReconfigurationError, UnknownGraphError
from checkpoints.serialization import serialize_channel_values
from core.custom_encryption import keeps_plain_copies
from core.errors import Invalid
from core.text import storable_text
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


# -- message text (the console's full-text search) -----------------------------------

# 32,000 characters is about the last 15 turns of a chatty conversation; older text drops out.
MESSAGE_INDEX_MAX_CHARS = 32_000
SNIPPET_WORDS = 12
# Both backends: the tables come from migration threads.0009_message_index.
MESSAGE_TEXT_UPSERT = (
    "INSERT INTO threads_message_text (thread_id, body) VALUES (%s, %s) "
    "ON CONFLICT (thread_id) DO UPDATE SET body = excluded.body"
)
MESSAGE_MATCH_SQLITE = (
    "SELECT t.thread_id FROM threads_message_text t JOIN threads_message_fts f ON f.rowid = t.id "
    "WHERE threads_message_fts MATCH %s"
)
MESSAGE_SNIPPETS_SQLITE = (
    "SELECT t.thread_id, snippet(threads_message_fts, 0, '[', ']', '…', %s) "
    "FROM threads_message_text t JOIN threads_message_fts f ON f.rowid = t.id "
    "WHERE threads_message_fts MATCH %s AND t.thread_id IN ({ids})"
)
MESSAGE_MATCH_POSTGRES = "SELECT thread_id FROM threads_message_text WHERE {where}"
MESSAGE_SNIPPETS_POSTGRES = "SELECT thread_id, ts_headline('simple', body, to_tsquery('simple', %s), %s) FROM threads_message_text WHERE ({where}) AND thread_id IN ({ids})"
WORD = re.compile(r"[^\W_]+")
PHRASE = re.compile(r'"([^"]*)"')


@dataclass(frozen=True)
class TextQuery:
    """What a person typed, split into quoted phrases and the remaining words (letters and digits only)."""

    phrases: tuple[str, ...]
    words: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> TextQuery:
        phrases = tuple(p for p in (" ".join(WORD.findall(raw)) for raw in PHRASE.findall(text)) if p)
        return cls(phrases, tuple(WORD.findall(PHRASE.sub(" ", text))))

    def __bool__(self) -> bool:
        return bool(self.phrases or self.words)

    def fts5(self) -> str:
        """Every phrase and every word (by prefix) must occur: FTS5's query syntax, from safe tokens only."""
        return " AND ".join([*(f'"{p}"' for p in self.phrases), *(f'"{w}"*' for w in self.words)])

    def postgres(self) -> tuple[str, list[str]]:
        """Return a WHERE clause and its parameters: words by tsvector prefix, phrases by (trigram) ILIKE."""
        clauses: list[str] = []
        params: list[str] = []
        if self.words:
            clauses.append("body_tsv @@ to_tsquery('simple', %s)")
            params.append(" & ".join(f"{w}:*" for w in self.words))
        for phrase in self.phrases:
            clauses.append("body ILIKE %s")
            params.append(f"%{phrase}%")
        return " AND ".join(clauses), params


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else []
    return " ".join(b if isinstance(b, str) else str(b.get("text") or "") for b in blocks if isinstance(b, str | dict))


def message_text(messages: list[Any]) -> str:
    """Return serialized messages' searchable text, a line per message, its newest ``MESSAGE_INDEX_MAX_CHARS``.

    Images and other non-text blocks are left out; tool calls count by name and arguments.
    """
    lines = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        calls = [
            f"{c.get('name')} {json.dumps(c.get('args'), ensure_ascii=False, default=str)}"
            for c in message.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        parts = [f"{message.get('type')}:", _content_text(message.get("content")).strip(), *calls]
        lines.append(" ".join(part for part in parts if part))
    return "\n".join(lines)[-MESSAGE_INDEX_MAX_CHARS:]


def message_index_available() -> bool:
    """Whether messages are indexed for content search: not when encryption may seal the messages (the
    index would be a plaintext copy of every conversation)."""
    return connection.vendor in ("sqlite", "postgresql") and keeps_plain_copies()


def thread_message_index_write(*, thread_id: str, values: dict[str, Any]) -> None:
    """Rewrite the thread's row of the message index from its head's serialized values (a run's final values)."""
    if not message_index_available() or not isinstance(values.get("messages"), list):
        return
    with connection.cursor() as cursor:
        # A reply no backend can store (NUL, a lone surrogate) must not fail the run's finalization.
        cursor.execute(MESSAGE_TEXT_UPSERT, [thread_id, storable_text(message_text(values["messages"]))])


def thread_message_index_refresh(*, thread_id: str) -> bool:
    """Read the thread's head and rewrite its index row (a state update, a backfill); False if unreadable here."""
    thread = ThreadMeta.objects.filter(pk=thread_id).only("thread_id", "assistant_id").first()
    if thread is None:
        return False
    try:
        snapshot = state_accessor(thread.assistant_id).get(thread_id)
    except (CheckpointModeMismatchError, CheckpointModeReconfigurationError, UnknownGraphError):
        return False
    thread_message_index_write(thread_id=thread_id, values=serialize_channel_values(snapshot.values or {}))
    return True


def message_matches(query: TextQuery) -> RawSQL | None:
    """Return a subquery of the ids of threads whose indexed messages match, None without a query or an index."""
    if not query or not message_index_available():
        return None
    if connection.vendor == "sqlite":
        return RawSQL(MESSAGE_MATCH_SQLITE, [query.fts5()])
    where, params = query.postgres()
    return RawSQL(MESSAGE_MATCH_POSTGRES.format(where=where), params)


def message_snippets(query: TextQuery, thread_ids: list[str]) -> dict[str, str]:
    """Return the matching passage (match in [brackets]) of each of ``thread_ids`` whose messages match."""
    if not query or not thread_ids or not message_index_available():
        return {}
    ids = ", ".join(["%s"] * len(thread_ids))
    params: list[str | int]
    if connection.vendor == "sqlite":
        sql, params = MESSAGE_SNIPPETS_SQLITE.format(ids=ids), [SNIPPET_WORDS, query.fts5(), *thread_ids]
    else:
        where, where_params = query.postgres()
        # ts_headline highlights words: a phrase-only query highlights its phrases' words.
        words = " & ".join(f"{w}:*" for w in (query.words or WORD.findall(" ".join(query.phrases))))
        options = f"StartSel=[, StopSel=], MaxFragments=1, MaxWords={SNIPPET_WORDS}, MinWords=3"
        sql = MESSAGE_SNIPPETS_POSTGRES.format(where=where, ids=ids)
        params = [words, options, *where_params, *thread_ids]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


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
