"""Thread TTLs: the policy a client sets, the clock that activity restarts, and the sweep.

A thread with a TTL expires ``ttl`` after its last activity: its creation or
the PATCH that set the TTL, the start and the end of each of its runs, and
each state update (``threads.services`` restarts the clock in the same
UPDATE that records the activity). The run workers sweep expired threads on
every poll (``threads_sweep_expired``): ``delete`` deletes the thread as
``DELETE /threads/{id}`` does, ``keep_latest`` prunes its history down to
what the head and other records still need (``threads.retention``) and
leaves it to expire again after its next activity.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Value
from django.utils import timezone

from checkpoints.retention import CheckpointProtectedError, RetentionConflictError
from checkpoints.storage import UnsupportedBackendError, require_table_backend
from core.errors import Conflict, Invalid, NotFound
from runs.models import UNFINISHED_STATUSES
from threads.models import ThreadMeta, TTLStrategy

logger = logging.getLogger(__name__)

# A TTL must land before year 9999 from any "now": 100 years is plenty.
TTL_MAX_MINUTES = 100 * 365 * 24 * 60
TTL_SHAPE = 'must be an object {"ttl": <minutes>, "strategy": "delete" | "keep_latest"}'
# How long a sweeper holds a thread it claimed. A process that dies mid-way
# leaves the claim to lapse: another sweep retries the thread after this.
SWEEP_CLAIM = timedelta(minutes=5)


@dataclass(frozen=True)
class TTLPolicy:
    """What a client asked for: expire ``minutes`` after the last activity, then apply ``strategy``."""

    strategy: str
    minutes: float

    @property
    def duration(self) -> timedelta:
        return timedelta(minutes=self.minutes)


def ttl_policy_from(data: Any) -> TTLPolicy:
    """Return the policy in a request's ``ttl`` object; raise ``Invalid`` on anything else.

    The shape is the Platform's (the SDKs turn a bare number into
    ``{"ttl": n, "strategy": "delete"}``): minutes, fractions allowed.
    """
    if not isinstance(data, dict):
        raise Invalid("ttl", TTL_SHAPE)
    if unknown := sorted(set(data) - {"ttl", "strategy"}):
        raise Invalid("ttl", f"unknown key(s) {', '.join(map(repr, unknown))}; {TTL_SHAPE}")
    strategy = data.get("strategy")
    if strategy is None:
        strategy = TTLStrategy.DELETE
    if strategy not in TTLStrategy.values:
        raise Invalid("ttl.strategy", f"must be one of {', '.join(TTLStrategy.values)}, not {strategy!r}")
    minutes = data.get("ttl")
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)):
        raise Invalid("ttl.ttl", "must be a number of minutes")
    if not math.isfinite(minutes) or not 0 < minutes <= TTL_MAX_MINUTES:
        raise Invalid("ttl.ttl", f"must be more than 0 and at most {TTL_MAX_MINUTES} minutes (100 years)")
    return TTLPolicy(str(strategy), float(minutes))


def ttl_policy_check_supported(policy: TTLPolicy) -> None:
    """Refuse ``keep_latest`` where retention cannot run (the memory backend has no tables to prune)."""
    if policy.strategy == TTLStrategy.KEEP_LATEST:
        try:
            require_table_backend()
        except UnsupportedBackendError:
            raise Invalid("ttl.strategy", "keep_latest needs the sqlite or postgres backend") from None


def ttl_fields(policy: TTLPolicy, *, now: datetime) -> dict[str, Any]:
    """Return the ThreadMeta fields that set ``policy`` with its clock started at ``now``."""
    return {"ttl_strategy": policy.strategy, "ttl": policy.duration, "expires_at": now + policy.duration}


def ttl_restarted(now: datetime) -> ExpressionWrapper:
    """Return ``expires_at`` counted again from ``now``, for an UPDATE (NULL for a thread without a TTL)."""
    return ExpressionWrapper(Value(now, output_field=DateTimeField()) + F("ttl"), output_field=DateTimeField())


def ttl_info(thread: ThreadMeta) -> dict[str, Any] | None:
    """Return the Platform's ``ttl`` object of a thread (``GET /threads/{id}?include=ttl``); None without one."""
    if thread.ttl is None:
        return None
    return {
        "strategy": thread.ttl_strategy,
        "ttl_minutes": thread.ttl.total_seconds() / 60,
        "expires_at": thread.expires_at.isoformat() if thread.expires_at else None,
    }


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
    from threads.retention import KEEP_LATEST_POLICY, thread_prune
    from threads.services import thread_delete

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
