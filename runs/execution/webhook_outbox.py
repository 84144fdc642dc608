"""The webhooks of runs finalized in this process, each delivered in a task of its own."""

from __future__ import annotations

import asyncio
import logging

from runs.execution.tasks import spawn
from runs.execution.webhooks import adeliver
from runs.services.webhooks import WebhookJob

logger = logging.getLogger(__name__)


class WebhookOutbox:
    """Deliver webhooks without holding up their run; at the stop, drain them, bounded."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task] = set()

    def send(self, job: WebhookJob) -> None:
        """POST a finished run's record to its webhook in a task of its own (call on the loop)."""
        task = spawn(adeliver(job), f"webhook-{job.record.get('run_id')}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self, *, within: float) -> None:
        """Give the deliveries in flight ``within`` seconds, then drop them, saying so."""
        if not self.tasks:
            return
        _done, pending = await asyncio.wait(list(self.tasks), timeout=within)
        for task in pending:
            logger.warning("shutting down: webhook delivery %s abandoned", task.get_name())
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
