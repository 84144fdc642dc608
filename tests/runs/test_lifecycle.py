"""The run lifecycle in-process: finalize, the rollback gate, lock order, lost and orphaned runs."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async as db
from django.db import connection
from django.utils import timezone
from langchain_core.messages import HumanMessage

from checkpoints.accessor import state_accessor
from checkpoints.rollback import RollbackPoint
from core.bridge import END_EVENT, MemoryStreamBridge
from runs.execution.executor import RunExecution
from runs.execution.worker import RunWorker
from runs.models import LOST_MESSAGE, Run, RunEvent
from runs.services import lifecycle
from runs.services.admission import ROLLED_BACK, run_request_cancel
from tests.helpers import run_turns
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)
# Tests on one connection roll back instead of flushing the tables (~50 ms a test on PostgreSQL).
ONE_CONNECTION = pytest.mark.django_db


def _thread(owner, **fields) -> ThreadMeta:
    return ThreadMeta.objects.create(thread_id=f"lc-{uuid.uuid4().hex}", owner=owner.user, **fields)


def _running(thread: ThreadMeta, *, worker_id: str = "w", **fields) -> Run:
    defaults = {
        "status": "running",
        "started_at": timezone.now(),
        "lease_expires_at": timezone.now() + timedelta(seconds=30),
    }
    return Run.objects.create(
        run_id=uuid.uuid4().hex,
        thread=thread,
        owner=thread.owner,
        assistant_id=thread.assistant_id,
        worker_id=worker_id,
        **{**defaults, **fields},
    )


def test_a_rollback_requested_while_finishing_is_carried_out_before_any_outcome(owner):
    thread = _thread(owner, status="busy")
    run = _running(thread, cancel_action="rollback")
    success = lifecycle.Outcome(status="success")
    end = [{"event_type": "run.end", "content": {"status": "success"}}]

    refused = lifecycle.run_finalize(run_id=run.run_id, worker_id="w", outcome=success, events=end)

    assert refused.rollback_requested and not refused.finalized
    run.refresh_from_db()
    assert run.status == "running"
    assert ThreadMeta.objects.get(pk=thread.pk).status == "busy"  # nor is the thread settled
    assert not RunEvent.objects.filter(run=run).exists()  # no run.end for a running run
    rolled_back = lifecycle.Outcome(status="error", error=ROLLED_BACK, rollback_settled=True)
    assert lifecycle.run_finalize(run_id=run.run_id, worker_id="w", outcome=rolled_back, events=end).finalized
    run.refresh_from_db()
    assert (run.status, run.error) == ("error", ROLLED_BACK)
    assert ThreadMeta.objects.get(pk=thread.pk).status == "idle"


def test_finalize_records_events_and_outcome_together(owner):
    thread = _thread(owner, status="busy")
    run = _running(thread)
    events = [{"event_type": "run.end", "content": {"status": "success"}}]
    assert lifecycle.run_finalize(
        run_id=run.run_id, worker_id="someone-else", outcome=lifecycle.Outcome("success"), events=events
    ) == lifecycle.Finalization(False)
    assert not RunEvent.objects.filter(run=run).exists()
    assert ThreadMeta.objects.get(pk=thread.pk).status == "busy"
    assert lifecycle.run_finalize(
        run_id=run.run_id, worker_id="w", outcome=lifecycle.Outcome("success"), events=events
    ).finalized
    assert list(RunEvent.objects.filter(run=run).values_list("event_type", flat=True)) == ["run.end"]


@ONE_CONNECTION
def test_a_second_finalize_is_refused_and_changes_nothing(owner):
    thread = _thread(owner, status="busy")
    run = _running(thread)
    end = [{"event_type": "run.end", "content": {"status": "success"}}]
    assert lifecycle.run_finalize(run_id=run.run_id, worker_id="w", outcome=lifecycle.Outcome("success"), events=end)

    again = lifecycle.run_finalize(
        run_id=run.run_id, worker_id="w", outcome=lifecycle.Outcome("error", error="late"), events=end
    )

    assert again == lifecycle.Finalization(False)
    run.refresh_from_db()
    assert (run.status, run.error) == ("success", "")
    assert RunEvent.objects.filter(run=run).count() == 1
    assert ThreadMeta.objects.get(pk=thread.pk).status == "idle"


@ONE_CONNECTION
def test_finalize_writes_its_events_and_outcome_in_one_transaction(owner):
    """The outcome's write fails after the events were appended: neither stays."""
    from django.core.exceptions import FieldDoesNotExist

    thread = _thread(owner, status="busy")
    run = _running(thread)
    unwritable = lifecycle.Outcome("success", usage={"no_such_run_column": 1})
    end = [{"event_type": "run.end", "content": {"status": "success"}}]

    with pytest.raises(FieldDoesNotExist):
        lifecycle.run_finalize(run_id=run.run_id, worker_id="w", outcome=unwritable, events=end)

    assert not RunEvent.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert run.status == "running"
    assert ThreadMeta.objects.get(pk=thread.pk).status == "busy"


