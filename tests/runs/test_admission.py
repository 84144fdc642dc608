"""Run admission under each multitask strategy, and the one-active-run rule.

Runs are admitted with ``run_admit``, claimed with ``run_claim`` and ended
with ``run_finalize``, as a worker does. After every step the thread holds at
most one pending or running run (the oracle ``_assert_one_active``).
"""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import IntegrityError, connection, transaction

from core.errors import Conflict
from runs.models import Run
from runs.services import lifecycle
from runs.services.admission import CANCELLED_BEFORE_START, REJECT_MESSAGE, ROLLED_BACK, run_admit
from threads.models import ACTIVE_STATUSES, ThreadMeta

# Plain test transactions (cheap); only the races need real commits between connections.
pytestmark = pytest.mark.django_db


@pytest.fixture
def thread(owner) -> ThreadMeta:
    return ThreadMeta.objects.create(thread_id=f"adm-{uuid.uuid4().hex}", owner=owner.user)


def _admit(thread: ThreadMeta, strategy: str, text: str = "hi") -> tuple[Run, list[Run]]:
    kwargs = {"input": {"messages": [{"role": "user", "content": text}]}}
    return run_admit(
        owner=thread.owner, thread=thread, assistant_id="lead_agent", strategy=strategy, metadata={}, kwargs=kwargs
    )


def _running(thread: ThreadMeta, worker_id: str = "w") -> Run:
    run, _ = _admit(thread, "reject")
    claimed = lifecycle.run_claim(run_id=run.run_id, worker_id=worker_id, lease_seconds=30)
    assert claimed is not None
    return claimed


def _statuses(thread: ThreadMeta) -> dict[str, str]:
    return dict(Run.objects.filter(thread=thread).values_list("run_id", "status"))


def _assert_one_active(thread: ThreadMeta) -> None:
    active = Run.objects.filter(thread=thread, status__in=ACTIVE_STATUSES).count()
    assert active <= 1, f"{active} active runs on one thread: {_statuses(thread)}"


def _finish(run: Run, status: str = "success", worker_id: str = "w", **outcome) -> lifecycle.Finalization:
    return lifecycle.run_finalize(
        run_id=run.run_id, worker_id=worker_id, outcome=lifecycle.Outcome(status=status, **outcome)
    )


def test_reject_admits_a_run_on_a_free_thread(thread):
    run, superseded = _admit(thread, "reject")
    assert (run.status, superseded) == ("pending", [])
    assert _statuses(thread) == {run.run_id: "pending"}


@pytest.mark.parametrize("busy", ["pending", "running", "queued"])
def test_reject_refuses_a_thread_with_an_unfinished_run_and_writes_nothing(thread, busy):
    older = _running(thread)
    if busy == "pending":
        Run.objects.filter(pk=older.pk).update(status="pending", worker_id="")
    elif busy == "queued":
        Run.objects.filter(pk=older.pk).update(status="queued", worker_id="")
    before = _statuses(thread)

    with pytest.raises(Conflict) as refused:
        _admit(thread, "reject")

    assert str(refused.value) == REJECT_MESSAGE
    assert _statuses(thread) == before
    assert Run.objects.get(pk=older.pk).cancel_action == ""


@pytest.mark.parametrize(("strategy", "ended"), [("interrupt", "interrupted"), ("rollback", "error")])
def test_interrupt_and_rollback_ask_the_running_run_to_stop_and_queue_behind_it(thread, strategy, ended):
    older = _running(thread)

    newer, superseded = _admit(thread, strategy)

    assert newer.status == "queued"
    assert [(r.run_id, r.status, r.cancel_action) for r in superseded] == [(older.run_id, "running", strategy)]
    _assert_one_active(thread)
    # The executor sees the request and ends the run; the waiting one is promoted.
    outcome = {"error": ROLLED_BACK, "rollback_settled": True} if strategy == "rollback" else {}
    finalized = _finish(older, ended, **outcome)
    assert finalized.finalized and finalized.promoted_run_id == newer.run_id
    assert _statuses(thread) == {older.run_id: ended, newer.run_id: "pending"}


@pytest.mark.parametrize(
    ("strategy", "ended", "error"),
    [("interrupt", "interrupted", CANCELLED_BEFORE_START), ("rollback", "error", ROLLED_BACK)],
)
def test_interrupt_and_rollback_end_an_unstarted_run_at_once(thread, strategy, ended, error):
    older, _ = _admit(thread, "reject")  # pending: no executor will see a cancel request

    newer, superseded = _admit(thread, strategy)

    assert [r.run_id for r in superseded] == [older.run_id]
    older.refresh_from_db()
    assert (older.status, older.error, older.cancel_action) == (ended, error, strategy)
    assert older.finished_at is not None
    assert newer.status == "pending"


def test_a_second_interrupt_does_not_supersede_an_already_cancelled_run(thread):
    older = _running(thread)
    first, superseded = _admit(thread, "interrupt")
    assert [r.run_id for r in superseded] == [older.run_id]

    second, superseded = _admit(thread, "rollback")

    # The first action wins on ``older``; the queued ``first`` is ended instead.
    assert [r.run_id for r in superseded] == [first.run_id]
    assert Run.objects.get(pk=older.pk).cancel_action == "interrupt"
    assert Run.objects.filter(pk=first.pk).values_list("status", "error").get() == ("error", ROLLED_BACK)
    assert second.status == "queued"
    _assert_one_active(thread)


def test_enqueue_runs_wait_and_start_in_admission_order(thread):
    older = _running(thread)
    queued = [_admit(thread, "enqueue", text=f"turn {n}")[0] for n in range(3)]
    assert [r.status for r in queued] == ["queued"] * 3
    assert Run.objects.get(pk=older.pk).cancel_action == ""  # enqueue supersedes nothing

    started, current = [], older
    for _ in queued:
        finalized = _finish(current)
        _assert_one_active(thread)
        current = lifecycle.run_claim(run_id=finalized.promoted_run_id, worker_id="w", lease_seconds=30)
        started.append(current.run_id)
    assert started == [r.run_id for r in queued]
    assert _finish(current).promoted_run_id is None


def test_the_database_refuses_a_second_active_run_on_a_thread(thread):
    _running(thread)
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(
            run_id=uuid.uuid4().hex, thread=thread, owner=thread.owner, assistant_id="lead_agent", status="pending"
        )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt"])
def test_concurrent_admissions_leave_at_most_one_active_run(thread, strategy):
    """Four callers on their own connections admit at once; the database arbitrates."""
    results = _race(4, lambda: _admit(thread, strategy)[0].run_id)

    admitted = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if not isinstance(r, str)]
    assert all(isinstance(r, Conflict) for r in refused), refused
    _assert_one_active(thread)
    statuses = _statuses(thread)
    assert sorted(statuses) == sorted(admitted)
    if strategy == "reject":
        assert (len(admitted), list(statuses.values())) == (1, ["pending"])
    else:
        assert len(admitted) == 4
        assert list(statuses.values()).count("pending") == 1


def _race(callers: int, call) -> list:
    """Run ``call`` in ``callers`` threads released together; return results or exceptions."""
    barrier = threading.Barrier(callers)
    results: list = [None] * callers

    def target(index: int) -> None:
        try:
            barrier.wait(10)
            results[index] = call()
        except Exception as exc:  # compared by the caller
            results[index] = exc
        finally:
            connection.close()

    workers = [threading.Thread(target=target, args=(i,)) for i in range(callers)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    return results
