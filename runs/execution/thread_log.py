"""A run's writer into its thread's protocol-v2 log: batched, off the graph's path.

Token-level ``messages`` events come dozens per second; one transaction per
event would put a database round trip behind every token. Events wait up to
``thread_stream.flush_interval_ms`` and go in one transaction (numbered under
the thread lock), then to live followers through the bridge. The run's last
events are written by ``run_finalize`` with its outcome, in one transaction.
A failed write keeps the batch for the next attempt; the run goes on.

The writes of every run of the process go through a ``LogGroupCommit``
(one on SQLite, ``POSTGRES_LANES`` on PostgreSQL, a thread always in the
same): a batch that comes due while another write is under way joins the
next one, so under load the process writes its runs' batches a few
transactions at a time instead of one transaction each (``bench.agents``:
30 runs streaming 20 tokens/s made ~600 transactions a second, each
waiting for SQLite's one writer or a PostgreSQL commit).

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
import weakref
import zlib
from dataclasses import dataclass, field

from django.db import connection, transaction

from core.bridge import StreamBridge
from core.db import db_async
from core.sync_threads import own_sync_thread
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
                envelopes = await group_commit(self.thread_id).append(
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


@dataclass
class _Append:
    """One writer's batch, waiting for the group's next transaction."""

    thread_id: str
    run_id: str
    events: list[PendingEvent]
    retry: bool
    done: asyncio.Future = field(repr=False)


def _append_all(appends: list[_Append]) -> list[list[dict] | BaseException]:
    """Write every batch in one transaction; a batch that fails alone is rolled back alone (its savepoint).

    In thread order, so two processes' groups take the threads' row locks
    in one order. Each answer is the batch's envelopes or what it raised;
    the caller delivers them once the transaction has committed.
    """
    answers: dict[int, list[dict] | BaseException] = {}
    with transaction.atomic():
        for index, append in sorted(enumerate(appends), key=lambda item: item[1].thread_id):
            try:
                answers[index] = thread_stream_append(
                    thread_id=append.thread_id, run_id=append.run_id, events=append.events, retry=append.retry
                )
            except Exception as exc:  # that writer's failure, handed back to it
                answers[index] = exc
    return [answers[index] for index in range(len(appends))]


class LogGroupCommit:
    """The process's log writes, one transaction at a time, each taking every batch that came due meanwhile.

    A lone batch is written at once, as before; batches arriving during a
    write wait for it and go together in the next (group commit). If the
    transaction fails, every batch in it fails (each writer keeps its batch
    and retries it in doubt, ``ThreadLogWriter.in_doubt``).
    """

    def __init__(self) -> None:
        self._queue: list[_Append] = []
        self._task: asyncio.Task | None = None

    async def append(self, *, thread_id: str, run_id: str, events: list[PendingEvent], retry: bool) -> list[dict]:
        done = asyncio.get_running_loop().create_future()
        self._queue.append(_Append(thread_id, run_id, events, retry, done))
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._write())
        return await done

    async def _write(self) -> None:
        # A thread of its own: the task outlives the run whose batch started it.
        async with own_sync_thread():
            while self._queue:
                appends, self._queue = self._queue, []
                try:
                    answers = await db_async(_append_all)(appends)
                except asyncio.CancelledError:  # the loop is closing: the writers are told so
                    for append in (*appends, *self._queue):
                        append.done.cancel()
                    raise
                except Exception as exc:
                    for append in appends:
                        if not append.done.done():
                            append.done.set_exception(exc)
                    continue
                for append, answer in zip(appends, answers, strict=True):
                    if append.done.done():  # its writer was cancelled meanwhile
                        continue
                    if isinstance(answer, BaseException):
                        append.done.set_exception(answer)
                    else:
                        append.done.set_result(answer)


# PostgreSQL writes several groups at once (a connection each), SQLite one (it has one writer).
POSTGRES_LANES = 4
_groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[LogGroupCommit]] = weakref.WeakKeyDictionary()


def group_commit(thread_id: str) -> LogGroupCommit:
    """The group that writes ``thread_id``'s batches on this event loop (tests run several loops in one process).

    A thread's batches always go to the same lane, so they are written in
    the order they came.
    """
    loop = asyncio.get_running_loop()
    lanes = _groups.get(loop)
    if lanes is None:
        count = POSTGRES_LANES if connection.vendor == "postgresql" else 1
        lanes = _groups[loop] = [LogGroupCommit() for _ in range(count)]
    return lanes[zlib.crc32(thread_id.encode()) % len(lanes)]


async def publish_quietly(bridge: StreamBridge, thread_id: str, envelopes: list[dict]) -> None:
    """Publish committed events; followers re-read the database when idle, so a failure only delays."""
    try:
        await publish_thread_events(bridge, thread_id, envelopes)
    except Exception:
        logger.warning("thread %s: live publish of %d log events failed", thread_id, len(envelopes), exc_info=True)
