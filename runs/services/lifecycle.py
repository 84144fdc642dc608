"""Run lifecycle writes: claim, lease renewal, finalization, orphan recovery.

Every transition is a conditional UPDATE on the run row, so a late or
duplicate writer (a process that lost its lease, a second finalizer) changes
nothing: ``success`` and ``error`` are never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from runs.models import Run, RunStatus
from runs.services.admission import promote_next_queued
from threads.models import ThreadMeta, ThreadStatus

ORPHAN_MESSAGE = "Server restarted before this run reached a durable final state."
SHUTDOWN_MESSAGE = "Server shut down before this run finished."


def _lease(lease_seconds: int):
    return timezone.now() + timedelta(seconds=lease_seconds)


def _mark_busy(thread_id: str) -> None:
    ThreadMeta.objects.filter(pk=thread_id).update(status=ThreadStatus.BUSY, updated_at=timezone.now())


@transaction.atomic
def run_claim(*, run_id: str, worker_id: str, lease_seconds: int) -> Run | None:
    """Move one pending run to running for ``worker_id``; None if another process won."""
    now = timezone.now()
    claimed = Run.objects.filter(pk=run_id, status=RunStatus.PENDING, cancel_action="").update(
        status=RunStatus.RUNNING,
        worker_id=worker_id,
        lease_expires_at=_lease(lease_seconds),
        started_at=now,
        updated_at=now,
    )
    if not claimed:
        return None
    run = Run.objects.select_related("thread").get(pk=run_id)
    _mark_busy(run.thread_id)
    return run


def run_claim_pending(*, worker_id: str, limit: int, lease_seconds: int) -> list[str]:
    """Claim up to ``limit`` pending runs, oldest first.

    On PostgreSQL ``FOR UPDATE SKIP LOCKED`` lets several workers claim at
    once without blocking on each other's rows; SQLite serialises writers.
    """
    with transaction.atomic():
        rows = Run.objects.filter(status=RunStatus.PENDING, cancel_action="").order_by("created_at")
        if connection.features.has_select_for_update_skip_locked:
            rows = rows.select_for_update(skip_locked=True)
        candidates = list(rows.values_list("run_id", flat=True)[:limit])
    return [
        run_id for run_id in candidates if run_claim(run_id=run_id, worker_id=worker_id, lease_seconds=lease_seconds)
    ]


@dataclass
class Outcome:
    """How a run ended, as the executor saw it."""

    status: str
    error: str = ""
    error_name: str = ""
    pending_interrupt: bool = False
    title: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)


@transaction.atomic
def run_finalize(*, run_id: str, worker_id: str, outcome: Outcome) -> tuple[bool, str | None]:
    """Record the outcome if this worker still owns the running run.

    Returns (finalized, promoted queued run id). The thread's status follows:
    ``interrupted`` for a pending interrupt, ``error`` for a failure, else ``idle``.
    """
    now = timezone.now()
    done = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, worker_id=worker_id).update(
        status=outcome.status,
        error=outcome.error,
        finished_at=now,
        updated_at=now,
        lease_expires_at=None,
        **outcome.usage,
    )
    if not done:
        return False, None
    thread_id = Run.objects.filter(pk=run_id).values_list("thread_id", flat=True).get()
    status = ThreadStatus.IDLE
    if outcome.status == RunStatus.ERROR and outcome.error != "Rolled back by user":
        status = ThreadStatus.ERROR
    elif outcome.pending_interrupt:
        status = ThreadStatus.INTERRUPTED
    fields: dict[str, Any] = {"status": status, "updated_at": now, "state_updated_at": now}
    if outcome.title:
        fields["display_name"] = outcome.title[:256]
    ThreadMeta.objects.filter(pk=thread_id).update(**fields)
    return True, promote_next_queued(thread_id=thread_id)


def runs_renew_leases(*, worker_id: str, run_ids: list[str], lease_seconds: int) -> dict[str, str]:
    """Extend this worker's leases; return ``{run_id: cancel_action}`` for requested cancels.

    The renewal doubles as the durable cancel poll, so a cancel whose
    channel-layer signal was lost still lands within one renewal period.
    """
    if not run_ids:
        return {}
    Run.objects.filter(pk__in=run_ids, worker_id=worker_id, status=RunStatus.RUNNING).update(
        lease_expires_at=_lease(lease_seconds)
    )
    return dict(
        Run.objects.filter(pk__in=run_ids, worker_id=worker_id)
        .exclude(cancel_action="")
        .values_list("run_id", "cancel_action")
    )


@transaction.atomic
def run_fail_orphan(*, run_id: str, message: str = ORPHAN_MESSAGE) -> str | None:
    """Fail a running run that no live process owns; return the promoted run id."""
    now = timezone.now()
    failed = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING).update(
        status=RunStatus.ERROR,
        error=message,
        stop_reason="orphan_recovered",
        finished_at=now,
        updated_at=now,
        lease_expires_at=None,
    )
    if not failed:
        return None
    thread_id = Run.objects.filter(pk=run_id).values_list("thread_id", flat=True).get()
    latest = Run.objects.filter(thread_id=thread_id).order_by("-created_at").values_list("run_id", flat=True).first()
    if latest == run_id:
        ThreadMeta.objects.filter(pk=thread_id).update(status=ThreadStatus.ERROR, updated_at=now)
    else:
        ThreadMeta.objects.filter(pk=thread_id, status=ThreadStatus.BUSY).update(
            status=ThreadStatus.IDLE, updated_at=now
        )
    return promote_next_queued(thread_id=thread_id)


def running_runs_not_owned_by(*, worker_id: str) -> list[tuple[str, str, Any]]:
    """Return (run_id, worker_id, lease_expires_at) of running runs of other workers."""
    return list(
        Run.objects.filter(status=RunStatus.RUNNING)
        .exclude(worker_id=worker_id)
        .values_list("run_id", "worker_id", "lease_expires_at")
    )


def threads_with_stalled_queue() -> list[str]:
    """Return threads whose queue waits although nothing is active (a lost promotion)."""
    queued = set(Run.objects.filter(status=RunStatus.QUEUED, cancel_action="").values_list("thread_id", flat=True))
    active = set(
        Run.objects.filter(thread_id__in=queued, status__in=(RunStatus.PENDING, RunStatus.RUNNING)).values_list(
            "thread_id", flat=True
        )
    )
    return sorted(queued - active)


@transaction.atomic
def promote_stalled(*, thread_id: str) -> str | None:
    return promote_next_queued(thread_id=thread_id)
