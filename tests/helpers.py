"""Test helpers that drive real components (no mocks of our storage)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from django.db import connection
from langchain_core.messages import HumanMessage

from checkpoints.accessor import state_accessor, thread_config


def run_turns(thread_id: str, texts: list[str], *, assistant_id: str = "lead_agent") -> list[dict[str, Any]]:
    """Run the real demo graph on the thread with the process's sync saver, one turn per text."""
    accessor = state_accessor(assistant_id)
    results = []
    for text in texts:
        config = accessor.config(thread_id)
        results.append(accessor.graph.invoke({"messages": [HumanMessage(content=text)]}, config))
    return results


def raw_checkpoint_count(thread_id: str) -> int:
    """Count the thread's checkpoints through the saver API."""
    accessor = state_accessor("lead_agent")
    return sum(1 for _ in accessor.saver.list(thread_config(thread_id)))


async def aexecute_run(owner, thread, graph_id: str, data: dict[str, Any]):
    """Admit a run of ``graph_id`` on ``thread``, claim it and execute it on this loop, as a worker does.

    Return (run id, the thread row afterwards); the run must succeed.
    """
    from channels.db import database_sync_to_async as db

    from core.bridge import MemoryStreamBridge
    from runs.execution.executor import RunExecution
    from runs.services.admission import run_admit
    from runs.services.lifecycle import run_claim
    from runs.services.run_request import RunRequest
    from threads.models import ThreadMeta

    request = RunRequest.from_body({"assistant_id": graph_id, **data})
    run, _ = await db(run_admit)(
        owner=owner.user,
        thread=thread,
        assistant_id=graph_id,
        strategy="reject",
        metadata={},
        kwargs=request.run_kwargs(None),
    )
    run = await db(run_claim)(run_id=run.run_id, worker_id="w", lease_seconds=30)
    outcome = await RunExecution(run, bridge=MemoryStreamBridge(max_events=100), worker_id="w").execute()
    assert outcome.status == "success", outcome.error
    return run.run_id, await db(ThreadMeta.objects.get)(pk=thread.pk)


async def anew_thread(owner):
    """Create a thread as ``threads.create()`` does (the default graph)."""
    from channels.db import database_sync_to_async as db

    from threads.services import thread_create

    thread, _ = await db(thread_create)(owner=owner.user, metadata={})
    return thread


def at_once(call: Callable[[], Any], count: int) -> list[Any]:
    """Run ``call`` in ``count`` threads released together; return their results (an error in any fails the test).

    Each thread has its own database connection, closed when it ends.
    """
    barrier = threading.Barrier(count)
    results: list[Any] = []
    errors: list[BaseException] = []

    def racer() -> None:
        try:
            barrier.wait(10)
            results.append(call())
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)
        finally:
            connection.close()

    racers = [threading.Thread(target=racer) for _ in range(count)]
    for racer_ in racers:
        racer_.start()
    for racer_ in racers:
        racer_.join(60)
    assert not errors, errors
    assert len(results) == count, "a racer did not finish"
    return results


@contextlib.asynccontextmanager
async def in_process_api(api_key: str):
    """An httpx client on this process's ASGI app (``/api``, the key sent), the runtime started and then stopped."""
    import httpx

    from deerflow_site import lifecycle
    from deerflow_site.asgi import application

    await lifecycle.startup()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=application),
            base_url="http://127.0.0.1/api",
            headers={"x-api-key": api_key},
            timeout=60,
        ) as client:
            yield client
    finally:
        await lifecycle.shutdown()