@ONE_CONNECTION
@pytest.mark.parametrize(
    ("outcome", "thread_status"),
    [
        (lifecycle.Outcome("success", title="Hello"), "idle"),
        (lifecycle.Outcome("error", error="boom"), "error"),
        (lifecycle.Outcome("success", pending_interrupt=True), "interrupted"),
        (lifecycle.Outcome("interrupted"), "idle"),
    ],
    ids=["success", "error", "pending-interrupt", "cancelled"],
)
def test_the_thread_status_follows_the_outcome(owner, outcome, thread_status):
    thread = _thread(owner, status="busy")
    run = _running(thread)
    assert lifecycle.run_finalize(run_id=run.run_id, worker_id="w", outcome=outcome).finalized
    thread.refresh_from_db()
    assert thread.status == thread_status
    if outcome.title:
        assert thread.display_name == outcome.title


# -- claim races: two claimers on their own connections, one pending run -------


def _pending(owner) -> Run:
    return _running(_thread(owner), worker_id="", status="pending", started_at=None, lease_expires_at=None)


def _claim_race(run: Run, workers: list[str]) -> list:
    barrier = threading.Barrier(len(workers))
    results: list = [None] * len(workers)

    def claim(index: int) -> None:
        try:
            barrier.wait(10)
            results[index] = lifecycle.run_claim(run_id=run.run_id, worker_id=workers[index], lease_seconds=30)
        except Exception as exc:  # asserted below
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_of_two_claimers_exactly_one_wins(owner):
    for _ in range(3):  # a few rounds: a lost race must be refused every time
        run = _pending(owner)
        results = _claim_race(run, ["w1", "w2"])

        assert not [r for r in results if isinstance(r, Exception)], results
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, results
        run.refresh_from_db()
        assert (run.status, run.worker_id) == ("running", winners[0].worker_id)
        assert ThreadMeta.objects.get(pk=run.thread_id).status == "busy"


def test_claim_pending_workers_split_the_runs_without_sharing_one(owner):
    runs = [_pending(owner) for _ in range(4)]
    claimed: dict[str, list[str]] = {}
    barrier = threading.Barrier(2)

    def claim_all(worker: str) -> None:
        try:
            barrier.wait(10)
            claimed[worker] = lifecycle.run_claim_pending(worker_id=worker, limit=10, lease_seconds=30)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim_all, args=(w,)) for w in ("w1", "w2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(claimed["w1"] + claimed["w2"]) == sorted(r.run_id for r in runs)
    owners = dict(Run.objects.filter(pk__in=[r.pk for r in runs]).values_list("run_id", "worker_id"))
    assert all(owners[run_id] == worker for worker, ids in claimed.items() for run_id in ids)


@ONE_CONNECTION
def test_a_run_with_a_cancel_request_is_not_claimed(owner):
    run = _pending(owner)
    Run.objects.filter(pk=run.pk).update(cancel_action="interrupt")
    assert lifecycle.run_claim(run_id=run.run_id, worker_id="w", lease_seconds=30) is None
    assert lifecycle.run_claim(run_id="no-such-run", worker_id="w", lease_seconds=30) is None
    run.refresh_from_db()
    assert (run.status, run.worker_id) == ("pending", "")
    # The lost claim marked nothing: the thread is not busy with a run that never started.
    thread = ThreadMeta.objects.get(pk=run.thread_id)
    assert (thread.status, thread.updated_at) == ("idle", run.thread.updated_at)


@ONE_CONNECTION
def test_a_claim_of_the_row_admitted_here_answers_what_the_database_holds(owner):
    admitted = _pending(owner)
    claimed = lifecycle.run_claim(run_id=admitted.run_id, worker_id="w", lease_seconds=30, admitted=admitted)

    stored = Run.objects.get(pk=admitted.run_id)
    fields = [f.attname for f in Run._meta.concrete_fields]
    assert [getattr(claimed, f) for f in fields] == [getattr(stored, f) for f in fields]
    assert (stored.status, stored.worker_id) == ("running", "w")
    assert (admitted.status, admitted.worker_id) == ("pending", "")  # the caller's object is left alone
    assert ThreadMeta.objects.get(pk=admitted.thread_id).status == "busy"


@pytest.fixture
def unstorable_graph(settings):
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": {**settings.DEERFLOW["GRAPHS"], "unstorable": "tests.runs.graphs:unstorable"},
    }
    return "unstorable"


