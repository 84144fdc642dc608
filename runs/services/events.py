"""Run event persistence: the audit feed, with ``seq`` strictly increasing per thread."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

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


def run_events_append(*, thread_id: str, run_id: str, events: list[dict[str, Any]], locked: bool = False) -> int:
    """Append events in order, numbering them after the thread's last ``seq``.

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
    for attempt in range(_APPEND_ATTEMPTS):
        try:
            # Under the caller's lock nobody else numbers this thread's events:
            # no savepoint to retry from (one round trip each way on PostgreSQL).
            with transaction.atomic(savepoint=not locked):
                if not locked and not ThreadMeta.objects.select_for_update().filter(pk=thread_id).exists():
                    return 0
                last = RunEvent.objects.filter(thread_id=thread_id).aggregate(m=Max("seq"))["m"] or 0
                RunEvent.objects.bulk_create(
                    RunEvent(
                        thread_id=thread_id,
                        run_id=run_id,
                        event_type=e["event_type"],
                        category=EVENT_CATEGORIES.get(e["event_type"], e.get("category", "trace")),
                        content=e.get("content"),
                        metadata=e.get("metadata") or {},
                        seq=last + index,
                    )
                    for index, e in enumerate(events, start=1)
                )
                return len(events)
        except IntegrityError:
            if locked or attempt == _APPEND_ATTEMPTS - 1:
                raise
    return 0
