"""Run event persistence: the audit feed, with ``seq`` strictly increasing per thread."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core.custom_encryption import seals_json
from core.text import json_column
from runs.models import RunEvent
from threads.models import ThreadMeta

# DeerFlow's catalog: event type -> category.
EVENT_CATEGORIES = {
    "run.start": "trace",
    "run.end": "outputs",
    "run.error": "error",
    "llm.human.input": "message",
    "llm.ai.response": "message",
    "llm.tool.result": "message",
    "llm.error": "trace",
    # A run's webhook delivery, after the run ended (runs.execution.webhooks).
    "webhook.sent": "webhook",
    "webhook.failed": "webhook",
}
_APPEND_ATTEMPTS = 5
_TABLE = RunEvent._meta.db_table
# langgraph.json's encryption.path: the raw insert stores what the handlers sealed, as a save would.
_CONTENT = RunEvent._meta.get_field("content")
_LAST_SEQ = f"SELECT MAX(seq) FROM {_TABLE} WHERE thread_id = %s"
_INSERT = (
    f"INSERT INTO {_TABLE} (thread_id, run_id, event_type, category, content, metadata, seq, created_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)


def run_events_append(*, thread_id: str, run_id: str, events: list[dict[str, Any]], locked: bool = False) -> int:
    """Append events in order, numbering them after the thread's last ``seq``.

    An event's ``created_at`` is when it happened (the journal stamps each one
    as it records it, and writes them in batches); an event without one
    happened now. The run page's offsets and waterfall are read from these.

    ``locked``: the caller's transaction already holds the thread's row lock
    (``lock_thread``) and saw the thread, so it is not locked and checked again.

    The thread row lock serialises writers of one thread on PostgreSQL (SQLite
    serialises all writers), and the unique ``(thread, seq)`` constraint
    catches anything that slips through: the batch is then renumbered (a
    caller holding the lock gets the error instead: its transaction is spent).
    Returns how many were written (0 if the thread was deleted meanwhile).
    """
    if not events:
        return 0
    now = timezone.now()
    for attempt in range(_APPEND_ATTEMPTS):
        try:
            # Under the caller's lock nobody else numbers this thread's events:
            # no savepoint to retry from (one round trip each way on PostgreSQL).
            with transaction.atomic(savepoint=not locked):
                if not locked and not ThreadMeta.objects.select_for_update().filter(pk=thread_id).exists():
                    return 0
                with connection.cursor() as cursor:
                    cursor.execute(_LAST_SEQ, [thread_id])
                    last = cursor.fetchone()[0] or 0
                    # Raw, as the thread log's append (threads.stream_log).
                    cursor.executemany(
                        _INSERT, [_row(thread_id, run_id, last + i, e, now) for i, e in enumerate(events, 1)]
                    )
                return len(events)
        except IntegrityError:
            if locked or attempt == _APPEND_ATTEMPTS - 1:
                raise
    return 0


def _row(thread_id: str, run_id: str, seq: int, event: dict[str, Any], now: datetime) -> tuple:
    event_type = event["event_type"]
    category = EVENT_CATEGORIES.get(event_type, event.get("category", "trace"))
    content, metadata = event.get("content"), event.get("metadata") or {}
    if category == "trace":
        content, metadata = trace_truncated(
            content, metadata, limit=settings.DEERFLOW_CONFIG.run_events.max_trace_content
        )
    return (
        thread_id,
        run_id,
        event_type,
        category,
        json_column(_CONTENT.sealed(content) if seals_json() else content),
        json_column(metadata),
        seq,
        connection.ops.adapt_datetimefield_value(event.get("created_at") or now),
    )


def trace_truncated(content: Any, metadata: dict[str, Any], *, limit: int) -> tuple[Any, dict[str, Any]]:
    """A ``trace`` event's content cut to ``limit`` UTF-8 bytes (config.yaml ``run_events.max_trace_content``).

    As DeerFlow's event store does: a longer content keeps its first
    ``limit`` bytes (never half a character) and the metadata records
    ``content_truncated`` and ``original_byte_length``. A structured content
    is measured, and cut, as its JSON text. ``0`` keeps everything.
    """
    if not limit or content is None:
        return content, metadata
    text = content if isinstance(content, str) else json_column(content) or ""
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return content, metadata
    cut = encoded[:limit].decode("utf-8", "ignore")  # a character split at the limit is dropped whole
    return cut, {**metadata, "content_truncated": True, "original_byte_length": len(encoded)}
