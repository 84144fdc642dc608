"""Each part of the run worker on its own, against the real database: no claim loop runs unless the test starts it.

Where a part only hands runs on (the claimer starts them, the lease renewer
cancels them), ``Recorded`` stands in for the local executions and records
what it was handed; the cancel listener is driven against real ones.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async as db
from django.conf import settings
from django.utils import timezone

from core.bridge import END_EVENT, MemoryStreamBridge
from core.sync_threads import own_sync_thread
from runs.execution.cancel_listener import CancelListener, send_cancel, wake_claimers
from runs.execution.claimer import LeaseRenewer, RunClaimer
from runs.execution.cron_firing import CronFiring
from runs.execution.local_runs import LocalRuns
from runs.execution.orphans import HOSTNAME, OrphanRecovery
from runs.execution.ttl_sweeper import asweep_expired_threads
from runs.execution.webhook_outbox import WebhookOutbox
from runs.execution.worker import RunWorker
from runs.models import LOST_MESSAGE, ORPHAN_MESSAGE, Cron, Run
from runs.services import lifecycle
from runs.services.admission import run_admit
from runs.services.webhooks import WebhookJob
from tests.receiver import WebhookReceiver
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"input": {"messages": [{"role": "user", "content": "hello"}]}, "stream_mode": ["values"]}
SLOW = {"input": {"messages": [{"role": "user", "content": "/slow 20"}]}, "stream_mode": ["values"]}


class Recorded:
    """Stands in for ``LocalRuns``: records the runs a part starts or cancels instead of executing them."""

    def __init__(self, running: tuple[str, ...] = ()) -> None:
        self.running = list(running)
        self.started: list[str] = []
        self.cancelled: list[tuple[str, str]] = []
        self.changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self.ids())

    def ids(self) -> list[str]:
        return [*self.running, *self.started]

    def start(self, run: Run) -> None:
        self.started.append(run.run_id)
        self.changed.set()

    def cancel(self, run_id: str, action: str) -> bool:
        self.cancelled.append((run_id, action))
        return True


def _thread(owner, **fields) -> ThreadMeta:
    return ThreadMeta.objects.create(thread_id=f"wp-{uuid.uuid4().hex}", owner=owner.user, **fields)


def _admit(owner, *, kwargs=HELLO, after_seconds: float = 0) -> Run:
    thread = _thread(owner)
    run, _ = run_admit(
        owner=owner.user,
        thread=thread,
        assistant_id="lead_agent",
        strategy="reject",
        metadata={},
        kwargs=kwargs,
        after_seconds=after_seconds,
    )
    return run


def _running(thread: ThreadMeta, *, worker_id: str, **fields) -> Run:
    defaults = {
        "status": "running",
        "started_at": timezone.now(),
        "lease_expires_at": timezone.now() + timedelta(minutes=10),
    }
    return Run.objects.create(
        run_id=uuid.uuid4().hex,
        thread=thread,
        owner=thread.owner,
        assistant_id="lead_agent",
        worker_id=worker_id,
        **{**defaults, **fields},
    )


def _row(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


def _dead_pid() -> int:
    """Return the pid of a process of this host that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def _until(predicate, *, within: float = 10) -> None:
    """Wait for ``predicate()`` to hold, looking every loop turn or so; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


# -- claim and lease -----------------------------------------------------------


async def test_the_claimer_claims_its_admission_and_skips_a_delayed_run(owner):
    admitted = await db(_admit)(owner)
    delayed = await db(_admit)(owner, after_seconds=600)
    local = Recorded()
    claimer = RunClaimer(worker_id="w-claims", local=local, capacity=4, poll_seconds=30, lease_seconds=30)

    assert await claimer.dispatch(admitted.run_id, admitted=admitted)
    assert not await claimer.dispatch(delayed.run_id)
    await claimer.claim_pending()

    assert local.started == [admitted.run_id]
    claimed = await db(_row)(admitted)
    assert (claimed.status, claimed.worker_id) == ("running", "w-claims")
    assert (await db(_row)(delayed)).status == "pending"
    assert claimer.next_due == delayed.not_before  # the loop's timer is set for it


async def test_a_pass_fires_crons_into_and_claims_only_the_free_capacity(owner):
    runs = [await db(_admit)(owner) for _ in range(3)]
    local = Recorded(running=("already-here",))
    offered: list[int] = []

    async def fire_crons(free: int) -> None:
        offered.append(free)

    claimer = RunClaimer(
        worker_id="w-full", local=local, capacity=2, poll_seconds=30, lease_seconds=30, fire_crons=fire_crons
    )
    await claimer.claim_pending()

    assert offered == [1]
    assert local.started == [runs[0].run_id]  # the oldest, into the one free slot
    assert [(await db(_row)(run)).status for run in runs[1:]] == ["pending", "pending"]


async def test_the_claim_loop_starts_a_delayed_run_at_its_time_not_at_the_next_poll(owner):
    delayed = await db(_admit)(owner, after_seconds=0.5)
    local = Recorded()
    claimer = RunClaimer(worker_id="w-timer", local=local, capacity=4, poll_seconds=60, lease_seconds=30)
    looping = asyncio.create_task(claimer.run())
    try:
        claimer.note_due(delayed.not_before)  # as the process that admitted it does
        async with asyncio.timeout(10):
            await local.changed.wait()
    finally:
        claimer.stop()
        await asyncio.wait_for(looping, 5)
    assert local.started == [delayed.run_id]
    assert timezone.now() >= delayed.not_before


async def test_the_lease_renewer_extends_its_own_leases_and_passes_on_requested_cancels(owner):
    soon = timezone.now() + timedelta(seconds=5)
    mine = await db(_running)(
        await db(_thread)(owner, status="busy"), worker_id="w-lease", lease_expires_at=soon, cancel_action="interrupt"
    )
    theirs = await db(_running)(await db(_thread)(owner, status="busy"), worker_id="other", lease_expires_at=soon)
    local = Recorded(running=(mine.run_id, theirs.run_id))  # theirs too: the row's owner decides
    renewer = LeaseRenewer(worker_id="w-lease", local=local, lease_seconds=60)

    assert await renewer.renew() == {mine.run_id: "interrupt"}

    assert local.cancelled == [(mine.run_id, "interrupt")]
    assert (await db(_row)(mine)).lease_expires_at > timezone.now() + timedelta(seconds=50)
    assert (await db(_row)(theirs)).lease_expires_at == soon


# -- orphan recovery -------------------------------------------------------------


async def test_orphan_recovery_fails_a_run_whose_owner_pid_is_dead_and_promotes_its_queue(owner):
    bridge = MemoryStreamBridge(max_events=10)
    thread = await db(_thread)(owner, status="busy")
    # The lease is still valid for minutes: on this host the dead pid alone decides.
    dead = await db(_running)(thread, worker_id=f"{HOSTNAME}:{_dead_pid()}:gone")
    queued = await db(Run.objects.create)(
        run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent", status="queued"
    )
    alive = await db(_running)(await db(_thread)(owner, status="busy"), worker_id=f"{HOSTNAME}:{os.getppid()}:alive")
    promoted: list[tuple[str, str]] = []

    async def on_promoted(run_id: str, thread_id: str) -> None:
        promoted.append((run_id, thread_id))

    recovery = OrphanRecovery(
        worker_id="elsewhere:1:me", bridge=bridge, local=set(), grace_seconds=10, every=3600, on_promoted=on_promoted
    )
    assert await recovery.reconcile() == [dead.run_id]

    failed = await db(_row)(dead)
    assert (failed.status, failed.error) == ("error", ORPHAN_MESSAGE)
    assert (await db(_row)(alive)).status == "running"
    assert promoted == [(queued.run_id, thread.thread_id)]
    ends = [e async for e in bridge.subscribe(dead.run_id, after=None, idle_timeout=0.1) if e and e.event == END_EVENT]
    assert ends[0].data["error"] == ORPHAN_MESSAGE


async def test_orphan_recovery_ends_its_own_runs_only_when_no_local_task_holds_them(owner):
    long_ago = timezone.now() - timedelta(minutes=5)
    held = await db(_running)(await db(_thread)(owner, status="busy"), worker_id="w-own", started_at=long_ago)
    lost = await db(_running)(await db(_thread)(owner, status="busy"), worker_id="w-own", started_at=long_ago)

    async def on_promoted(run_id: str, thread_id: str) -> None:
        raise AssertionError("nothing was queued")

    recovery = OrphanRecovery(
        worker_id="w-own",
        bridge=MemoryStreamBridge(max_events=10),
        local={held.run_id},
        grace_seconds=10,
        every=3600,
        on_promoted=on_promoted,
    )
    assert await recovery.reconcile() == [lost.run_id]
    assert ((await db(_row)(lost)).status, (await db(_row)(lost)).error) == ("error", LOST_MESSAGE)
    assert (await db(_row)(held)).status == "running"


# -- cron firing ----------------------------------------------------------------


class Announced:
    """What cron firing hands on: the cancel signals and dispatches, as the worker would receive them."""

    def __init__(self) -> None:
        self.cancels: list[tuple[str, str, str]] = []
        self.dispatched: list[str] = []

    async def signal_cancel(self, *, run_id: str, worker_id: str, action: str) -> None:
        self.cancels.append((run_id, worker_id, action))

    def dispatch_soon(self, run_id: str, *, thread_id=None, not_before=None, admitted=None) -> None:
        self.dispatched.append(run_id)


def _due_cron(owner, path: str = "/api/runs/crons", **body) -> str:
    response = owner.client.post(
        path, {"assistant_id": "lead_agent", "schedule": "*/5 * * * *", "input": HELLO["input"], **body}, format="json"
    )
    assert response.status_code == 200, response.json()
    cron_id = response.json()["cron_id"]
    Cron.objects.filter(pk=cron_id).update(next_run_date=timezone.now() - timedelta(seconds=1))
    return cron_id


async def test_two_cron_firing_instances_racing_fire_a_due_cron_once(owner):
    cron_id = await db(_due_cron)(owner)
    announced = [Announced(), Announced()]
    parts = [CronFiring(signal_cancel=a.signal_cancel, dispatch_soon=a.dispatch_soon) for a in announced]

    async def fire(part: CronFiring):
        async with own_sync_thread():  # a thread (and connection) of its own, as two processes have
            return await part.fire_due()

    results = await asyncio.gather(*(fire(part) for part in parts))

    firings = [firing for batch in results for firing in batch]
    assert [firing.cron_id for firing in firings] == [cron_id]
    [run_id] = await db(lambda: list(Run.objects.values_list("run_id", flat=True)))()
    assert [*announced[0].dispatched, *announced[1].dispatched] == [run_id]
    assert announced[0].cancels == announced[1].cancels == []


async def test_a_cron_firing_signals_the_running_run_it_interrupts_and_leaves_its_own_queued(owner):
    thread = await db(_thread)(owner, status="busy")
    running = await db(_running)(thread, worker_id="w-busy")
    await db(_due_cron)(owner, f"/api/threads/{thread.thread_id}/runs/crons", multitask_strategy="interrupt")
    announced = Announced()

    [firing] = await CronFiring(signal_cancel=announced.signal_cancel, dispatch_soon=announced.dispatch_soon).fire_due()

    assert announced.cancels == [(running.run_id, "w-busy", "interrupt")]
    assert firing.run.status == "queued" and announced.dispatched == []


# -- TTL sweep -----------------------------------------------------------------


def _expired_thread(owner) -> str:
    response = owner.client.post("/api/threads", {"ttl": {"ttl": 5}}, format="json")
    assert response.status_code == 200, response.content
    thread_id = response.json()["thread_id"]
    ThreadMeta.objects.filter(pk=thread_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    return thread_id


async def test_the_ttl_sweep_deletes_an_expired_idle_thread_and_skips_a_busy_one(owner):
    idle = await db(_expired_thread)(owner)
    busy = await db(_expired_thread)(owner)
    await db(Run.objects.create)(
        run_id=uuid.uuid4().hex, thread_id=busy, owner=owner.user, assistant_id="lead_agent", status="pending"
    )

    report = await asweep_expired_threads()

    assert report.deleted == [idle]
    assert not await db(ThreadMeta.objects.filter(pk=idle).exists)()
    assert await db(ThreadMeta.objects.filter(pk=busy).exists)()


# -- the cancel listener and the local runs ----------------------------------------


async def test_the_cancel_listener_relays_a_cancel_to_a_local_execution(owner, closing_savers):
    worker_id = f"w-listens-{uuid.uuid4().hex[:6]}"
    run = await db(_admit)(owner, kwargs=SLOW)
    claimed = await db(lifecycle.run_claim)(run_id=run.run_id, worker_id=worker_id, lease_seconds=30)

    async def on_promoted(run_id: str, thread_id: str) -> None:
        raise AssertionError("nothing was queued")

    local = LocalRuns(bridge=MemoryStreamBridge(max_events=100), worker_id=worker_id, on_promoted=on_promoted)
    local.start(claimed)
    executing = local.tasks[run.run_id]
    listener = CancelListener(worker_id=worker_id, on_cancel=local.cancel)
    listening = asyncio.create_task(listener.run())
    try:
        await _until(lambda: listener.read is not None)  # subscribed: the read starts once the group is joined
        # The run sleeps 20 s unless cancelled. The signal is sent again each second: the channel layer may
        # drop one (the lease poll is the product's backstop, not running here), and the first action wins.
        deadline, done = time.monotonic() + 10, set()
        while not done and time.monotonic() < deadline:
            await send_cancel(worker_id=worker_id, run_id=run.run_id, action="interrupt")
            done, _ = await asyncio.wait({executing}, timeout=1)
        assert done, "the cancel did not reach the local execution"
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        await asyncio.gather(*[read for read in [listener.read] if read], return_exceptions=True)
        await local.shut_down(within=5)
    assert run.run_id not in local
    assert (await db(_row)(run)).status == "interrupted"


async def test_a_claiming_worker_claims_at_once_when_woken_over_the_channel_layer(owner, closing_savers):
    """The worker wires its listener to its claimer: a wake-up starts a pending run long before the poll."""
    worker = RunWorker(bridge=MemoryStreamBridge(max_events=100), claim=True, poll_seconds=60)
    await worker.start()
    try:
        await _until(lambda: worker.listener.read is not None)
        run = await db(_admit)(owner)
        await wake_claimers()

        deadline = time.monotonic() + 10  # the poll is 60 s away
        while (await db(_row)(run)).status == "pending":
            assert time.monotonic() < deadline, "the wake-up did not make the worker claim"
            await asyncio.sleep(0.02)
    finally:
        await worker.aclose()


# -- webhooks --------------------------------------------------------------------


@pytest.fixture
def private_webhooks(monkeypatch):
    """Let webhooks reach the receiver on 127.0.0.1."""
    monkeypatch.setattr(settings.DEERFLOW_CONFIG.runs.webhooks, "allow_private", True)


def _job(url: str) -> WebhookJob:
    run_id = uuid.uuid4().hex
    return WebhookJob(url=url, record={"run_id": run_id, "thread_id": f"gone-{run_id}"}, values={"done": True})


async def test_the_webhook_outbox_delivers_what_it_is_sent_before_its_drain_ends(private_webhooks):
    outbox = WebhookOutbox()
    with WebhookReceiver() as receiver:
        job = _job(receiver.url())
        outbox.send(job)
        await outbox.drain(within=10)
        assert [got.body["run_id"] for got in receiver.received] == [job.record["run_id"]]
    assert not outbox.tasks


async def test_the_webhook_outbox_abandons_a_delivery_that_outlives_the_drain(private_webhooks, caplog):
    outbox = WebhookOutbox()
    with WebhookReceiver([(200, 5.0)]) as receiver:
        job = _job(receiver.url())
        outbox.send(job)
        await receiver.arrived(1)  # in flight: the receiver holds its answer for 5 s
        started = time.monotonic()
        await outbox.drain(within=0.2)
        assert time.monotonic() - started < 2
    assert f"webhook delivery webhook-{job.record['run_id']} abandoned" in caplog.text
    assert not outbox.tasks
