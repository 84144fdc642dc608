"""A graph compiling its own ``DeltaChannel`` (deepagents) resumes and rolls back linearly in a full-mode process.

Which path resume and rollback take follows how the graph stores
``messages``, not the process mode: forking a delta thread would replay the
abandoned branch's writes.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from checkpoints.accessor import StateAccessor
from checkpoints.resume import alinearize
from checkpoints.rollback import acapture, arestore
from checkpoints.runtime import aclose_async_resources, async_resources
from tests.checkpoints.support import NOOP_SPEC, OWN_DELTA_SPEC, new_thread_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=[OWN_DELTA_SPEC, NOOP_SPEC], ids=["own-delta", "add-messages"])
async def full_process_accessor(request):
    """An accessor as a full-mode process builds it, for a graph with and one without its own DeltaChannel."""
    resources = await async_resources()
    yield StateAccessor(request.param, "full", 2, saver=resources.saver, store=resources.store)
    await aclose_async_resources()


async def turn(accessor: StateAccessor, thread_id: str, text: str) -> None:
    await accessor.graph.ainvoke({"messages": [HumanMessage(content=text)]}, accessor.config(thread_id))


async def contents(accessor: StateAccessor, thread_id: str) -> list[str]:
    return [m.content for m in (await accessor.aget(thread_id)).values.get("messages", [])]


async def head_id(accessor: StateAccessor, thread_id: str) -> str:
    return (await accessor.aget(thread_id)).config["configurable"]["checkpoint_id"]


async def test_the_storage_follows_the_graphs_own_channel(full_process_accessor):
    own = full_process_accessor.spec == OWN_DELTA_SPEC
    assert full_process_accessor.mode == "full"
    assert full_process_accessor.storage_mode == ("delta" if own else "full")


async def test_resume_from_an_older_checkpoint_linearizes_only_a_delta_graph(full_process_accessor):
    acc, thread_id = full_process_accessor, new_thread_id("own-resume")
    await turn(acc, thread_id, "one")
    base = await head_id(acc, thread_id)
    await turn(acc, thread_id, "two")
    await turn(acc, thread_id, "three")
    head_before = await head_id(acc, thread_id)

    result = await alinearize(acc, thread_id, base)

    if acc.storage_mode == "full":
        assert result is None, "full storage forks as LangGraph does"
        return
    assert result is not None and result["configurable"]["checkpoint_id"] not in (base, head_before)
    head = await acc.aget(thread_id)
    assert head.parent_config["configurable"]["checkpoint_id"] == head_before, "written over the head, not forked"
    assert await contents(acc, thread_id) == ["one"]
    await turn(acc, thread_id, "again")
    assert await contents(acc, thread_id) == ["one", "again"]


async def test_rollback_rewrites_the_head_of_a_delta_graph_and_forks_a_full_one(full_process_accessor):
    acc, thread_id = full_process_accessor, new_thread_id("own-rollback")
    await turn(acc, thread_id, "one")
    await turn(acc, thread_id, "two")
    point = await acapture(acc, thread_id)
    await turn(acc, thread_id, "cancelled")
    await turn(acc, thread_id, "cancelled too")

    restored = await arestore(acc, thread_id, point)

    head = await acc.aget(thread_id)
    assert head.config["configurable"]["checkpoint_id"] == restored
    parent = head.parent_config["configurable"]["checkpoint_id"]
    if acc.storage_mode == "full":
        assert parent == point.checkpoint_id
    else:
        assert parent != point.checkpoint_id, "a fork would replay the cancelled run's writes"
    assert await contents(acc, thread_id) == ["one", "two"]
    await turn(acc, thread_id, "three")
    assert await contents(acc, thread_id) == ["one", "two", "three"]
