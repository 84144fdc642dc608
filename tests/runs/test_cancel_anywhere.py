"""Cancel a running run from a plain synchronous thread, outside the event loop that executes it.

The admin and management commands are synchronous; ``run_cancel`` must stop a
run they did not start, through the worker's own loop, well before the lease
renewal (every 10 s at the default 30 s lease) would notice the request.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from django.db import connection

from runs.models import Run
from runs.services.admission import run_admit
from runs.services.cancel import run_cancel
from tests.helpers import raw_checkpoint_count
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


class ServingLoop:
    """An event loop in its own thread running this process's real worker, as the server's would."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self):
        from runs.execution.runtime import start_worker

        self.thread.start()
        self.worker = self.call(start_worker(claim=True))
        return self

    def call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __exit__(self, *exc) -> None:
        from checkpoints.runtime import aclose_async_resources
        from runs.execution.runtime import stop_worker

        self.call(stop_worker())
        self.call(aclose_async_resources())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _wait(predicate, within: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def _status(run_id: str) -> str:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).get()
    connection.close()
    return status


def test_a_sync_caller_outside_the_loop_cancels_a_running_run(owner):
    thread = ThreadMeta.objects.create(thread_id=f"cx-{uuid.uuid4().hex}", owner=owner.user)
    slow = {"input": {"messages": [{"role": "user", "content": "/slow 20"}]}, "stream_mode": ["messages-tuple"]}
    with ServingLoop() as serving:
        run, _ = run_admit(
            owner=owner.user, thread=thread, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs=slow
        )
        assert serving.call(serving.worker.dispatch(run.run_id))
        _wait(lambda: _status(run.run_id) == "running", within=10)

        fresh = run_cancel(run=run, action="interrupt")

        assert fresh.cancel_action == "interrupt"
        took = _wait(lambda: _status(run.run_id) == "interrupted", within=5)
    assert took < 3, f"the cancel took {took:.1f} s: it waited for the lease poll, not the signal"
    assert ThreadMeta.objects.get(pk=thread.pk).status == "idle"


def test_deleting_a_thread_cancels_its_running_run_then_deletes_everything(owner):
    """The Platform's DELETE: the running run is interrupted, then the thread goes with its runs."""
    thread = ThreadMeta.objects.create(thread_id=f"cx-{uuid.uuid4().hex}", owner=owner.user)
    slow = {"input": {"messages": [{"role": "user", "content": "/slow 20"}]}, "stream_mode": ["messages-tuple"]}
    with ServingLoop() as serving:
        run, _ = run_admit(
            owner=owner.user, thread=thread, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs=slow
        )
        assert serving.call(serving.worker.dispatch(run.run_id))
        _wait(lambda: _status(run.run_id) == "running", within=10)

        started = time.monotonic()
        response = owner.client.delete(f"/api/threads/{thread.thread_id}")

        assert response.status_code == 204, response.content
        assert time.monotonic() - started < 5
    assert not ThreadMeta.objects.filter(pk=thread.pk).exists()
    assert not Run.objects.filter(pk=run.pk).exists()
    assert raw_checkpoint_count(thread.thread_id) == 0
