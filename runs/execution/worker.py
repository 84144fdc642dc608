"""The process's run worker: the parts that claim, execute and supervise runs, started and stopped together.

Any process can execute any run. The worker is a composition; each part
has one job and can be built and tested without the others:

- ``LocalRuns`` (``local_runs``) executes the runs this worker holds, each in
  a task of its own, and cancels them by run id;
- ``RunClaimer`` (``claimer``) claims pending runs into the free capacity,
  on the poll, on a wake-up and at the earliest delayed start; its pass also
  fires due crons (``CronFiring``, ``cron_firing``: one process wins each
  firing) and sweeps threads whose TTL ran out (``ttl_sweeper``: one process
  wins each thread);
- ``LeaseRenewer`` (``claimer``) renews the leases of the local runs and
  passes on the cancels written on their rows;
- ``CancelListener`` (``cancel_listener``) relays the cancel signals the
  channel layer carries to this worker, and wake-ups for claimers;
- ``OrphanRecovery`` (``orphans``) fails runs whose owner died (same host:
  its pid is gone; other hosts: its lease expired);
- ``WebhookOutbox`` (``webhook_outbox``) sends the webhooks of runs
  finalized in this process.

The worker wires them (a finished or recovered run's promoted successor is
dispatched here), keeps the port the run services call (``runs.dispatch``),
and stops the parts within bounded waits.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from channels.db import database_sync_to_async
from django.utils import timezone

from core.bridge import StreamBridge
from runs.execution.cancel_listener import CancelListener, send_cancel, wake_claimers
from runs.execution.claimer import LeaseRenewer, RunClaimer
from runs.execution.cron_firing import CronFiring
from runs.execution.local_runs import LocalRuns
from runs.execution.orphans import OrphanRecovery, apublish_orphan_end, new_worker_id
from runs.execution.tasks import spawn
from runs.execution.ttl_sweeper import asweep_expired_threads
from runs.execution.webhook_outbox import WebhookOutbox
from runs.models import CancelAction, Run
from runs.services import lifecycle
from runs.services.crons import Firing
from runs.services.webhooks import WebhookJob

logger = logging.getLogger(__name__)

# A stop's bounded waits. Each dependency gets a bound and is abandoned past
# it: a wait on a task that ignores its cancel held a worker's SIGTERM for
# 50 s and more (1 stop in 1 to 5 under load).
# The runs it cancelled get this long to record their end (as shut down).
RUNS_STOP_SECONDS = 10.0
# The background loops (claim, leases, orphans, cancel listener) get this long once cancelled.
LOOPS_STOP_SECONDS = 2.0
# Webhooks in flight get this long before they are abandoned.
WEBHOOK_DRAIN_SECONDS = 5.0
# A cancel is sent again this often to a task that has not ended: a dependency may have dropped it.
RECANCEL_SECONDS = 0.25
# The hard deadline of a ``run_workers`` stop, from SIGTERM to exit: the waits
# above (17 s), then closing the bridge and savers. Past it the runs the
# process still holds are failed as shut down and the process exits (status 1).
STOP_DEADLINE_SECONDS = 25.0
# Orphan recovery runs once every this many lease-renewal periods.
RENEWALS_PER_ORPHAN_PASS = 3


async def stop_tasks(tasks, *, within: float) -> set[asyncio.Task]:
    """Cancel ``tasks`` and wait at most ``within`` seconds for them to end; return those still running.

    The cancel is repeated every ``RECANCEL_SECONDS``: redis-py sends each
    command under ``asyncio.wait_for``, which on Python 3.11 returns the
    command's answer and drops a cancel landing as the send completes
    (CPython gh-86296), and channels-redis then simply reads again (``while
    content is None``). What is still running at the bound is left to the
    caller, which abandons it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    pending = {task for task in tasks if not task.done()}
    while pending and (left := deadline - loop.time()) > 0:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=min(RECANCEL_SECONDS, left))
    return pending