async def test_a_reply_no_backend_can_store_still_finalizes_the_run(owner, unstorable_graph):
    from checkpoints.runtime import aclose_async_resources

    thread = await db(_thread)(owner, assistant_id=unstorable_graph, status="busy")
    run = await db(_running)(thread, kwargs={"input": {"messages": [{"role": "user", "content": "hi"}]}})
    run = await db(Run.objects.select_related("thread").get)(pk=run.pk)
    bridge = MemoryStreamBridge(max_events=100)
    try:
        outcome = await RunExecution(run, bridge=bridge, worker_id="w").execute()
    finally:
        await aclose_async_resources()

    assert outcome.status == "success"
    await db(run.refresh_from_db)()
    assert run.status == "success"
    assert run.last_ai_message == "bad\ufffdreply\ufffdend"
    stored = await db(lambda: list(RunEvent.objects.filter(run=run).order_by("seq")))()
    assert [e.event_type for e in stored][-1] == "run.end"
    ai = next(e for e in stored if e.event_type == "llm.ai.response")
    assert ai.content["content"] == "bad\ufffdreply\ufffdend"
    ends = [e async for e in bridge.subscribe(run.run_id, after=None, idle_timeout=0.1) if e and e.event == END_EVENT]
    assert ends[0].data["status"] == "success"


async def test_a_run_claimed_here_without_a_task_is_ended_by_this_worker(owner):
    worker = RunWorker(bridge=MemoryStreamBridge(max_events=10), claim=False, grace_seconds=1)
    thread = await db(_thread)(owner, status="busy")
    started = timezone.now() - timedelta(seconds=30)
    lost = await db(_running)(thread, worker_id=worker.worker_id, started_at=started)

    assert await worker.reconcile_orphans() == [lost.run_id]

    await db(lost.refresh_from_db)()
    assert (lost.status, lost.error) == ("error", LOST_MESSAGE)
    assert (await db(ThreadMeta.objects.get)(pk=thread.pk)).status == "error"


async def test_a_run_claimed_a_moment_ago_is_left_to_its_starting_task(owner):
    worker = RunWorker(bridge=MemoryStreamBridge(max_events=10), claim=False, grace_seconds=5)
    thread = await db(_thread)(owner, status="busy")
    fresh = await db(_running)(thread, worker_id=worker.worker_id)
    assert await worker.reconcile_orphans() == []
    await db(fresh.refresh_from_db)()
    assert fresh.status == "running"


async def test_orphan_recovery_carries_out_a_recorded_rollback(owner):
    from checkpoints.runtime import aclose_async_resources

    thread = await db(_thread)(owner, status="busy")
    await db(run_turns)(thread.thread_id, ["kept"])
    point = await db(_point_json)(thread.thread_id)
    await db(run_turns)(thread.thread_id, ["rolled back"])  # the dead run's writes
    dead = await db(_running)(
        thread,
        worker_id="elsewhere:1:dead",
        lease_expires_at=timezone.now() - timedelta(minutes=5),
        cancel_action="rollback",
        rollback_point=point,
    )
    worker = RunWorker(bridge=MemoryStreamBridge(max_events=10), claim=False)
    try:
        assert await worker.reconcile_orphans() == [dead.run_id]
    finally:
        await aclose_async_resources()

    await db(dead.refresh_from_db)()
    assert (dead.status, dead.error) == ("error", ROLLED_BACK)
    contents = await db(_contents)(thread.thread_id)
    assert contents == ["kept", "echo: kept"]
    assert (await db(ThreadMeta.objects.get)(pk=thread.pk)).status == "idle"


def _point_json(thread_id: str) -> dict:
    accessor = state_accessor("lead_agent")
    head = accessor.saver.get_tuple(accessor.config(thread_id))
    return RollbackPoint(head.config["configurable"]["checkpoint_id"]).to_json(accessor.saver.serde)


def _contents(thread_id: str) -> list[str]:
    return [m.content for m in state_accessor("lead_agent").get(thread_id).values["messages"]]


def test_a_rollback_point_survives_its_json_form_with_pending_writes():
    accessor = state_accessor("lead_agent")
    point = RollbackPoint("cp-1", (("task-1", "messages", [HumanMessage("hi", id="m1")]), ("task-2", "__resume__", 7)))
    again = RollbackPoint.from_json(point.to_json(accessor.saver.serde), accessor.saver.serde)
    assert again.checkpoint_id == "cp-1"
    assert again.pending_writes[1] == ("task-2", "__resume__", 7)
    assert again.pending_writes[0][2][0].content == "hi" and again.pending_writes[0][2][0].id == "m1"


