"""Run lifecycle writes: claim, lease renewal, finalization, orphan recovery.

Every transition is a conditional UPDATE on the run row, so a late or
duplicate writer (a process that lost its lease, a second finalizer) changes
nothing: ``success`` and ``error`` are never overwritten.

Lock order, everywhere a transaction locks both: the thread row first, then
run rows. Admission of a waiting run locks the thread to queue behind other
admissions; claim, finalize, cancel and orphan recovery used to lock the run
first and the thread second, and PostgreSQL answered the crossing pairs with
``deadlock detected`` (9 in a 5-minute soak).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Min, Q
from django.utils import timezone

from core.text import storable
from runs.models import ORPHAN_MESSAGE, CancelAction, Run, RunStatus
from runs.services.admission import ROLLED_BACK, promote_next_queued
from runs.services.events import run_events_append
from runs.services.webhooks import webhook_after_commit
from threads.search import thread_message_index_write
from threads.selectors import lock_thread
from threads.services import thread_mark_busy, thread_settle
from threads.stream_log import PendingEvent, thread_stream_append, thread_stream_end_orphan, thread_stream_prune

SHUTDOWN_MESSAGE = "Server shut down before this run finished."


def _lease(lease_seconds: int):
    return timezone.now() + timedelta(seconds=lease_seconds)


def _thread_of(run_id: str) -> str | None:
    return Run.objects.filter(pk=run_id).values_list("thread_id", flat=True).first()


def _due(now) -> Q:
    """Runs whose delayed start (``after_seconds``) has come, or that have none."""
    return Q(not_before__isnull=True) | Q(not_before__lte=now)


def run_claim(
    *, run_id: str, worker_id: str, lease_seconds: int, thread_id: str | None = None, admitted: Run | None = None
) -> Run | None:
    """Move one pending run to running for ``worker_id``; None if another process won (or it is not due).

    ``thread_id``, when the caller has it, spares the lookup the lock order
    needs; ``admitted``, the row as this process admitted it, spares reading
    it back (nothing but the claim changes a pending run's columns).
    """
    thread_id = thread_id or _thread_of(run_id)
    if thread_id is None:
        return None
    with transaction.atomic():
        # Marking the thread busy takes its row lock, as the lock order wants, in the same statement.
        if not thread_mark_busy(thread_id=thread_id):
            return None
        now = timezone.now()
        claimed = {
            "status": RunStatus.RUNNING,
            "worker_id": worker_id,
            "lease_expires_at": _lease(lease_seconds),
            "started_at": now,
            "updated_at": now,
        }
        if not Run.objects.filter(_due(now), pk=run_id, status=RunStatus.PENDING, cancel_action="").update(**claimed):
            transaction.set_rollback(True)  # the thread stays as it was
            return None
    if admitted is None:
        return Run.objects.get(pk=run_id)
    run = copy.copy(admitted)  # the caller's object answers its own request: leave it as it was
    for name, value in claimed.items():
        setattr(run, name, value)
    return run


def run_claim_pending(*, worker_id: str, limit: int, lease_seconds: int) -> list[str]:
    """Claim up to ``limit`` pending runs that are due, oldest first.

    The conditional UPDATE in ``run_claim`` decides each race: of two workers
    that picked the same candidate, one updates the row and the other updates
    nothing and moves on. (No ``SKIP LOCKED`` select: holding run rows while
    locking their threads would invert the lock order.)
    """
    candidates = list(
        Run.objects.filter(_due(timezone.now()), status=RunStatus.PENDING, cancel_action="")
        .order_by("created_at")
        .values_list("run_id", "thread_id")[:limit]
    )
    return [
        run_id
        for run_id, thread_id in candidates
        if run_claim(run_id=run_id, worker_id=worker_id, lease_seconds=lease_seconds, thread_id=thread_id)
    ]


def next_delayed_start():
    """Return the earliest future start of a pending delayed run (None: none waits), for the claim loop's timer."""
    return Run.objects.filter(status=RunStatus.PENDING, cancel_action="", not_before__gt=timezone.now()).aggregate(
        due=Min("not_before")
    )["due"]


@dataclass
class Outcome:
    """How a run ended, as the executor saw it."""

    status: str
    error: str = ""
    error_name: str = ""
    pending_interrupt: bool = False
    title: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    # A requested rollback was carried out (or found impossible and said so).
    rollback_settled: bool = False

    @property
    def rolled_back(self) -> bool:
        return self.status == RunStatus.ERROR and self.error == ROLLED_BACK


@dataclass(frozen=True)
class Finalization:
    """What ``run_finalize`` did: recorded the outcome, or found a rollback to carry out first."""

    finalized: bool
    promoted_run_id: str | None = None
    rollback_requested: bool = False
    # The thread-log events written with the outcome, to publish after commit.
    stream_envelopes: tuple[dict, ...] = ()


def run_finalize(
    *,
    run_id: str,
    worker_id: str,
    outcome: Outcome,
    events: Sequence[dict[str, Any]] = (),
    thread_id: str | None = None,
    stream_events: Sequence[PendingEvent] = (),
    stream_retry: bool = False,
    final_values: dict[str, Any] | None = None,
) -> Finalization:
    """Record the outcome and the run's last events in one transaction, if this worker still owns the run.

    A rollback requested while the run was finishing wins over its outcome:
    nothing is written and the caller restores the pre-run state, then calls
    again with the rolled-back outcome. So a run never ends ``success`` with
    a rollback on its row, and ``run.end`` is never persisted for a run that
    is still ``running``. The thread's status follows the outcome. The run's
    webhook (with ``final_values``) is sent after the commit.
    """
    thread_id = thread_id or _thread_of(run_id)
    if thread_id is None:
        return Finalization(False)
    with transaction.atomic():
        now = timezone.now()  # the run's end: its finished_at, and where the thread's TTL starts over
        # Settling the thread takes its row lock (the lock order's first step) in the same
        # statement; the rare refusals below roll it back with everything else.
        settled = thread_settle(
            thread_id=thread_id,
            failed=outcome.status == RunStatus.ERROR and not outcome.rolled_back,
            interrupted=outcome.pending_interrupt,
            title=storable(outcome.title),
            now=now,
        )
        if not settled:
            return Finalization(False)
        row = (
            Run.objects.select_for_update()
            .filter(pk=run_id, status=RunStatus.RUNNING, worker_id=worker_id)
            .values("cancel_action", "webhook")
            .first()
        )
        if row is None:
            transaction.set_rollback(True)
            return Finalization(False)
        if row["cancel_action"] == CancelAction.ROLLBACK and not outcome.rollback_settled:
            transaction.set_rollback(True)
            return Finalization(False, rollback_requested=True)
        run_events_append(thread_id=thread_id, run_id=run_id, events=list(events), locked=True)
        # The run's last protocol events (its terminal lifecycle among them)
        # commit with the outcome: a follower never sees "completed" for a
        # run whose row could still end otherwise.
        # ``stream_retry``: the log writer's last write failed, perhaps after its commit.
        envelopes = thread_stream_append(
            thread_id=thread_id, run_id=run_id, events=stream_events, locked=True, retry=stream_retry
        )
        if envelopes:
            thread_stream_prune(thread_id=thread_id, last_seq=envelopes[-1]["seq"])
        Run.objects.filter(pk=run_id).update(
            status=outcome.status,
            error=storable(outcome.error),
            finished_at=now,
            updated_at=now,
            lease_expires_at=None,
            **storable(outcome.usage),
        )
        webhook_after_commit(run_id=run_id, url=row["webhook"], values=final_values)
        if final_values:  # the console's full-text search follows the head, read once already
            thread_message_index_write(thread_id=thread_id, values=final_values)
        # The run just ended was the thread's one active run (its row was
        # running, under the thread lock): the thread is free.
        promoted = promote_next_queued(thread_id=thread_id, known_free=True)
        return Finalization(True, promoted, stream_envelopes=tuple(envelopes))


def run_finalize_unrecordable(
    *, run_id: str, worker_id: str, reason: str, thread_id: str, stream_events: Sequence[PendingEvent] = ()
) -> Finalization:
    """End the run ``error`` with ``reason`` when its real outcome could not be stored."""
    outcome = Outcome(status=RunStatus.ERROR, error=reason, error_name="UnrecordableOutcome", rollback_settled=True)
    return run_finalize(
        run_id=run_id, worker_id=worker_id, outcome=outcome, thread_id=thread_id, stream_events=stream_events
    )


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


def run_fail_orphan(*, run_id: str, message: str = ORPHAN_MESSAGE, thread_id: str | None = None) -> str | None:
    """Fail a running run that no live task owns; return the promoted run id.

    A run whose owner was asked to roll it back ends as rolled back (the
    caller restored the pre-run state first), not as orphaned.
    """
    thread_id = thread_id or _thread_of(run_id)
    if thread_id is None:
        return None
    with transaction.atomic():
        lock_thread(thread_id)
        row = (
            Run.objects.select_for_update()
            .filter(pk=run_id, status=RunStatus.RUNNING)
            .values("cancel_action", "assistant_id", "webhook")
            .first()
        )
        if row is None:
            return None
        rolled_back = row["cancel_action"] == CancelAction.ROLLBACK
        thread_stream_end_orphan(
            thread_id=thread_id,
            run_id=run_id,
            graph_name=row["assistant_id"],
            error=ROLLED_BACK if rolled_back else message,
        )
        now = timezone.now()
        Run.objects.filter(pk=run_id).update(
            status=RunStatus.ERROR,
            error=ROLLED_BACK if rolled_back else message,
            stop_reason="orphan_rolled_back" if rolled_back else "orphan_recovered",
            finished_at=now,
            updated_at=now,
            lease_expires_at=None,
        )
        latest = (
            Run.objects.filter(thread_id=thread_id).order_by("-created_at").values_list("run_id", flat=True).first()
        )
        thread_settle(
            thread_id=thread_id,
            failed=latest == run_id and not rolled_back,
            only_if_busy=latest != run_id,
            state_changed=rolled_back,
        )
        webhook_after_commit(run_id=run_id, url=row["webhook"])
        return promote_next_queued(thread_id=thread_id)


def running_runs() -> list[Mapping[str, Any]]:
    """Return every running run's id, thread, graph, owner, lease, start and rollback request."""
    return list(
        Run.objects.filter(status=RunStatus.RUNNING).values(
            "run_id", "thread_id", "assistant_id", "worker_id", "lease_expires_at", "started_at", "cancel_action"
        )
    )


def run_rollback_point(*, run_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Return the rollback point kept on the run row (None: never captured) and its encryption context."""
    row = Run.objects.filter(pk=run_id).values_list("rollback_point", "encryption_context").first()
    return row if row is not None else (None, None)


def run_record_rollback_point(*, run_id: str, point: dict[str, Any]) -> None:
    """Keep the run's rollback point on its row, so any process can roll it back after a crash."""
    Run.objects.filter(pk=run_id, status=RunStatus.RUNNING).update(rollback_point=point)


def threads_with_stalled_queue() -> list[str]:
    """Return threads whose queue waits although nothing is active (a lost promotion)."""
    queued = set(Run.objects.filter(status=RunStatus.QUEUED, cancel_action="").values_list("thread_id", flat=True))
    active = set(
        Run.objects.filter(thread_id__in=queued, status__in=(RunStatus.PENDING, RunStatus.RUNNING)).values_list(
            "thread_id", flat=True
        )
    )
    return sorted(queued - active)


def promote_stalled(*, thread_id: str) -> str | None:
    with transaction.atomic():
        lock_thread(thread_id)
        return promote_next_queued(thread_id=thread_id)
