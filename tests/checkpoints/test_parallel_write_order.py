"""A copied or restored thread replays parallel tasks' writes in the source's order.

Delta mode rebuilds ``messages`` by replaying each step's stored writes
sorted by (task path, task id); full mode stores the applied list. Each test
runs the graphs of ``parallel_graphs`` (three parallel writers: a copy that
drops the paths keeps their order by luck one time in six, or one in two for
the waiting agent's two finished tools) on REPEATS fresh threads, on the
pass's database saver and on LangGraph's InMemorySaver, in both modes, and
compares every checkpoint of the copy message by message with the source.
"""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from checkpoints.accessor import StateAccessor
from checkpoints.cached_saver import CachedHistorySaver
from checkpoints.history_cache import MemoryHistoryCache
from checkpoints.rollback import acapture, arestore
from checkpoints.runtime import aclose_async_resources, async_resources
from checkpoints.services import copy_thread_checkpoints
from tests.checkpoints.parallel_graphs import (
    AGENT_SPEC,
    BRANCHES,
    BRANCHES_SPEC,
    WAITING_AGENT_SPEC,
    WAITING_BRANCHES_SPEC,
)
from tests.checkpoints.support import accessor, new_thread_id

pytestmark = pytest.mark.django_db(transaction=True)

# No snapshot between the steps: every read replays the stored writes.
CADENCE = 100
# Lucky passes of the old code: (1/6)^10 for three writers, (1/2)^10 = 1/1024 for two.
REPEATS = 10


def delta_wrapped(saver):
    """Wrap ``saver`` as a delta process does (its history cache in front)."""
    return CachedHistorySaver(saver, MemoryHistoryCache(prefix=f"test-order:{uuid.uuid4().hex[:8]}", max_entries=4096))


@pytest.fixture(params=["full", "delta"])
def mode_saver(request, saver):
    """(mode, the saver a process in that mode writes through) on each saver kind."""
    return request.param, delta_wrapped(saver) if request.param == "delta" else saver


def messages(snapshot) -> list[tuple[str, str, str]]:
    return [(m.type, str(m.content), m.id) for m in snapshot.values.get("messages", [])]


def history(acc: StateAccessor, thread_id: str) -> list[tuple[str, list]]:
    """Return every checkpoint's id and messages, newest first."""
    return [(s.config["configurable"]["checkpoint_id"], messages(s)) for s in acc.history(thread_id, limit=None)]


def contents(acc: StateAccessor, thread_id: str) -> list[str]:
    return [content for _, content, _ in messages(acc.get(thread_id))]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (BRANCHES_SPEC, ["hi", *BRANCHES]),
        (AGENT_SPEC, ["hi", "", "found one", "found two", "found three", "done"]),
    ],
    ids=["branches", "agent"],
)
def test_copy_keeps_the_order_of_parallel_writes(mode_saver, spec, expected):
    mode, saver = mode_saver
    acc = accessor(mode, CADENCE, saver=saver, spec=spec)
    for _ in range(REPEATS):
        source, target = new_thread_id("src"), new_thread_id("copy")
        acc.graph.invoke({"messages": [HumanMessage("hi")]}, acc.config(source))
        assert contents(acc, source) == expected
        copy_thread_checkpoints(saver, source_thread_id=source, target_thread_id=target)
        assert history(acc, target) == history(acc, source)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (WAITING_BRANCHES_SPEC, ["hi", *BRANCHES, "xray yes"]),
        (WAITING_AGENT_SPEC, ["hi", "", "found one", "found two", "asked three: yes", "done"]),
    ],
    ids=["branches", "agent"],
)
def test_a_copied_waiting_thread_resumes_in_the_sources_order(mode_saver, spec, expected):
    """The head's pending writes (the finished branches) keep their paths, so the resumed step sorts as live."""
    mode, saver = mode_saver
    acc = accessor(mode, CADENCE, saver=saver, spec=spec)
    for _ in range(REPEATS):
        source, target = new_thread_id("src"), new_thread_id("copy")
        acc.graph.invoke({"messages": [HumanMessage("hi")]}, acc.config(source))
        copy_thread_checkpoints(saver, source_thread_id=source, target_thread_id=target)
        for thread_id in (source, target):
            acc.graph.invoke(Command(resume="yes"), acc.config(thread_id))
        assert contents(acc, source) == expected
        # Ids are not compared: full mode gives the resumed step's messages theirs as it applies them.
        assert contents(acc, target) == contents(acc, source)


@pytest.fixture(params=["full", "delta"])
async def async_acc_factory(request):
    """Build async accessors in each mode on the pass's async saver (wrapped in delta)."""
    resources = await async_resources()
    saver = delta_wrapped(resources.saver) if request.param == "delta" else resources.saver

    def build(spec):
        return StateAccessor(spec, request.param, CADENCE, saver=saver, store=resources.store)

    yield build
    await aclose_async_resources()


async def amessages(acc: StateAccessor, thread_id: str) -> list[tuple[str, str]]:
    return [(m.type, str(m.content)) for m in (await acc.aget(thread_id)).values.get("messages", [])]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (WAITING_BRANCHES_SPEC, ["hi", *BRANCHES, "xray yes"]),
        (WAITING_AGENT_SPEC, ["hi", "", "found one", "found two", "asked three: yes", "done"]),
    ],
    ids=["branches", "agent"],
)
async def test_rollback_restores_pending_writes_in_their_order(async_acc_factory, spec, expected):
    """A cancelled resume rolled back: the re-attached branch writes replay as the uninterrupted thread's did."""
    acc = async_acc_factory(spec)
    for _ in range(REPEATS):
        source, restored = new_thread_id("src"), new_thread_id("rb")
        for thread_id in (source, restored):
            await acc.graph.ainvoke({"messages": [HumanMessage("hi")]}, acc.config(thread_id))
        point = await acapture(acc, restored)
        await acc.graph.ainvoke(Command(resume="cancelled"), acc.config(restored))
        await arestore(acc, restored, point)
        for thread_id in (source, restored):
            await acc.graph.ainvoke(Command(resume="yes"), acc.config(thread_id))
        assert [content for _, content in await amessages(acc, source)] == expected
        assert await amessages(acc, restored) == await amessages(acc, source)