class RunWorker:
    """Claim, execute and supervise runs on this process's event loop."""

    def __init__(
        self,
        *,
        bridge: StreamBridge,
        claim: bool = True,
        capacity: int = 32,
        poll_seconds: float = 1.0,
        lease_seconds: int = 30,
        grace_seconds: int = 10,
    ) -> None:
        self.worker_id = new_worker_id()
        self.bridge = bridge
        self.claim = claim
        self.capacity = capacity
        self.local = LocalRuns(bridge=bridge, worker_id=self.worker_id, on_promoted=self._dispatch_or_wake)
        self.crons = CronFiring(signal_cancel=self.signal_cancel, dispatch_soon=self.dispatch_soon)
        self.claimer = RunClaimer(
            worker_id=self.worker_id,
            local=self.local,
            capacity=capacity,
            poll_seconds=poll_seconds,
            lease_seconds=lease_seconds,
            fire_crons=lambda free: self.crons.fire_due(limit=free),
            sweep=asweep_expired_threads,
        )
        self.leases = LeaseRenewer(worker_id=self.worker_id, local=self.local, lease_seconds=lease_seconds)
        self.orphans = OrphanRecovery(
            worker_id=self.worker_id,
            bridge=bridge,
            local=self.local,
            grace_seconds=grace_seconds,
            every=self.leases.every * RENEWALS_PER_ORPHAN_PASS,
            on_promoted=self._dispatch_or_wake,
        )
        self.listener = CancelListener(
            worker_id=self.worker_id,
            on_cancel=self.local.cancel,
            on_wake=self.claimer.wake if claim else None,
        )
        self.webhooks = WebhookOutbox()
        self._background: list[asyncio.Task] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def tasks(self) -> dict[str, asyncio.Task]:
        """The tasks of the runs executing here, by run id (the console counts them)."""
        return self.local.tasks

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Recover orphans once, then start the parts' loops (the claim loop only if this worker claims)."""
        self.loop = asyncio.get_running_loop()
        await self.reconcile_orphans()
        self._background = [
            spawn(self.listener.run(), "runs-cancel-listener"),
            spawn(self.leases.run(), "runs-leases"),
            spawn(self.orphans.run(), "runs-orphans"),
        ]
        if self.claim:
            self._background.append(spawn(self.claimer.run(), "runs-claim"))

    async def aclose(self) -> None:
        """Stop claiming and listening, cancel local runs (they end as shut down), send webhooks; every wait bounded.

        Loops that outlive ``LOOPS_STOP_SECONDS`` once cancelled are
        abandoned (logged by name). Then whatever this worker still holds in
        the database (a run whose task ignored the stop for
        ``RUNS_STOP_SECONDS``, a run claimed by a pass the stop cut short) is
        failed as shut down.
        """
        self.claimer.stop()
        self.listener.stop()
        # The claim loop ends at its next turn (``RunClaimer.stop``), not cancelled mid-pass.
        claiming = [task for task in self._background if task.get_name() == "runs-claim"]
        if claiming:
            await asyncio.wait(claiming, timeout=LOOPS_STOP_SECONDS)
        loops = [*self._background, *([self.listener.read] if self.listener.read else [])]
        for task in await stop_tasks(loops, within=LOOPS_STOP_SECONDS):
            logger.warning("shutting down: %s did not end when cancelled; abandoned", task.get_name())
        await self.local.shut_down(within=RUNS_STOP_SECONDS)
        await self._fail_runs_left()
        await self.webhooks.drain(within=WEBHOOK_DRAIN_SECONDS)

    async def _fail_runs_left(self) -> None:
        """Fail the runs this worker still holds as shut down, then cancel their tasks once more (bounded)."""
        left = list(self.local.tasks.values())
        try:
            failed = await database_sync_to_async(runs_fail_shut_down)(worker_id=self.worker_id)
        except Exception:
            logger.exception("shutting down: failing the runs left failed; orphan recovery ends them")
            failed = []
        for run_id in failed:
            logger.warning("shutting down: run %s had not ended; failed as shut down", run_id)
            await apublish_orphan_end(self.bridge, run_id, lifecycle.SHUTDOWN_MESSAGE)
        await stop_tasks(left, within=LOOPS_STOP_SECONDS)

    # -- the port (runs.dispatch.Executor) -------------------------------------

    async def dispatch(self, run_id: str, *, thread_id: str | None = None, admitted: Run | None = None) -> bool:
        """Claim ``run_id`` for this process and start it; False if someone else has it (or this worker does not claim).

        ``admitted``: the row as this process just admitted it (see ``run_claim``).
        """
        if not self.claim:
            return False
        return await self.claimer.dispatch(run_id, thread_id=thread_id, admitted=admitted)

    def dispatch_soon(
        self,
        run_id: str,
        *,
        thread_id: str | None = None,
        not_before: datetime | None = None,
        admitted: Run | None = None,
    ) -> None:
        """Claim and start ``run_id`` without holding up the caller (its response goes out first).

        The task gets a fresh context, not the request's (see ``spawn``); a
        lost claim race just leaves the run to the claim loop. A delayed run
        (``not_before`` ahead) is left to the claim loop, woken at its time.
        A worker that does not claim wakes the claimers of other processes.
        """
        if not self.claim:
            spawn(wake_claimers(), f"wake-claimers-{run_id}")
        elif not_before is not None and not_before > timezone.now():
            self.note_due(not_before)
        else:
            spawn(self._dispatch_or_wake(run_id, thread_id, admitted), f"dispatch-{run_id}")

    def note_due(self, when: datetime) -> None:
        """Make the claim loop look again by ``when`` (a delayed start admitted here)."""
        self.claimer.note_due(when)

    async def _dispatch_or_wake(self, run_id: str, thread_id: str | None, admitted: Run | None = None) -> None:
        try:
            if await self.dispatch(run_id, thread_id=thread_id, admitted=admitted):
                return
        except Exception:
            logger.exception("dispatching run %s failed; the claim loop will retry", run_id)
        self.wake()

    def wake(self) -> None:
        """Ask the claim loop to look for pending runs now (thread-safe)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.claimer.wake)

    def cancel_local(self, run_id: str, action: str) -> bool:
        """Cancel a run executing here with ``action``; False if it is not here (see ``LocalRuns.cancel``)."""
        return self.local.cancel(run_id, action)

    async def signal_cancel(self, *, run_id: str, worker_id: str, action: str) -> None:
        """Deliver a cancel to the process executing the run (here, or over the channel layer)."""
        if not self.cancel_local(run_id, action) and worker_id:
            await send_cancel(worker_id=worker_id, run_id=run_id, action=action)

    def send_webhook(self, job: WebhookJob) -> None:
        """POST a finished run's record to its webhook, in a task of its own (call on the loop)."""
        self.webhooks.send(job)

    # -- the parts' single passes, for callers that want one now ----------------

    async def fire_due_crons(self, *, limit: int = 50, now: datetime | None = None) -> list[Firing]:
        """Fire the due crons this process wins, then announce and start their runs (``CronFiring``)."""
        return await self.crons.fire_due(limit=limit, now=now)

    async def reconcile_orphans(self) -> list[str]:
        """End running runs that no live task owns; promote what was queued behind them (``OrphanRecovery``)."""
        return await self.orphans.reconcile()


def runs_fail_shut_down(*, worker_id: str) -> list[str]:
    """Fail the runs ``worker_id`` still holds as shut down (its stop ran out of time); return their ids.

    Safe from any thread, while the worker's loop is stuck too. A run whose
    rollback was requested is left running: the orphan recovery of another
    process restores its pre-run state first (this process is gone by then).
    """
    failed = []
    for row in lifecycle.running_runs():
        if row["worker_id"] != worker_id or row["cancel_action"] == CancelAction.ROLLBACK:
            continue
        lifecycle.run_fail_orphan(run_id=row["run_id"], message=lifecycle.SHUTDOWN_MESSAGE, thread_id=row["thread_id"])
        failed.append(row["run_id"])
    return failed
