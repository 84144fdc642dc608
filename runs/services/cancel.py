"""Cancel a run from any interface: the API and WebSocket (async), the admin and commands (sync).

The request is written on the run row first (``run_request_cancel``: the
first action wins, unstarted runs finish at once), then the executing
process is signalled: directly when it is this process's worker, else over
the channel layer to the worker's group. The lease renewal polls the row as
well, so a lost signal still lands within one renewal period.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet

from core.errors import Conflict, Invalid
from runs import dispatch
from runs.models import CancelAction, Run, RunStatus
from runs.services.admission import run_request_cancel
from threads.models import UNFINISHED_STATUSES, ThreadMeta
from threads.services import thread_delete

# How often a delete looks whether the runs it cancelled have ended.
_DELETE_POLL_SECONDS = 0.05


def _message(run: Run) -> dict[str, str]:
    return {"type": "run.cancel", "run_id": run.run_id, "action": run.cancel_action}


def _request_cancel(*, run: Run, action: str, by: AbstractBaseUser | None) -> tuple[bool, Run]:
    """``run_request_cancel``, and ``by`` recorded as who cancelled when this request is the one that wins.

    One transaction: the row never says cancelled without saying by whom.
    """
    with transaction.atomic():
        won, fresh = run_request_cancel(run=run, action=action)
        if won and by is not None:
            Run.objects.filter(pk=fresh.pk).update(cancelled_by=by)
            fresh.cancelled_by_id = by.pk
    return won, fresh


def run_cancel(*, run: Run, action: str, by: AbstractBaseUser | None = None) -> Run:
    """Request cancelling ``run`` with ``action`` on behalf of ``by`` and signal its executor; return the fresh row.

    Safe outside the event loop (a plain thread, the admin): a worker of this
    process is reached through its loop, another process's over the channel layer.
    """
    _won, fresh = _request_cancel(run=run, action=action, by=by)
    if fresh.status != RunStatus.RUNNING:
        return fresh
    worker = dispatch.current()
    if worker is not None and worker.worker_id == fresh.worker_id and worker.loop is not None:
        worker.loop.call_soon_threadsafe(worker.cancel_local, fresh.run_id, fresh.cancel_action)
    elif fresh.worker_id:
        async_to_sync(get_channel_layer().group_send)(dispatch.worker_group(fresh.worker_id), _message(fresh))
    if worker is not None and getattr(fresh, "promoted_run_id", None):
        worker.wake()
    return fresh


def run_cancel_unfinished(*, run: Run, action: str, by: AbstractBaseUser | None = None) -> Run:
    """``run_cancel`` for a person's request (the console): refuse an unknown action or a finished run.

    A run that finishes between the check and the request is left as it
    ended: the request writes nothing then (``run_request_cancel``).
    """
    if action not in CancelAction.values:
        raise Invalid("action", "must be interrupt or rollback")
    if run.status not in UNFINISHED_STATUSES:
        raise Conflict(f"Run {run.run_id} is not cancellable (status: {run.status})")
    return run_cancel(run=run, action=action, by=by)


async def arun_cancel(*, run: Run, action: str, by: AbstractBaseUser | None = None) -> Run:
    """``run_cancel`` on the event loop; also starts the run promoted behind it here."""
    _won, fresh = await database_sync_to_async(_request_cancel)(run=run, action=action, by=by)
    worker = dispatch.get()
    if fresh.status == RunStatus.RUNNING:
        await worker.signal_cancel(run_id=fresh.run_id, worker_id=fresh.worker_id, action=fresh.cancel_action)
    if promoted := getattr(fresh, "promoted_run_id", None):
        if not await worker.dispatch(promoted):
            worker.wake()
    return fresh


def thread_delete_cancelling_runs(*, thread: ThreadMeta, by: AbstractBaseUser | None = None) -> None:
    """Delete a thread as the Platform does: cancel its unfinished runs (``interrupt``), then delete.

    The delete itself keeps its guarantee (``thread_delete``): it is refused,
    having erased nothing, while any run is still unfinished, so a run that
    does not end within ``runs.delete_cancel_wait_seconds`` (or one admitted
    meanwhile) leaves the thread whole and the caller gets a 409.
    """

    runs_cancel_and_wait(
        lambda: Run.objects.filter(thread=thread),
        by=by,
        refusal=f"Thread {thread.thread_id} has a run that did not stop after being cancelled; "
        "the thread was not deleted, try again.",
    )
    thread_delete(thread=thread)


def runs_cancel_and_wait(runs: Callable[[], QuerySet[Run]], *, by: AbstractBaseUser | None, refusal: str) -> None:
    """Cancel (``interrupt``) the unfinished runs ``runs()`` selects, then wait until none is unfinished.

    ``runs`` is asked again on every poll, so a run admitted meanwhile is
    waited for too; past ``runs.delete_cancel_wait_seconds``: 409 ``refusal``.
    """
    for run in runs().filter(status__in=UNFINISHED_STATUSES):
        run_cancel(run=run, action="interrupt", by=by)
    deadline = time.monotonic() + settings.DEERFLOW_CONFIG.runs.delete_cancel_wait_seconds
    while runs().filter(status__in=UNFINISHED_STATUSES).exists():
        if time.monotonic() >= deadline:
            raise Conflict(refusal)
        time.sleep(_DELETE_POLL_SECONDS)