# -- lock order (PostgreSQL: SQLite's one write lock cannot deadlock) ----------

LOCKERS = {
    "claim": lambda run: lifecycle.run_claim(run_id=run.run_id, worker_id="w2", lease_seconds=30),
    "finalize": lambda run: lifecycle.run_finalize(
        run_id=run.run_id, worker_id="w", outcome=lifecycle.Outcome("success")
    ),
    "fail_orphan": lambda run: lifecycle.run_fail_orphan(run_id=run.run_id),
    "cancel": lambda run: run_request_cancel(run=run, action="interrupt"),
}


@pytest.mark.postgres_only
@pytest.mark.parametrize("step", sorted(LOCKERS))
def test_each_lifecycle_step_locks_the_thread_before_the_run(owner, step):
    """Hold the thread row; the step must wait for it without having locked the run row.

    Admission locks the thread, then its runs; a step that locked the run first
    and the thread second made PostgreSQL answer ``deadlock detected``.
    """
    import psycopg

    thread = _thread(owner, status="busy")
    run = _running(thread, status="pending" if step == "claim" else "running")
    dsn = _dsn()
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as probe:
        holder.execute("SELECT 1 FROM threads_threadmeta WHERE thread_id = %s FOR UPDATE", [thread.thread_id])
        errors: list[BaseException] = []

        def step_in_thread():
            try:
                LOCKERS[step](run)
            except BaseException as exc:  # surfaced below
                errors.append(exc)
            finally:
                connection.close()

        worker = threading.Thread(target=step_in_thread)
        worker.start()
        _wait_until_blocked(probe)
        try:
            probe.execute("SELECT 1 FROM runs_run WHERE run_id = %s FOR UPDATE NOWAIT", [run.run_id])
        finally:
            holder.rollback()
            worker.join(10)
        assert not errors, errors


def _dsn() -> str:
    settings = connection.settings_dict
    return f"host={settings['HOST']} port={settings['PORT'] or 5432} dbname={settings['NAME']} user={settings['USER']}"


def _wait_until_blocked(probe, within: float = 10) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        (waiting,) = probe.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
        if waiting:
            return
        time.sleep(0.01)
    raise AssertionError("the step never waited for the thread lock")


async def test_a_worker_woken_as_it_stops_still_stops():
    """A wake-up that arrives with the stop's cancel never keeps the worker's loops going.

    On Python 3.11 ``asyncio.wait_for`` hands back what it waited for when
    that arrives as the cancel lands (CPython gh-86296): the claim loop (or
    the cancel listener) then went round again, and the worker's shutdown
    waited on it. Woken after each number of event-loop turns, the worker
    must stop long before its next poll (30 s).
    """
    import asyncio

    outcomes = []
    for turns in range(16):
        worker = RunWorker(bridge=MemoryStreamBridge(max_events=10), poll_seconds=30)
        await worker.start()
        worker.wake()
        for _ in range(turns):
            await asyncio.sleep(0)
        try:
            async with asyncio.timeout(5):
                await worker.aclose()
            outcomes.append((turns, "stopped"))
        except TimeoutError:
            outcomes.append((turns, "ran on"))
    assert outcomes == [(turns, "stopped") for turns in range(16)]


async def test_a_cancel_in_the_loop_turn_the_run_starts_ends_it_as_asked(owner):
    """The graph phase cancelled before its first step never reaches its own handler: the cancel still decides.

    Before, such a run ended ``error`` "shut down", whatever was asked.
    """
    import asyncio

    thread = await db(_thread)(owner, status="busy")
    run = await db(_running)(thread, kwargs={"input": {"messages": [{"role": "user", "content": "hi"}]}})
    run = await db(Run.objects.select_related("thread").get)(pk=run.pk)
    execution = RunExecution(run, bridge=MemoryStreamBridge(max_events=100), worker_id="w")
    executing = asyncio.ensure_future(execution.execute())
    await asyncio.sleep(0)  # one loop turn: execute() has made the graph phase, which has not run yet
    assert execution.graph_task is not None and not execution.graph_task.done()
    execution.cancel("interrupt")

    outcome = await executing

    assert (outcome.status, outcome.error) == ("interrupted", "Cancelled by user")
    await db(run.refresh_from_db)()
    assert run.status == "interrupted"
    assert (await db(ThreadMeta.objects.get)(pk=thread.pk)).status == "idle"
