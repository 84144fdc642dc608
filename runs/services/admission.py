"""Run admission and cancel requests: durable, decided by the database.

At most one run per thread is active (pending or running): the partial unique
index ``uq_runs_thread_active`` arbitrates, so two processes racing to admit
cannot both win. Runs that must wait (``enqueue``, or the successor of an
``interrupt``/``rollback``) are ``queued``, outside the index; ``reject``
still sees them. Cancel requests are written on the run row (the first action
wins) before any process is signalled.

Lock order (see ``runs.services.lifecycle``): the thread row, then run rows.
A thread being deleted admits nothing: ``thread_delete`` marks it under the
same thread lock, so a run is either admitted before (and the delete is
refused, having written nothing) or refused after.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from checkpoints.accessor import state_accessor
from checkpoints.errors import GraphLoadError
from checkpoints.graphs import load_graph, registered_graph
from checkpoints.modes import process_mode
from core.custom_encryption import context_to_store
from core.errors import Conflict, NotFound, ThreadNotFound
from runs.models import Assistant, CancelAction, Run, RunStatus
from runs.services.webhooks import webhook_after_commit
from threads.models import ACTIVE_STATUSES, UNFINISHED_STATUSES, ThreadMeta
from threads.selectors import lock_thread, lock_thread_to_admit, thread_has_unfinished_run
from threads.services import thread_bind_graph

REJECT_MESSAGE = "Thread is already running a task. Wait for it to finish or choose a different multitask strategy."
ROLLED_BACK = "Rolled back by user"
CANCELLED_BEFORE_START = "Cancelled before it started"
# How often admission retries after losing an index race to another process.
_ADMISSION_ATTEMPTS = 3
# Held until the admission commits, so an assistant's delete (FOR UPDATE)
# waits for admissions in flight and then sees their runs. SHARE: admissions
# of one assistant do not queue behind each other.
_HOLD_ASSISTANT_SQL = "SELECT owner_id FROM runs_assistant WHERE assistant_id = %s FOR SHARE"


def new_run_id() -> str:
    """Return a time-ordered run id (UUIDv7, as the LangGraph Platform issues)."""
    from langchain_core.utils.uuid import uuid7

    return str(uuid7())


def _insert(candidate: Run, status: str, after_seconds: float, locked: dict[str, Any]) -> Run:
    """Insert the admitted run (under the thread lock) and bind the thread to its graph.

    ``locked``: the thread row as ``lock_thread_to_admit`` read it. A delayed
    start counts from this moment, the run's ``created_at``.
    """
    _hold_assistant(candidate.kwargs.get("assistant_id"))
    candidate.status = status
    candidate.not_before = timezone.now() + timedelta(seconds=after_seconds) if after_seconds else None
    candidate.save(force_insert=True)
    thread_bind_graph(
        thread_id=candidate.thread_id,
        graph_id=candidate.assistant_id,
        assistant_id=candidate.kwargs.get("assistant_id"),
        bound=locked,
    )
    return candidate


def _hold_assistant(assistant_id: str | None) -> None:
    """Hold the run's assistant row for the admission's transaction; NotFound if a delete removed it.

    SQLite transactions are IMMEDIATE (one writer at a time): reading the row
    is enough there. A system assistant is never deleted: not held.
    """
    if not assistant_id or registered_graph(assistant_id) is not None:  # a system assistant: no query
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_HOLD_ASSISTANT_SQL, [assistant_id])
            found = cursor.fetchone() is not None
    else:
        found = Assistant.objects.filter(pk=assistant_id).exists()
    if not found:
        raise NotFound(f"Assistant {assistant_id} not found")


def _refuse_a_thread_of_another_mode(thread_id: str, graph_id: str) -> None:
    """Refuse a thread the run's graph cannot read here (409) before admitting a run that could only end ``error``.

    Only a full-mode process can meet one (a delta process reads both), and
    the gate is the graph's own: a graph compiled with its own ``DeltaChannel``
    (deepagents') reads its delta threads in either mode. A factory graph is
    built only when its run starts, and a graph that does not load fails its
    run there; the run's own gate decides for both. Read before the thread is
    locked; that gate also catches a thread a delta process wrote to in between.
    """
    if process_mode()[0] != "full" or (spec := registered_graph(graph_id)) is None:
        return
    try:
        if load_graph(spec.import_path).kind == "factory":
            return
    except GraphLoadError:
        return
    state_accessor(graph_id).head_tuple(thread_id)


def run_admit(
    *,
    owner,
    thread: ThreadMeta,
    assistant_id: str,
    strategy: str,
    metadata: dict[str, Any],
    kwargs: dict[str, Any],
    after_seconds: float = 0,
    webhook: str = "",
) -> tuple[Run, list[Run]]:
    """Admit a run under ``strategy``; return (run, runs it superseded and must signal).

    Every strategy locks the thread row first (it refuses a thread being
    deleted). ``reject`` then inserts ``pending`` and the unique index still
    decides a race (409 on loss); the others insert ``pending`` when the
    thread is free and ``queued`` otherwise, superseding what they must.
    ``after_seconds`` delays the start: the run holds its place like any
    pending (or queued) run, and no worker claims it before then.
    """
    _refuse_a_thread_of_another_mode(thread.thread_id, assistant_id)
    candidate = Run(
        run_id=new_run_id(),
        thread=thread,
        owner=owner,
        assistant_id=assistant_id,
        multitask_strategy=strategy,
        metadata=metadata,
        kwargs=kwargs,
        webhook=webhook,
        encryption_context=context_to_store(),
    )
    for _ in range(_ADMISSION_ATTEMPTS):
        try:
            with transaction.atomic():
                if strategy == "reject":
                    return _admit_reject(candidate, after_seconds), []
                return _admit_waiting(candidate, after_seconds)
        except IntegrityError:
            if strategy == "reject":
                raise Conflict(REJECT_MESSAGE) from None
    raise Conflict(REJECT_MESSAGE)


def _admit_reject(candidate: Run, after_seconds: float) -> Run:
    if (locked := lock_thread_to_admit(candidate.thread_id)) is None:
        raise ThreadNotFound(candidate.thread_id)
    if thread_has_unfinished_run(candidate.thread_id):
        raise Conflict(REJECT_MESSAGE)
    return _insert(candidate, RunStatus.PENDING, after_seconds, locked)


def _admit_waiting(candidate: Run, after_seconds: float) -> tuple[Run, list[Run]]:
    thread, strategy = candidate.thread, candidate.multitask_strategy
    if (locked := lock_thread_to_admit(thread.pk)) is None:
        raise ThreadNotFound(thread.pk)
    unfinished = list(Run.objects.select_for_update().filter(thread=thread, status__in=UNFINISHED_STATUSES))
    superseded: list[Run] = []
    if strategy in (CancelAction.INTERRUPT, CancelAction.ROLLBACK):
        for older in unfinished:
            if _request_cancel(older, strategy):
                older.refresh_from_db()
                superseded.append(older)
    # Re-read: cancelling just finished the superseded runs that had not started.
    waiting = thread_has_unfinished_run(thread.pk)
    status = RunStatus.QUEUED if waiting else RunStatus.PENDING
    return _insert(candidate, status, after_seconds, locked), superseded


def _request_cancel(run: Run, action: str) -> bool:
    """Record ``action`` on the row if no cancel was requested yet; finish unstarted runs.

    A queued or pending run (delayed or not) has no executor, so it is
    finished right here, and its webhook sent after the commit; a running
    one is finished by its executor once signalled.
    """
    now = timezone.now()
    won = Run.objects.filter(pk=run.pk, cancel_action="", status__in=UNFINISHED_STATUSES).update(
        cancel_action=action, cancel_requested_at=now, updated_at=now
    )
    if not won:
        return False
    unstarted = {"status": RunStatus.INTERRUPTED, "error": CANCELLED_BEFORE_START, "finished_at": now}
    if action == CancelAction.ROLLBACK:
        unstarted = {"status": RunStatus.ERROR, "error": ROLLED_BACK, "finished_at": now}
    if Run.objects.filter(pk=run.pk, status__in=(RunStatus.QUEUED, RunStatus.PENDING)).update(**unstarted):
        webhook_after_commit(run_id=run.run_id, url=run.webhook)
    return True


def run_request_cancel(*, run: Run, action: str) -> tuple[bool, Run]:
    """Durably request cancelling ``run``; return (this call won, fresh row).

    The first action wins: a later, different action is not applied. After
    commit, the caller signals the executing process (see runs.execution).
    """
    with transaction.atomic():
        lock_thread(run.thread_id)
        won = _request_cancel(run, action)
        promoted = promote_next_queued(thread_id=run.thread_id) if won else None
    run.refresh_from_db()
    return won, _with_promoted(run, promoted)


def _with_promoted(run: Run, promoted: str | None) -> Run:
    run.promoted_run_id = promoted  # type: ignore[attr-defined]
    return run


def promote_next_queued(*, thread_id: str, known_free: bool = False) -> str | None:
    """Make the oldest live queued run of a free thread pending; return its id.

    Call inside a transaction holding the thread lock. The unique index still guards the transition,
    so two processes promoting at once cannot both succeed. ``known_free``: the caller just ended
    the thread's active run under that lock (the index allows one), so the thread is not looked up.
    """
    if not known_free and Run.objects.filter(thread_id=thread_id, status__in=ACTIVE_STATUSES).exists():
        return None
    nxt = (
        Run.objects.filter(thread_id=thread_id, status=RunStatus.QUEUED, cancel_action="")
        .order_by("created_at", "run_id")
        .values_list("run_id", flat=True)
        .first()
    )
    if nxt is None:
        return None
    try:
        with transaction.atomic():
            Run.objects.filter(pk=nxt, status=RunStatus.QUEUED).update(
                status=RunStatus.PENDING, updated_at=timezone.now()
            )
    except IntegrityError:
        return None
    return nxt


def run_delete(*, run: Run) -> None:
    """Delete a finished run and its events; an unfinished one must be cancelled first."""
    with transaction.atomic():
        lock_thread(run.thread_id)
        deleted, _ = Run.objects.filter(pk=run.pk).exclude(status__in=UNFINISHED_STATUSES).delete()
    if not deleted:
        raise Conflict(f"Run {run.run_id} is still active; cancel it before deleting it.")
