"""The TTL sweep: apply each expired thread's strategy, deleting or pruning it through the thread services.

It sits above the services it calls (``threads.services``,
``threads.retention``); the policy and the clock it reads are ``threads.ttl``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from checkpoints.retention import CheckpointProtectedError, RetentionConflictError
from core.errors import Conflict, NotFound
from threads.models import UNFINISHED_STATUSES, ThreadMeta, TTLStrategy
from threads.retention import KEEP_LATEST_POLICY, thread_prune
from threads.services import thread_delete

logger = logging.getLogger(__name__)

# How long a sweeper holds a thread it claimed. A process that dies mid-way
# leaves the claim to lapse: another sweep retries the thread after this.
SWEEP_CLAIM = timedelta(minutes=5)


# -- the sweep -----------------------------------------------------------------------


@dataclass
class SweepReport:
    """What one sweep did: threads deleted, threads pruned, threads left alone (someone else had them, or activity)."""

    deleted: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _expired_candidates(*, now: datetime, limit: int) -> list[str]:
    """Return up to ``limit`` expired threads, oldest expiry first, that no unfinished run holds."""
    return list(
        ThreadMeta.objects.filter(expires_at__lte=now, deleting_at__isnull=True)
        .exclude(runs__status__in=UNFINISHED_STATUSES)
        .order_by("expires_at")
        .values_list("thread_id", flat=True)[:limit]
    )


def _claim(candidates: list[str], *, now: datetime, claim: datetime) -> list[str]:
    """Move the still-expired candidates' expiry to ``claim``; return those this process won.

    Several processes sweep at once and exactly one wins each thread. On
    PostgreSQL the rows are locked with SKIP LOCKED, so a sweeper never waits
    on a row another sweeper (or a run admission) holds; on SQLite, whose
    writes are serialised anyway, the UPDATE's own condition decides. Any
    later activity overwrites the claim, which is how the delete or prune
    that follows knows the thread was used meanwhile.
    """
    if connection.features.has_select_for_update_skip_locked:
        with transaction.atomic():
            won = list(
                ThreadMeta.objects.select_for_update(skip_locked=True)
                .filter(pk__in=candidates, expires_at__lte=now)
                .values_list("thread_id", flat=True)
            )
            ThreadMeta.objects.filter(pk__in=won).update(expires_at=claim)
        return [thread_id for thread_id in candidates if thread_id in won]
    return [
        thread_id
        for thread_id in candidates
        if ThreadMeta.objects.filter(pk=thread_id, expires_at__lte=now).update(expires_at=claim)
    ]


def _expire(thread: ThreadMeta, *, claim: datetime) -> str:
    """Apply the thread's strategy unless it was active since the claim; return what was done."""
    if thread.ttl_strategy == TTLStrategy.KEEP_LATEST:
        thread_prune(thread=thread, policy=KEEP_LATEST_POLICY, expired_at=claim)
        # Pruned: nothing to do until the thread is used again, which restarts the clock.
        ThreadMeta.objects.filter(pk=thread.pk, expires_at=claim).update(expires_at=None)
        return "pruned"
    thread_delete(thread=thread, expired_at=claim)
    return "deleted"


def threads_sweep_expired(*, limit: int | None = None, now: datetime | None = None) -> SweepReport:
    """Apply the TTL strategy of up to ``limit`` expired threads (default ``threads.ttl_sweep_limit``).

    Called on every poll of every run worker. A thread with an unfinished
    run is never touched (the run's start or end restarts its clock anyway);
    one used between the claim and the delete or prune is left as is. A
    failure is logged and the thread retried once its claim lapses.
    """
    now = now or timezone.now()
    limit = settings.DEERFLOW_CONFIG.threads.ttl_sweep_limit if limit is None else limit
    report = SweepReport()
    candidates = _expired_candidates(now=now, limit=limit)
    if not candidates:
        return report
    claim = now + SWEEP_CLAIM
    threads = ThreadMeta.objects.in_bulk(_claim(candidates, now=now, claim=claim))
    for thread_id, thread in threads.items():
        try:
            outcome = _expire(thread, claim=claim)
        except (Conflict, NotFound, CheckpointProtectedError, RetentionConflictError) as exc:
            logger.info("TTL sweep left thread %s alone: %s", thread_id, exc)
            report.skipped.append(thread_id)
            continue
        except Exception:
            logger.exception("TTL sweep of thread %s failed; retried once its claim lapses", thread_id)
            report.skipped.append(thread_id)
            continue
        logger.info("TTL sweep %s thread %s (%s)", outcome, thread_id, thread.ttl_strategy)
        (report.pruned if outcome == "pruned" else report.deleted).append(thread_id)
    return report
