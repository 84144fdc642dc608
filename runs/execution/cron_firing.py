"""Cron firing: fire the due crons this process wins and hand their runs on as any admission does.

Which process wins a firing is decided in the database (``runs.services.crons``);
the claim and the admission commit together, so what happens here, after the
commit, is what any admission does next: the cancel signals of superseded
runs, and a dispatch (a lost one is picked up by the claim loop of any worker).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol

from channels.db import database_sync_to_async

from runs.models import RunStatus
from runs.services.crons import Firing, crons_fire_due


class SignalCancel(Protocol):
    """The worker's cancel signal (``RunWorker.signal_cancel``)."""

    def __call__(self, *, run_id: str, worker_id: str, action: str) -> Awaitable[None]: ...


class CronFiring:
    """Fire due crons, signal the runs they supersede, and dispatch the runs they admit."""

    def __init__(self, *, signal_cancel: SignalCancel, dispatch_soon: Callable[..., None]) -> None:
        self._signal_cancel = signal_cancel
        self._dispatch_soon = dispatch_soon

    async def fire_due(self, *, limit: int = 50, now: datetime | None = None) -> list[Firing]:
        """Fire up to ``limit`` due crons this process wins; return every firing (refused ones too)."""
        firings = await database_sync_to_async(crons_fire_due)(limit=limit, now=now)
        for firing in firings:
            await self._announce(firing)
        return firings

    async def _announce(self, firing: Firing) -> None:
        run = firing.run
        if run is None:
            return  # the admission refused it; the firing says why
        for older in firing.superseded:
            if older.status == RunStatus.RUNNING:
                await self._signal_cancel(run_id=older.run_id, worker_id=older.worker_id, action=run.multitask_strategy)
        if run.status == RunStatus.PENDING:
            self._dispatch_soon(run.run_id, thread_id=run.thread_id, not_before=run.not_before)
