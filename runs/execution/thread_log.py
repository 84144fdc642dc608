"""A run's writer into its thread's protocol-v2 log: batched, off the graph's path.

Token-level ``messages`` events come dozens per second; one transaction per
event would put a database round trip behind every token. Events wait up to
``thread_stream.flush_interval_ms`` and go in one transaction (numbered under
the thread lock), then to live followers through the bridge. The run's last
events are written by ``run_finalize`` with its outcome, in one transaction.
A failed write keeps the batch for the next attempt; the run goes on.

A run that ends on an interrupt is the exception: its ``input.requested``
(written by ``run_finalize``) must not reach clients with what came before
it. The official SDK follows it on a second stream and ends the caller's
``messages`` and extension iterators when it sees it, so events arriving
on the other stream at the same instant were lost to them (the SDK
integration suite's ``test_messages`` and ``test_extensions`` failed about
one run in two). Those runs write and publish their last events first
(``drain(publish_first=True)``), and publish the outcome's at least
``PAUSE_GAP`` later (``pause_gap``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from core.bridge import StreamBridge
from core.db import db_async
from threads.stream_follow import publish_thread_events
from threads.stream_log import PendingEvent, thread_stream_append

logger = logging.getLogger(__name__)

# How long after a run's last events an ``input.requested`` is published, at the least (see above).
PAUSE_GAP = 0.05


class ThreadLogWriter:
    """Buffer one run's log events and write them in bursts."""

    def __init__(self, *, thread_id: str, run_id: str, bridge: StreamBridge, interval: float) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.bridge = bridge
        self.interval = interval
        self._pending: list[PendingEvent] = []
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._oldest = 0.0  # when the oldest queued event arrived (time.monotonic)
        self._draining = False
        self._published_at = float("-inf")  # when the last batch went to the bridge
        self._pausing = False  # the run ends on an interrupt (drain(publish_first=True))
        # The last write failed, perhaps after it committed: the next one (or finalize's) skips what is logged.
        self.in_doubt = False

    def add(self, events: list[PendingEvent]) -> None:
        """Queue events; the first of a burst schedules the write."""
        if not events:
            return
        if not self._pending:
            self._oldest = time.monotonic()
        self._pending.extend(events)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        """Write each burst ``interval`` after its first event; what arrived during a write goes right after it.

        Events queued while a write was in flight have waited that long
        already: they are written when it ends, ``interval`` after the first
        of them at the latest, not after the next event plus another interval
        (measured by ``bench.agents``: the oldest event of a batch waited
        224-643 ms p99 before its write began).
        """
        while True:
            await asyncio.sleep(max(0.0, self._oldest + self.interval - time.monotonic()))
            written = await self.flush()
            if not self._pending or self._draining:
                return
            if not written:  # a failed write waits a whole interval before it is tried again
                self._oldest = time.monotonic()

    async def flush(self) -> bool:
        """Write what is queued and publish it; on a storage failure keep it for later (and answer False)."""
        async with self._lock:
            batch, self._pending = self._pending, []
            if not batch:
                return True
            try:
                envelopes = await db_async(thread_stream_append)(
                    thread_id=self.thread_id, run_id=self.run_id, events=batch, retry=self.in_doubt
                )
            except Exception:
                logger.warning("run %s: thread log write failed; retried later", self.run_id, exc_info=True)
                self._pending = batch + self._pending
                self.in_doubt = True
                return False
            self.in_doubt = False
            await publish_quietly(self.bridge, self.thread_id, envelopes)
            self._published_at = time.monotonic()
            return True

    async def drain(self, *, publish_first: bool = False) -> list[PendingEvent]:
        """Stop the scheduled write and return what is still unwritten (for ``run_finalize``).

        ``publish_first``: write and publish what is queued now instead (a run
        ending on an interrupt); only a batch whose write failed is returned.
        """
        self._draining = True
        self._pausing = publish_first
        task = self._task
        if task is not None and not task.done():
            if not self._lock.locked():  # waiting for its time (or not started): nothing of it is written yet
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if publish_first and self._pending:
            await self.flush()
        async with self._lock:
            batch, self._pending = self._pending, []
        return batch

    async def pause_gap(self) -> None:
        """After ``drain(publish_first=True)``: wait until ``PAUSE_GAP`` passed since the last batch was published."""
        wait = self._published_at + PAUSE_GAP - time.monotonic()
        if self._pausing and wait > 0:
            await asyncio.sleep(wait)


async def publish_quietly(bridge: StreamBridge, thread_id: str, envelopes: list[dict]) -> None:
    """Publish committed events; followers re-read the database when idle, so a failure only delays."""
    try:
        await publish_thread_events(bridge, thread_id, envelopes)
    except Exception:
        logger.warning("thread %s: live publish of %d log events failed", thread_id, len(envelopes), exc_info=True)
