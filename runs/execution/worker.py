"""The process's run worker: claims runs, executes them as tasks, relays cancels.

Any process can execute any run. The worker claims pending rows (its own
admissions at once, others' by polling), on the same poll fires due crons
(``runs.services.crons``: one process wins each firing) and sweeps threads
whose TTL ran out (``threads.ttl``: one process wins each thread), renews the
leases of what it runs, listens on the channel layer for cancel signals
addressed to it, fails runs whose owner died (same host: its pid is gone;
other hosts: its lease expired), and sends the webhooks of runs finalized in
this process.

Delayed runs (``after_seconds``) are pending rows with a ``not_before``: the
claim skips them until then. After each pass the claim loop sleeps until the
earliest delayed start it saw, if that comes before the next poll, so a
delayed run starts on time on any process that had seen it; one admitted
elsewhere after the last pass starts at most ``poll_seconds`` late.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import uuid
from datetime import datetime, timedelta

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections
from django.utils import timezone

from checkpoints.accessor import astate_accessor
from checkpoints.rollback import RollbackPoint, arestore
from core.db import db_async
from core.redis import keep_cancelled
from core.sync_threads import own_sync_thread
from runs import dispatch
from runs.execution.executor import SHUTDOWN, RunExecution, thread_lock
from runs.execution.webhooks import adeliver
from runs.models import LOST_MESSAGE, ORPHAN_MESSAGE, CancelAction, Run, RunStatus
from runs.services import lifecycle
from runs.services.admission import ROLLED_BACK
from runs.services.crons import crons_fire_due
from runs.services.webhooks import WebhookJob
from runs.streaming.bridge import StreamBridge
from threads.models import ThreadMeta
from threads.services import thread_delete
from threads.ttl_sweep import threads_sweep_expired

logger = logging.getLogger(__name__)

HOSTNAME = socket.gethostname()

# A stop's bounded waits. Each dependency gets a bound and is abandoned past
# it: a wait on a task that ignores its cancel held a worker's SIGTERM for
# 50 s and more (1 stop in 1 to 5 under load).
# The runs it cancelled get this long to record their end (as shut down).
RUNS_STOP_SECONDS = 10.0
# The background loops (claim, leases, cancel listener) get this long once cancelled.
LOOPS_STOP_SECONDS = 2.0
# Webhooks in flight get this long before they are abandoned.
WEBHOOK_DRAIN_SECONDS = 5.0
# A cancel is sent again this often to a task that has not ended: a dependency may have dropped it.
RECANCEL_SECONDS = 0.25
# The hard deadline of a ``run_workers`` stop, from SIGTERM to exit: the waits
# above (17 s), then closing the bridge and savers. Past it the runs the
# process still holds are failed as shut down and the process exits (status 1).
STOP_DEADLINE_SECONDS = 25.0


# Every process that claims runs listens here: a process that admits runs but
# does not execute them (``execute_in_server: false``) wakes them, so a run it
# admitted starts now rather than at the next claim poll (``poll_seconds``).
CLAIMERS_GROUP = "runs.claimers"


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        self.worker_id = f"{HOSTNAME}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.bridge = bridge
        self.claim = claim
        self.capacity = capacity
        self.poll_seconds = poll_seconds
        self.lease_seconds = lease_seconds
        self.grace_seconds = grace_seconds
        self.executions: dict[str, RunExecution] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self._background: list[asyncio.Task] = []
        # The cancel listener's read, a task of its own (see _cancel_listener).
        self._receive: asyncio.Task | None = None
        self._stopping = False
        self._wake = asyncio.Event()
        # The earliest delayed start the claim loop knows of (None: none).
        self._next_due: datetime | None = None
        self.webhook_tasks: set[asyncio.Task] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.reconcile_orphans()
        self._background = [
            self._spawn(self._cancel_listener(), "runs-cancel-listener"),
            self._spawn(self._lease_loop(), "runs-leases"),
        ]
        if self.claim:
            self._background.append(self._spawn(self._claim_loop(), "runs-claim"))

    def _spawn(self, coro, name: str) -> asyncio.Task:
        # A fresh context: never inherit a request's asgiref thread context (it
        # leaks one DB connection per run once the request ends).
        return asyncio.get_running_loop().create_task(coro, name=name, context=contextvars.Context())

    async def aclose(self) -> None:
        """Stop claiming and listening, cancel local runs (they end as shut down), send webhooks; every wait bounded.

        Loops that outlive ``LOOPS_STOP_SECONDS`` once cancelled are
        abandoned (logged by name). Then whatever this worker still holds in
        the database (a run whose task ignored the stop for
        ``RUNS_STOP_SECONDS``, a run claimed by a pass the stop cut short) is
        failed as shut down.
        """
        self._stopping = True
        # The claim loop ends at its next turn: cancelled in the middle of a
        # pass it left the runs claimed and not yet started (4 to 6 a stop under
        # load) to the sweep below, failed although they never ran.
        self._wake.set()
        claimer = [task for task in self._background if task.get_name() == "runs-claim"]
        if claimer:
            await asyncio.wait(claimer, timeout=LOOPS_STOP_SECONDS)
        loops = [*self._background, *([self._receive] if self._receive else [])]
        for task in await stop_tasks(loops, within=LOOPS_STOP_SECONDS):
            logger.warning("shutting down: %s did not end when cancelled; abandoned", task.get_name())
        for run_id in list(self.tasks):
            self.cancel_local(run_id, SHUTDOWN)
        if self.tasks:
            await asyncio.wait(list(self.tasks.values()), timeout=RUNS_STOP_SECONDS)
        await self._fail_runs_left()
        await self._drain_webhooks()

    async def _fail_runs_left(self) -> None:
        """Fail the runs this worker still holds as shut down, then cancel their tasks once more (bounded)."""
        left = list(self.tasks.values())
        try:
            failed = await database_sync_to_async(runs_fail_shut_down)(worker_id=self.worker_id)
        except Exception:
            logger.exception("shutting down: failing the runs left failed; orphan recovery ends them")
            failed = []
        for run_id in failed:
            logger.warning("shutting down: run %s had not ended; failed as shut down", run_id)
            await self._publish_orphan_end(run_id, lifecycle.SHUTDOWN_MESSAGE)
        await stop_tasks(left, within=LOOPS_STOP_SECONDS)

    async def _drain_webhooks(self) -> None:
        """Give webhooks in flight (those of the runs that just ended too) a short while, then drop them, saying so."""
        if not self.webhook_tasks:
            return
        _done, pending = await asyncio.wait(list(self.webhook_tasks), timeout=WEBHOOK_DRAIN_SECONDS)
        for task in pending:
            logger.warning("shutting down: webhook delivery %s abandoned", task.get_name())
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # -- execution -------------------------------------------------------------

    async def dispatch(self, run_id: str, *, thread_id: str | None = None, admitted: Run | None = None) -> bool:
        """Claim ``run_id`` for this process and start it; False if someone else has it.

        ``admitted``: the row as this process just admitted it (see ``run_claim``).
        """
        if not self.claim or self._stopping:
            return False  # stopping: a run promoted by one that just ended waits for another worker
        run = await db_async(lifecycle.run_claim)(
            run_id=run_id,
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            thread_id=thread_id,
            admitted=admitted,
        )
        if run is None:
            return False
        self._start(run)
        return True

    def dispatch_soon(
        self,
        run_id: str,
        *,
        thread_id: str | None = None,
        not_before: datetime | None = None,
        admitted: Run | None = None,
    ) -> None:
        """Claim and start ``run_id`` without holding up the caller (its response goes out first).

        The task gets a fresh context, not the request's (see ``_spawn``); a
        lost claim race just leaves the run to the claim loop. A delayed run
        (``not_before`` ahead) is left to the claim loop, woken at its time.
        """
        if not self.claim:
            self._spawn(self._wake_claimers(), f"wake-claimers-{run_id}")
            return
        if not_before is not None and not_before > timezone.now():
            self.note_due(not_before)
            return
        self._spawn(self._dispatch_or_wake(run_id, thread_id, admitted), f"dispatch-{run_id}")

    async def _wake_claimers(self) -> None:
        """Tell the processes that claim runs to look now (one of them wins the run; a delayed one sets their timer).

        A lost signal costs what it did before: the run waits for the next poll.
        """
        try:
            await get_channel_layer().group_send(CLAIMERS_GROUP, {"type": "runs.wake"})
        except Exception:
            logger.warning("could not wake the run workers; the run waits for their next poll", exc_info=True)

    def note_due(self, when: datetime) -> None:
        """Make the claim loop look again by ``when`` (a delayed start admitted here)."""
        if self._next_due is None or when < self._next_due:
            self._next_due = when
        self.wake()

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
            self.loop.call_soon_threadsafe(self._wake.set)

    def _start(self, run) -> None:
        execution = RunExecution(run, bridge=self.bridge, worker_id=self.worker_id)
        self.executions[run.run_id] = execution
        task = asyncio.get_running_loop().create_task(
            self._execute(execution), name=f"run-{run.run_id}", context=contextvars.Context()
        )
        self.tasks[run.run_id] = task
        run_id = run.run_id
        task.add_done_callback(lambda _t: self._forget(run_id))

    def _forget(self, run_id: str) -> None:
        self.tasks.pop(run_id, None)
        self.executions.pop(run_id, None)

    async def _execute(self, execution: RunExecution) -> None:
        # One ORM thread per run (reused, core.sync_threads), and at
        # the end its pooled connection handed back: 40 runs without this
        # exhausted an 8-connection pool (spike §5). SQLite's stays with the
        # thread unless it was left unusable.
        async with own_sync_thread():
            try:
                await execution.execute()
                if execution.promoted_run_id:
                    await self._dispatch_or_wake(execution.promoted_run_id, execution.run.thread_id)
                if execution.run.kwargs.get("on_completion") == "delete":
                    await database_sync_to_async(_delete_finished_thread)(execution.run.thread_id)
            except Exception:
                logger.exception("run %s: executor crashed", execution.run.run_id)
            finally:
                await sync_to_async(close_old_connections)()

    def cancel_local(self, run_id: str, action: str) -> bool:
        """Cancel a run executing here with ``action``; False if it is not here.

        The first action wins (``RunExecution.cancel``): the same request also
        arrives by the channel layer and by every lease renewal, and a second
        cancel landing while the run restores its rollback point would cut the
        restore short.
        """
        task = self.tasks.get(run_id)
        execution = self.executions.get(run_id)
        if task is None or execution is None or task.done():
            return False
        execution.cancel(action)
        return True

    async def signal_cancel(self, *, run_id: str, worker_id: str, action: str) -> None:
        """Deliver a cancel to the process executing the run (here, or over the channel layer)."""
        if self.cancel_local(run_id, action):
            return
        if worker_id:
            layer = get_channel_layer()
            await layer.group_send(
                dispatch.worker_group(worker_id), {"type": "run.cancel", "run_id": run_id, "action": action}
            )

    def send_webhook(self, job: WebhookJob) -> None:
        """POST a finished run's record to its webhook, in a task of its own (call on the loop)."""
        task = self._spawn(adeliver(job), f"webhook-{job.record.get('run_id')}")
        self.webhook_tasks.add(task)
        task.add_done_callback(self.webhook_tasks.discard)

    # -- background loops ------------------------------------------------------

    async def _cancel_listener(self) -> None:
        """Relay cancel signals addressed to this worker, and wake-ups for claimers, for as long as the worker lives.

        The channel layer's read runs in a task of its own (``_receive``) and
        the listener only waits on it: a cancel can be lost inside redis-py
        and channels-redis then reads on (``stop_tasks``), so the stop must
        not depend on that read ending. A channel-layer error (Redis down, a
        dropped connection the client's retry could not heal) is logged, and
        the listener subscribes again after a backoff (0.5 s doubling to 10
        s): a dead listener left cancels to the lease poll. The group is
        re-joined every ``rejoin_seconds``, as a restarted Redis (or
        channels-redis' group_expiry, a day) forgets members.
        """
        layer = get_channel_layer()
        group = dispatch.worker_group(self.worker_id)
        # One channel name for the worker's life: a signal sent while the
        # listener was down sits under it in Redis and is delivered on return
        # (a fresh name would leave it buffered for a channel nobody reads).
        channel = await layer.new_channel()
        backoff, rejoin_seconds = 0.5, 60.0
        try:
            while not self._stopping:
                try:
                    await self._join(layer, group, channel)
                    message = await self._next_message(layer, channel, within=rejoin_seconds)
                    backoff = 0.5  # the layer answered
                    if message.get("type") == "run.cancel":
                        self.cancel_local(message["run_id"], message.get("action") or "interrupt")
                    elif message.get("type") == "runs.wake":
                        self.wake()
                except Exception:
                    logger.exception("cancel listener: the channel layer failed; subscribing again in %.1f s", backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
        finally:
            if self._receive is not None:
                self._receive.cancel()  # aclose waits for it, bounded

    async def _join(self, layer, group: str, channel: str) -> None:
        # keep_cancelled: a cancel redis-py drops while sending is raised once the command answers.
        await keep_cancelled(layer.group_add(group, channel))
        if self.claim:
            await keep_cancelled(layer.group_add(CLAIMERS_GROUP, channel))

    async def _next_message(self, layer, channel: str, *, within: float) -> dict:
        """Return the channel's next message, or {} after ``within`` seconds (the read carries on for the next call).

        ``asyncio.wait`` on the read's task never loses the listener's own
        cancel, whatever the read does with the one it gets.
        """
        if self._receive is None:
            self._receive = self._spawn(layer.receive(channel), "runs-cancel-receive")
        done, _pending = await asyncio.wait({self._receive}, timeout=within)
        if not done:
            return {}
        receive, self._receive = self._receive, None
        return receive.result()

    async def _claim_loop(self) -> None:
        while not self._stopping:
            try:
                async with asyncio.timeout(self._idle_seconds()):  # not wait_for: gh-86296 (stop_tasks)
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            if self._stopping:
                return
            try:
                await self._claim_some()
            except Exception:
                logger.exception("claiming runs failed")
            try:
                await self.sweep_expired_threads()
            except Exception:
                logger.exception("sweeping expired threads failed")

    async def sweep_expired_threads(self, *, now=None):
        """Delete or prune a bounded batch of threads whose TTL ran out (``threads.ttl_sweep``; one process wins each)."""
        return await database_sync_to_async(threads_sweep_expired)(now=now)

    def _idle_seconds(self) -> float:
        """Sleep until the next poll, or until the earliest delayed start if that comes first."""
        if self._next_due is None:
            return self.poll_seconds
        until = (self._next_due - timezone.now()).total_seconds()
        # A start already due that the last pass left (no free capacity) waits for the poll.
        return min(self.poll_seconds, until) if until > 0 else self.poll_seconds

    async def _claim_some(self) -> None:
        free = self.capacity - len(self.tasks)
        if free <= 0:
            return
        try:
            await self.fire_due_crons(limit=free)
        except Exception:
            logger.exception("firing due crons failed")
        for thread_id in await database_sync_to_async(lifecycle.threads_with_stalled_queue)():
            await database_sync_to_async(lifecycle.promote_stalled)(thread_id=thread_id)
        claimed = await database_sync_to_async(lifecycle.run_claim_pending)(
            worker_id=self.worker_id, limit=free, lease_seconds=self.lease_seconds
        )
        for run_id in claimed:
            run = await database_sync_to_async(_load_run)(run_id)
            self._start(run)
        self._next_due = await database_sync_to_async(lifecycle.next_delayed_start)()

    async def fire_due_crons(self, *, limit: int = 50, now=None) -> list:
        """Fire the due crons this process wins (``runs.services.crons``), then announce and start their runs.

        The claim and the admission commit together, so what happens here
        after the commit is what any admission does: the cancel signals of
        superseded runs, and a dispatch (a lost one is picked up by the claim
        loop of any worker).
        """

        firings = await database_sync_to_async(crons_fire_due)(limit=limit, now=now)
        for firing in firings:
            run = firing.run
            if run is None:
                continue
            for older in firing.superseded:
                if older.status == RunStatus.RUNNING:
                    await self.signal_cancel(
                        run_id=older.run_id, worker_id=older.worker_id, action=run.multitask_strategy
                    )
            if run.status == RunStatus.PENDING:
                self.dispatch_soon(run.run_id, thread_id=run.thread_id, not_before=run.not_before)
        return firings

    async def _lease_loop(self) -> None:
        cycle = 0
        while True:
            await asyncio.sleep(max(1.0, self.lease_seconds / 3))
            cycle += 1
            try:
                cancels = await database_sync_to_async(lifecycle.runs_renew_leases)(
                    worker_id=self.worker_id, run_ids=list(self.tasks), lease_seconds=self.lease_seconds
                )
                for run_id, action in cancels.items():
                    self.cancel_local(run_id, action)
                if cycle % 3 == 0:
                    await self.reconcile_orphans()
            except Exception:
                logger.exception("lease renewal failed")

    # -- orphans ---------------------------------------------------------------

    def _owner_dead(self, worker_id: str, lease_expires_at) -> bool:
        host, _, rest = worker_id.partition(":")
        pid_text, _, _nonce = rest.partition(":")
        if host == HOSTNAME and pid_text.isdigit():
            pid = int(pid_text)
            # A live pid that is ours but another nonce is this process's
            # previous life (pid reuse after a restart in a container).
            return not _pid_alive(pid) or pid == os.getpid()
        horizon = timezone.now() - timedelta(seconds=self.grace_seconds)
        return lease_expires_at is None or lease_expires_at < horizon

    def _lost_here(self, row: dict) -> bool:
        """Tell whether a run this worker claimed has no task here any more.

        A claim commits before its task starts, so only runs claimed more
        than the grace period ago count: the gap is one loop turn.
        """
        started = row["started_at"]
        horizon = timezone.now() - timedelta(seconds=self.grace_seconds)
        return row["run_id"] not in self.tasks and started is not None and started < horizon

    async def reconcile_orphans(self) -> list[str]:
        """End running runs that no live task owns; promote what was queued behind them.

        Owned by a dead process (or by this one, whose task is gone: its
        completion could not reach the database), the run fails with a
        message saying so; if a rollback was requested it is carried out from
        the rollback point kept on the row, and the run ends rolled back.
        """
        rows = await database_sync_to_async(lifecycle.running_runs)()
        failed = []
        for row in rows:
            mine = row["worker_id"] == self.worker_id
            if mine and not self._lost_here(row):
                continue
            if not mine and not self._owner_dead(row["worker_id"], row["lease_expires_at"]):
                continue
            message = LOST_MESSAGE if mine else ORPHAN_MESSAGE
            if row["cancel_action"] == CancelAction.ROLLBACK and not await self._restore_orphan(row):
                continue  # retried on the next pass
            promoted = await database_sync_to_async(lifecycle.run_fail_orphan)(
                run_id=row["run_id"], message=message, thread_id=row["thread_id"]
            )
            failed.append(row["run_id"])
            rolled_back = row["cancel_action"] == CancelAction.ROLLBACK
            await self._publish_orphan_end(row["run_id"], ROLLED_BACK if rolled_back else message)
            logger.warning("run %s of lost worker %s ended (%s)", row["run_id"], row["worker_id"], message)
            if promoted:
                await self._dispatch_or_wake(promoted, row["thread_id"])
        return failed

    async def _restore_orphan(self, row: dict) -> bool:
        """Roll a dead run's thread back to its recorded rollback point; False to retry later."""
        try:
            recorded = await database_sync_to_async(lifecycle.run_rollback_point)(run_id=row["run_id"])
            if recorded is None:
                return True  # never captured: the run wrote nothing before it died
            accessor = await astate_accessor(row["assistant_id"])
            point = RollbackPoint.from_json(recorded, accessor.saver.serde)
            async with thread_lock(row["thread_id"]):
                await arestore(accessor, row["thread_id"], point)
        except Exception:
            logger.exception("run %s: restoring its rollback point failed", row["run_id"])
            return False
        return True

    async def _publish_orphan_end(self, run_id: str, message: str) -> None:
        end = {"status": "error", "error": message, "error_name": "OrphanedRun", "values": {}}
        try:
            await self.bridge.publish_end(run_id, end)
        except Exception:
            logger.warning("run %s: could not publish the end marker", run_id, exc_info=True)


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


def _delete_finished_thread(thread_id: str) -> None:
    """Delete a stateless run's thread once it finished (``on_completion: delete``).

    Waiters already have the outcome: it travels in the stream's end marker.
    """

    thread = ThreadMeta.objects.filter(pk=thread_id).first()
    if thread is not None:
        thread_delete(thread=thread)


def _load_run(run_id: str):
    return Run.objects.select_related("thread").get(pk=run_id)
