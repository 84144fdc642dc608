"""A run's final values: taken from its own last checkpoint when it settled the thread, equal to a read of the head.

Differential: every run here ends, then the head is read through a fresh
accessor (the saver's rows, decoded) and serialized the way the state
routes do; the values the run published with its end marker must be exactly
those. Runs that stop with something left to do (an ``interrupt()``, an
``interrupt_before`` node) or fail must not take the shortcut.
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async as db

from checkpoints.accessor import astate_accessor
from checkpoints.runtime import aclose_async_resources
from checkpoints.serialization import serialize, serialize_channel_values
from core.bridge import END_EVENT, FROM_START, MemoryStreamBridge
from runs.execution.executor import RunExecution
from runs.models import Run
from runs.services.admission import run_admit
from runs.services.lifecycle import run_claim
from threads.services import thread_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def test_graphs(settings):
    graphs = {"agentic": "tests.runs.graphs:agentic", "asking_parent": "tests.runs.graphs:asking_parent"}
    settings.DEERFLOW = {**settings.DEERFLOW, "GRAPHS": {**settings.DEERFLOW["GRAPHS"], **graphs}}


async def _run(owner, graph_id: str, text: str, thread_id: str | None = None, **options):
    def admitted():
        nonlocal thread_id
        if thread_id is None:
            thread_id = thread_create(owner=owner.user, thread_id=None, metadata={"graph_id": graph_id})[0].thread_id
        from threads.models import ThreadMeta

        kwargs = {"input": {"messages": [{"role": "user", "content": text}]}, "stream_mode": ["values"], **options}
        run, _ = run_admit(
            owner=owner.user,
            thread=ThreadMeta.objects.get(pk=thread_id),
            assistant_id=graph_id,
            strategy="reject",
            metadata={},
            kwargs=kwargs,
        )
        run_claim(run_id=run.run_id, worker_id="w", lease_seconds=30)
        return Run.objects.select_related("thread").get(pk=run.pk)

    run = await db(admitted)()
    bridge = MemoryStreamBridge(max_events=1000)
    execution = RunExecution(run, bridge=bridge, worker_id="w")
    outcome = await execution.execute()
    end = [e async for e in bridge.subscribe(run.run_id, after=FROM_START, idle_timeout=1) if e is not None][-1]
    assert end.event == END_EVENT
    return run.thread_id, execution, outcome, end.data["values"]


async def _head_values(graph_id: str, thread_id: str) -> dict:
    snapshot = await (await astate_accessor(graph_id)).aget(thread_id)
    values = serialize_channel_values(snapshot.values or {})
    if snapshot.interrupts:
        values["__interrupt__"] = serialize(list(snapshot.interrupts))
    return values


@pytest.mark.parametrize(
    ("graph_id", "texts", "last_answer"),
    [
        ("lead_agent", ["hello there"], "echo: hello there"),
        ("lead_agent", ["first turn", "/image with a picture", "third turn"], "echo: third turn"),
        ("agentic", ["go"], "sub says hi"),
    ],
)
async def test_a_run_that_settled_the_thread_publishes_what_a_read_of_its_head_gives(
    owner, test_graphs, graph_id, texts, last_answer
):
    try:
        thread_id = None
        for text in texts:
            thread_id, execution, outcome, published = await _run(owner, graph_id, text, thread_id)
            assert outcome.status == "success" and not outcome.pending_interrupt
            assert execution.streamed_end.settled_values() is not None  # the shortcut was taken
            assert published == await _head_values(graph_id, thread_id)
        assert published["messages"][-1]["content"] == last_answer
    finally:
        await aclose_async_resources()


@pytest.mark.parametrize(
    ("graph_id", "text", "options"),
    [
        ("lead_agent", "/interrupt please", {}),
        ("asking_parent", "ask", {}),
        ("lead_agent", "stop before the agent", {"interrupt_before": ["agent"]}),
    ],
)
async def test_a_run_that_stopped_with_work_left_reads_the_head(owner, test_graphs, graph_id, text, options):
    try:
        thread_id, execution, outcome, published = await _run(owner, graph_id, text, **options)
        assert outcome.status == "success" and outcome.pending_interrupt
        assert execution.streamed_end.settled_values() is None
        assert published == await _head_values(graph_id, thread_id)
    finally:
        await aclose_async_resources()


async def test_a_failed_run_publishes_the_head_it_left(owner):
    try:
        thread_id, _, outcome, published = await _run(owner, "lead_agent", "/fail now")
        assert outcome.status == "error"
        assert published == await _head_values("lead_agent", thread_id)
    finally:
        await aclose_async_resources()
