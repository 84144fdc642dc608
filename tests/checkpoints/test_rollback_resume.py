"""Rollback points and delta resume linearization, on the real savers of both backends."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import HumanMessage

from checkpoints.accessor import StateAccessor, thread_config
from checkpoints.errors import CheckpointModeMismatchError
from checkpoints.graphs import resolve_graph
from checkpoints.lineage import LineageError, ParentMissingError, find_checkpoint_before_message
from checkpoints.resume import ResumeStateError, alinearize
from checkpoints.rollback import RollbackError, RollbackPoint, acapture, arestore
from checkpoints.runtime import aclose_async_resources, async_resources

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["full", "delta"])
async def accessor(request):
    resources = await async_resources()
    yield StateAccessor(resolve_graph("lead_agent"), request.param, 2, saver=resources.saver, store=resources.store)
    await aclose_async_resources()


async def turn(accessor: StateAccessor, thread_id: str, text: str, **configurable) -> None:
    config = accessor.config(thread_id)
    config["configurable"].update(configurable)
    await accessor.graph.ainvoke({"messages": [HumanMessage(content=text)]}, config)


async def contents(accessor: StateAccessor, thread_id: str) -> list[str]:
    return [m.content for m in (await accessor.aget(thread_id)).values.get("messages", [])]


def new_thread() -> str:
    return f"rb-{uuid.uuid4().hex}"


async def test_restore_brings_back_the_pre_run_state(accessor):
    thread_id = new_thread()
    await turn(accessor, thread_id, "one")
    point = await acapture(accessor, thread_id)
    await turn(accessor, thread_id, "two")
    restored = await arestore(accessor, thread_id, point)
    assert await contents(accessor, thread_id) == ["one", "echo: one"]
    head = await accessor.aget(thread_id)
    assert head.config["configurable"]["checkpoint_id"] == restored
    if accessor.mode == "full":
        # Full mode forks from the captured checkpoint.
        assert head.parent_config["configurable"]["checkpoint_id"] == point.checkpoint_id
    else:
        # Delta mode rewrites the cancelled head instead (a fork would replay its writes).
        assert head.parent_config["configurable"]["checkpoint_id"] != point.checkpoint_id
    await turn(accessor, thread_id, "three")
    assert await contents(accessor, thread_id) == ["one", "echo: one", "three", "echo: three"]


async def test_restore_without_a_pre_run_checkpoint_empties_the_thread(accessor):
    thread_id = new_thread()
    point = await acapture(accessor, thread_id)
    assert point == RollbackPoint(None)
    await turn(accessor, thread_id, "first")
    assert await arestore(accessor, thread_id, point) is None
    assert await accessor.ahead_tuple(thread_id) is None


async def test_restore_reattaches_only_pre_run_pending_writes(accessor):
    thread_id = new_thread()
    await turn(accessor, thread_id, "/interrupt")
    point = await acapture(accessor, thread_id)
    assert point.pending_writes, "an interrupted head owns pending writes"
    await turn(accessor, thread_id, "next question")
    await arestore(accessor, thread_id, point)
    head = await accessor.ahead_tuple(thread_id)
    restored = sorted((w[1], repr(w[2])) for w in head.pending_writes)
    assert restored == sorted((w[1], repr(w[2])) for w in point.pending_writes)
    snapshot = await accessor.aget(thread_id)
    assert snapshot.interrupts and snapshot.interrupts[0].value == {"question": "approve?"}


async def test_malformed_pending_writes_fail_the_restore_loudly(accessor):
    thread_id = new_thread()
    await turn(accessor, thread_id, "one")
    good = await acapture(accessor, thread_id)
    waiting_thread = new_thread()
    await turn(accessor, waiting_thread, "/interrupt")
    waiting = await acapture(accessor, waiting_thread)
    head_before = (await accessor.aget(thread_id)).config["configurable"]["checkpoint_id"]
    waiting_before = (await accessor.aget(waiting_thread)).config["configurable"]["checkpoint_id"]
    for bad in ((("task", 7, "v"),), (("not", "a-triple"),)):
        with pytest.raises(RollbackError, match="malformed pending write"):
            await arestore(accessor, thread_id, RollbackPoint(good.checkpoint_id, bad))
        with pytest.raises(RollbackError, match="malformed pending write"):
            await arestore(accessor, waiting_thread, RollbackPoint(waiting.checkpoint_id, bad))
    # Nothing was written by the refused restores.
    assert (await accessor.aget(thread_id)).config["configurable"]["checkpoint_id"] == head_before
    assert (await accessor.aget(waiting_thread)).config["configurable"]["checkpoint_id"] == waiting_before


async def test_linearize_rewrites_the_head_in_delta_and_leaves_full_forks_alone(accessor):
    thread_id = new_thread()
    await turn(accessor, thread_id, "one")
    base = (await accessor.aget(thread_id)).config["configurable"]["checkpoint_id"]
    await turn(accessor, thread_id, "two")
    head_before = (await accessor.aget(thread_id)).config["configurable"]["checkpoint_id"]
    result = await alinearize(accessor, thread_id, base)
    if accessor.mode == "full":
        assert result is None
        assert await contents(accessor, thread_id) == ["one", "echo: one", "two", "echo: two"]
        return
    assert result["configurable"]["checkpoint_id"] not in (base, head_before)
    head = await accessor.aget(thread_id)
    assert head.parent_config["configurable"]["checkpoint_id"] == head_before
    assert await contents(accessor, thread_id) == ["one", "echo: one"]
    await turn(accessor, thread_id, "again")
    assert await contents(accessor, thread_id) == ["one", "echo: one", "again", "echo: again"]


async def test_linearize_is_a_no_op_at_the_head(accessor):
    thread_id = new_thread()
    await turn(accessor, thread_id, "one")
    head = (await accessor.aget(thread_id)).config["configurable"]["checkpoint_id"]
    count = len(await accessor.ahistory(thread_id, limit=None))
    assert await alinearize(accessor, thread_id, head) is None
    assert len(await accessor.ahistory(thread_id, limit=None)) == count


async def test_delta_linearize_fails_closed_on_an_unreadable_checkpoint():
    resources = await async_resources()
    accessor = StateAccessor(resolve_graph("lead_agent"), "delta", 2, saver=resources.saver, store=resources.store)
    thread_id = new_thread()
    await turn(accessor, thread_id, "one")
    try:
        with pytest.raises(ResumeStateError):
            await alinearize(accessor, thread_id, "1f000000-0000-6000-8000-000000000000")
    finally:
        await aclose_async_resources()


async def test_lineage_walk_finds_the_state_before_a_message(accessor):
    from checkpoints.accessor import state_accessor

    thread_id = new_thread()
    await turn(accessor, thread_id, "one")
    await turn(accessor, thread_id, "two")
    sync = state_accessor("lead_agent") if accessor.mode == "full" else None
    if sync is None:
        from checkpoints.runtime import sync_resources

        sync = StateAccessor(
            resolve_graph("lead_agent"), "delta", 2, saver=sync_resources().saver, store=sync_resources().store
        )
    head = sync.get(thread_id)
    second_human = head.values["messages"][2]
    base = find_checkpoint_before_message(sync, thread_id, head, second_human.id)
    assert [m.content for m in base.values["messages"]] == ["one", "echo: one"]
    first_human = head.values["messages"][0]
    root = find_checkpoint_before_message(sync, thread_id, head, first_human.id)
    assert root.values.get("messages", []) == []
    with pytest.raises(LineageError):
        find_checkpoint_before_message(sync, thread_id, base, second_human.id)
    assert issubclass(ParentMissingError, LineageError)


async def test_the_head_record_read_from_rows_equals_the_savers_tuple(accessor):
    """A run's pre-write gate reads the head's rows on SQLite (its values not decoded); the same id and writes as the saver's."""
    resources = await async_resources()
    spec = resolve_graph("lead_agent")
    from_rows = StateAccessor(
        spec, accessor.mode, 2, saver=resources.saver, store=resources.store, backend=resources.backend
    )
    thread_id = new_thread()
    assert await from_rows.ahead_record(thread_id) is None
    await turn(accessor, thread_id, "one")
    await turn(accessor, thread_id, "/interrupt please")
    saved = await resources.saver.aget_tuple(thread_config(thread_id))
    assert saved.pending_writes, "the head waits on an interrupt: it has pending writes"
    for reader in (accessor, from_rows):
        record = await reader.ahead_record(thread_id)
        assert record.checkpoint_id == saved.config["configurable"]["checkpoint_id"]
        assert record.pending_writes == tuple(saved.pending_writes)
    if accessor.mode == "delta":  # a full-mode process refuses a delta head (delta reads full)
        full = StateAccessor(spec, "full", 2, saver=resources.saver, store=resources.store, backend=resources.backend)
        with pytest.raises(CheckpointModeMismatchError):
            await full.ahead_record(thread_id)
