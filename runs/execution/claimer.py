"""Hold runs for this worker: claim pending runs into its free capacity, keep the leases of those it executes.

Delayed runs (``after_seconds``) are pending rows with a ``not_before``: the
claim skips them until then. After each pass the claim loop sleeps until the
earliest delayed start it saw, if that comes before the next poll, so a
delayed run starts on time on any process that had seen it; one admitted
elsewhere after the last pass starts at most ``poll_seconds`` late.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from channels.db import database_sync_to_async
from django.utils import timezone

from core.db import db_async
from runs.execution.tasks import repeat_every
from runs.models import Run
from runs.services import lifecycle

logger = logging.getLogger(__name__)


class LocalExecutions(Protocol):
    """What claiming and lease renewal need of the runs executing here (``local_runs.LocalRuns``)."""

    def __len__(self) -> int: ...

    def ids(self) -> list[str]: ...

    def start(self, run: Run) -> None: ...

    def cancel(self, run_id: str, action: str) -> bool: ...


@dataclass(kw_only=True, eq=False)
class RunClaimer:
    """Claim pending runs on every poll, on a wake-up, and at the earliest delayed start.

    The claim loop is the worker's poll: each pass first fires due crons into
    the free capacity (``fire_crons``, given the number of free slots), then
    claims, then runs ``sweep`` (the TTL sweep), whose failures never stop the loop.
    """

    worker_id: str
    local: LocalExecutions
    capacity: int
    poll_seconds: float
    lease_seconds: int
    fire_crons: Callable[[int], Awaitable[object]] | None = None
    sweep: Callable[[], Awaitable[object]] | None = None
    stopping: bool = field(default=False, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    # The earliest delayed start the claim loop knows of (None: none).
    next_due: datetime | None = field(default=None, init=False)

    def wake(self) -> None:
        """Make the claim loop look for pending runs now (call on the loop)."""
        self._wake.set()

    def note_due(self, when: datetime) -> None:
        """Make the claim loop look again by ``when`` (a delayed start admitted here)."""
        if self.next_due is None or when < self.next_due:
            self.next_due = when
        self.wake()

    def stop(self) -> None:
        """End the loop at its next turn and refuse further claims.

        Not a cancel: cancelled in the middle of a pass the loop left the runs
        claimed and not yet started (4 to 6 a stop under load) to the stop's
        sweep, failed although they never ran.
        """
        self.stopping = True
        self._wake.set()

    async def dispatch(self, run_id: str, *, thread_id: str | None = None, admitted: Run | None = None) -> bool:
        """Claim ``run_id`` and start it here; False if someone else has it, or this claimer stops.

        ``admitted``: the row as this process just admitted it (see ``run_claim``).
        """
        if self.stopping:
            return False  # a run promoted by one that just ended waits for another worker
        run = await db_async(lifecycle.run_claim)(
            run_id=run_id,
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            thread_id=thread_id,
            admitted=admitted,
        )
        if run is None:
            return False
        self.local.start(run)
        return True

    async def run(self) -> None:
        """Claim on every poll or wake-up until stopped; a failed pass is logged and the next one tries again."""
        while not self.stopping:
            await self._idle()
            if self.stopping:
                return
            try:
                await self.claim_pending()
            except Exception:
                logger.exception("claiming runs failed")
            if self.sweep is not None:
                try:
                    await self.sweep()
                except Exception:
                    logger.exception("sweeping expired threads failed")

    async def _idle(self) -> None:
        try:
            async with asyncio.timeout(self._idle_seconds()):  # not wait_for: gh-86296 (worker.stop_tasks)
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()

    def _idle_seconds(self) -> float:
        """Sleep until the next poll, or until the earliest delayed start if that comes first."""
        if self.next_due is None:
            return self.poll_seconds
        until = (self.next_due - timezone.now()).total_seconds()
        # A start already due that the last pass left (no free capacity) waits for the poll.
        return min(self.poll_seconds, until) if until > 0 else self.poll_seconds

    async def claim_pending(self) -> None:
        """One pass: fire due crons, promote stalled queues, claim due runs into the free capacity."""
        free = self.capacity - len(self.local)
        if free <= 0:
            return
        if self.fire_crons is not None:
            try:
                await self.fire_crons(free)
            except Exception:
                logger.exception("firing due crons failed")
        for thread_id in await database_sync_to_async(lifecycle.threads_with_stalled_queue)():
            await database_sync_to_async(lifecycle.promote_stalled)(thread_id=thread_id)
        claimed = await database_sync_to_async(lifecycle.run_claim_pending)(
            worker_id=self.worker_id, limit=free, lease_seconds=self.lease_seconds
        )
        for run_id in claimed:
            run = await database_sync_to_async(_load_run)(run_id)
            self.local.start(run)
        self.next_due = await database_sync_to_async(lifecycle.next_delayed_start)()


class LeaseRenewer:
    """Renew the leases of the runs executing here, and pass on the cancels requested on their rows.

    The renewal doubles as the durable cancel poll: a cancel whose
    channel-layer signal was lost still lands within one period.
    """

    def __init__(self, *, worker_id: str, local: LocalExecutions, lease_seconds: int) -> None:
        self.worker_id = worker_id
        self.local = local
        self.lease_seconds = lease_seconds
        # A third of the lease: a failed renewal or two still leave the lease standing.
        self.every = max(1.0, lease_seconds / 3)

    async def renew(self) -> dict[str, str]:
        """Extend the leases once; cancel the local runs a cancel was requested for; return those requests."""
        cancels = await database_sync_to_async(lifecycle.runs_renew_leases)(
            worker_id=self.worker_id, run_ids=self.local.ids(), lease_seconds=self.lease_seconds
        )
        for run_id, action in cancels.items():
            self.local.cancel(run_id, action)
        return cancels

    async def run(self) -> None:
        """Renew every ``every`` seconds until cancelled; a failed renewal is logged and retried next period."""
        await repeat_every(self.every, self.renew, logger=logger, failure="lease renewal failed")


def _load_run(run_id: str) -> Run:
    return Run.objects.select_related("thread").get(pk=run_id)
