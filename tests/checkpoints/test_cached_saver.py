"""The delta history cache never changes an answer (differential oracle), and saves the walks.

Every test runs real delta graphs (cadence 2 unless stated) on the pass's
database saver and on InMemorySaver, with the memory LRU and with real Redis.
The oracle is the same raw saver without the wrapper: for every checkpoint of
the thread, ``get_delta_channel_history`` and the materialized state read
through the cache must equal the raw answers, cold and warm.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from checkpoints.accessor import StateAccessor, thread_config
from checkpoints.cached_saver import MAX_COMPOSE_DEPTH, CachedHistorySaver
from checkpoints.graphs import resolve_graph
from checkpoints.runtime import aclose_async_resources, async_resources, sync_resources
from tests.checkpoints.support import accessor, checkpoint_tuples, invoke, new_thread_id

pytestmark = pytest.mark.django_db(transaction=True)
CHANNELS = ["messages"]


def histories(saver, raw, thread_id: str) -> dict[str, Any]:
    """Return every checkpoint's messages history as ``saver`` answers it (ids listed by ``raw``)."""
    return {
        t.config["configurable"]["checkpoint_id"]: saver.get_delta_channel_history(config=t.config, channels=CHANNELS)
        for t in checkpoint_tuples(raw, thread_id)
    }


def materialized(acc: StateAccessor, thread_id: str) -> list[Any]:
    return [(s.config["configurable"]["checkpoint_id"], s.values) for s in acc.history(thread_id, limit=None)]


def assert_equal_to_oracle(cached: CachedHistorySaver, raw, thread_id: str) -> None:
    assert histories(cached, raw, thread_id) == histories(raw, raw, thread_id)
    assert materialized(accessor("delta", saver=cached), thread_id) == materialized(
        accessor("delta", saver=raw), thread_id
    )
    latest = cached.get_delta_channel_history(config=thread_config(thread_id), channels=CHANNELS)
    assert latest == raw.get_delta_channel_history(config=thread_config(thread_id), channels=CHANNELS)
    assert cached.stats.snapshot()["errors"] == 0


def test_sequential_run_composes_without_inner_walks(saver, make_cache):
    cache = make_cache()
    cached = CachedHistorySaver(saver, cache)
    thread_id = new_thread_id("seq")
    # Cadence 10 (a snapshot every 5 turns): most turns start on a non-snapshot
    # head, whose history is composed from the previous turn's cached head.
    invoke(accessor("delta", 10, saver=cached), thread_id, "1", "2", "3", "4", "5", "6", "7")
    counts = cache.stats.snapshot()
    assert counts["walks"] == 0 and counts["composes"] > 0 and counts["errors"] == 0
    assert [m.content for m in accessor("delta", 10, saver=cached).get(thread_id).values["messages"]][-2:] == [
        "7",
        "echo: 7",
    ]

    assert_equal_to_oracle(cached, saver, thread_id)  # cold for most checkpoints
    warm_before = cache.stats.snapshot()
    assert_equal_to_oracle(cached, saver, thread_id)  # warm
    warm_after = cache.stats.snapshot()
    assert warm_after["walks"] == warm_before["walks"] == 0
    assert warm_after["misses"] == warm_before["misses"]
    assert warm_after["hits"] > warm_before["hits"]
    # Warm reads by checkpoint id cost no checkpoint read; resolving "latest" costs one.
    assert warm_after["tuple_reads"] == warm_before["tuple_reads"] + 1


def test_cache_disabled_parity(saver):
    from checkpoints.history_cache import MemoryHistoryCache

    cache = MemoryHistoryCache(prefix="disabled", max_entries=0)
    cached = CachedHistorySaver(saver, cache)
    thread_id = new_thread_id("off")
    invoke(accessor("delta", saver=cached), thread_id, "1", "2", "3")
    assert_equal_to_oracle(cached, saver, thread_id)
    counts = cache.stats.snapshot()
    assert counts["hits"] == 0 and counts["stores"] == 0 and len(cache) == 0
    assert counts["walks"] > 0


def test_branch_divergence_has_no_cross_contamination(saver, make_cache):
    cached = CachedHistorySaver(saver, make_cache())
    acc = accessor("delta", saver=cached)
    thread_id = new_thread_id("branch")
    invoke(acc, thread_id, "1", "2", "3")
    original_head = acc.get(thread_id)
    assert_equal_to_oracle(cached, saver, thread_id)  # warm the original chain
    fork_point = acc.history(thread_id, limit=None)[4].config["configurable"]["checkpoint_id"]
    acc.update(thread_id, {"title": "fork"}, checkpoint_id=fork_point)
    invoke(acc, thread_id, "fork turn")
    assert [m.content for m in acc.get(thread_id).values["messages"]][-2:] == ["fork turn", "echo: fork turn"]
    assert "3" not in [m.content for m in acc.get(thread_id).values["messages"]]
    again = acc.get(thread_id, checkpoint_id=original_head.config["configurable"]["checkpoint_id"])
    assert again.values == original_head.values
    assert_equal_to_oracle(cached, saver, thread_id)


def test_interrupt_resume_appends_head_writes(saver, make_cache):
    cached = CachedHistorySaver(saver, make_cache())
    acc = accessor("delta", saver=cached)
    thread_id = new_thread_id("interrupt")
    invoke(acc, thread_id, "hello", "/interrupt")
    assert acc.get(thread_id).next == ("agent",)
    assert_equal_to_oracle(cached, saver, thread_id)  # the interrupted head is cached before the resume
    acc.graph.invoke(Command(resume="yes"), acc.config(thread_id))
    assert [m.content for m in acc.get(thread_id).values["messages"]][-1] == "resumed: yes"
    assert_equal_to_oracle(cached, saver, thread_id)


def test_eviction_only_costs_performance(saver):
    from checkpoints.history_cache import MemoryHistoryCache

    cache = MemoryHistoryCache(prefix="tiny", max_entries=2)
    cached = CachedHistorySaver(saver, cache)
    thread_id = new_thread_id("evict")
    invoke(accessor("delta", saver=cached), thread_id, "1", "2", "3", "4")
    assert_equal_to_oracle(cached, saver, thread_id)
    assert_equal_to_oracle(cached, saver, thread_id)
    assert cache.stats.snapshot()["evictions"] > 0
    assert len(cache) <= 2


def test_rerun_from_an_old_checkpoint_does_not_pollute(saver, make_cache):
    cached = CachedHistorySaver(saver, make_cache())
    acc = accessor("delta", saver=cached)
    thread_id = new_thread_id("rerun")
    invoke(acc, thread_id, "1", "2", "3")
    chain = {cid: h for cid, h in histories(cached, saver, thread_id).items()}
    early = acc.history(thread_id, limit=None)[-3]
    # Re-run from an early checkpoint: a new branch supersedes the old head.
    acc.graph.invoke(
        {"messages": [HumanMessage("again")]}, acc.config(thread_id, early.config["configurable"]["checkpoint_id"])
    )
    assert [m.content for m in acc.get(thread_id).values["messages"]] == ["1", "echo: 1", "again", "echo: again"]
    for checkpoint_id, history in chain.items():
        config = thread_config(thread_id, checkpoint_id)
        assert cached.get_delta_channel_history(config=config, channels=CHANNELS) == history
    assert_equal_to_oracle(cached, saver, thread_id)


def test_full_thread_read_in_delta_mode_through_the_cache(saver, make_cache):
    """The migration path: full checkpoints seed the cache, later delta writes compose on them."""
    cached = CachedHistorySaver(saver, make_cache())
    thread_id = new_thread_id("mig")
    invoke(accessor("full", saver=saver), thread_id, "f1", "f2")
    invoke(accessor("delta", saver=cached), thread_id, "d1", "d2", "d3")
    assert [m.content for m in accessor("delta", saver=cached).get(thread_id).values["messages"]] == [
        "f1",
        "echo: f1",
        "f2",
        "echo: f2",
        "d1",
        "echo: d1",
        "d2",
        "echo: d2",
        "d3",
        "echo: d3",
    ]
    assert_equal_to_oracle(cached, saver, thread_id)


def test_deep_cold_chain_composes_to_the_depth_budget_then_walks_once(saver, make_cache):
    cache = make_cache()
    thread_id = new_thread_id("deep")
    # Cadence 100: no snapshot, so the head's history reaches back to the root.
    invoke(accessor("delta", 100, saver=saver), thread_id, "1", "2", "3", "4", "5")
    cached = CachedHistorySaver(saver, cache)
    head = checkpoint_tuples(saver, thread_id)[0]
    result = cached.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert result == saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert [w[2][0].content for w in result["messages"]["writes"]] == [
        "1",
        "echo: 1",
        "2",
        "echo: 2",
        "3",
        "echo: 3",
        "4",
        "echo: 4",
        "5",
        "echo: 5",
    ]
    counts = cache.stats.snapshot()
    assert counts["misses"] == 1 and counts["walks"] == 1
    assert counts["composes"] == MAX_COMPOSE_DEPTH
    # The target, then one parent per composed level.
    assert counts["tuple_reads"] == MAX_COMPOSE_DEPTH + 1
    # Every level on the way was cached: re-reading them costs no checkpoint read.
    chain = checkpoint_tuples(saver, thread_id)[: MAX_COMPOSE_DEPTH + 1]
    for t in chain:
        assert cached.get_delta_channel_history(config=t.config, channels=CHANNELS) == saver.get_delta_channel_history(
            config=t.config, channels=CHANNELS
        )
    after = cache.stats.snapshot()
    assert after["hits"] == len(chain) and after["tuple_reads"] == counts["tuple_reads"]


def test_latest_config_is_cached_under_the_resolved_checkpoint_id(saver, make_cache):
    cache = make_cache()
    thread_id = new_thread_id("latest")
    invoke(accessor("delta", saver=saver), thread_id, "1", "2")
    cached = CachedHistorySaver(saver, cache)
    latest = cached.get_delta_channel_history(config=thread_config(thread_id), channels=CHANNELS)
    reads = cache.stats.snapshot()["tuple_reads"]
    head_id = checkpoint_tuples(saver, thread_id)[0].config["configurable"]["checkpoint_id"]
    assert cached.get_delta_channel_history(config=thread_config(thread_id, head_id), channels=CHANNELS) == latest
    counts = cache.stats.snapshot()
    assert counts["hits"] == 1 and counts["tuple_reads"] == reads
    # "Latest" is never a key: after a new turn it resolves to the new head.
    invoke(accessor("delta", saver=saver), thread_id, "3")
    newer = cached.get_delta_channel_history(config=thread_config(thread_id), channels=CHANNELS)
    assert newer == saver.get_delta_channel_history(config=thread_config(thread_id), channels=CHANNELS)
    assert newer != latest


def test_unknown_checkpoint_answers_like_the_saver(saver, make_cache):
    cached = CachedHistorySaver(saver, make_cache())
    config = thread_config(new_thread_id("ghost"), "1f000000-0000-6000-8000-000000000000")
    assert cached.get_delta_channel_history(config=config, channels=CHANNELS) == {"messages": {"writes": []}}
    assert cached.get_delta_channel_history(config=config, channels=[]) == {}


def test_in_place_mutation_of_a_read_cannot_change_the_next_read(saver, make_cache):
    cached = CachedHistorySaver(saver, make_cache())
    thread_id = new_thread_id("mutate")
    invoke(accessor("delta", saver=cached), thread_id, "1", "2", "3")
    head = checkpoint_tuples(saver, thread_id)[0]
    first = cached.get_delta_channel_history(config=head.config, channels=CHANNELS)
    seed = first["messages"]["seed"].value
    seed[0].content = "tampered"
    seed.clear()
    first["messages"]["writes"].clear()
    again = cached.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert again == saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert again["messages"]["seed"].value[0].content == "1"


def test_deleting_a_thread_purges_only_its_entries(saver, make_cache):
    cache = make_cache()
    cached = CachedHistorySaver(saver, cache)
    doomed, kept = new_thread_id("doomed"), new_thread_id("kept")
    for thread_id in (doomed, kept):
        invoke(accessor("delta", saver=cached), thread_id, "1", "2")
        histories(cached, saver, thread_id)
    assert cache_keys(cache, doomed) and cache_keys(cache, kept)
    cached.delete_thread(doomed)
    assert cache_keys(cache, doomed) == []
    assert cache_keys(cache, kept)
    assert checkpoint_tuples(saver, doomed) == []
    hits = cache.stats.snapshot()["hits"]
    assert histories(cached, saver, kept) == histories(saver, saver, kept)
    assert cache.stats.snapshot()["hits"] == hits + len(checkpoint_tuples(saver, kept))


def cache_keys(cache, thread_id: str) -> list[str]:
    """Return the keys a cache holds for a thread (memory index or Redis SCAN)."""
    from checkpoints.history_cache import thread_pattern

    if cache.kind == "memory":
        return sorted(cache._by_thread.get(thread_id, ()))
    return sorted(cache.client.scan_iter(match=thread_pattern(cache.prefix, thread_id), count=1000))


@pytest.mark.postgres_only
def test_prune_purges_the_pruned_threads_entries(db_saver, make_cache):
    """keep_latest cuts the kept head from its parent, so its history changes: the cache must forget it."""
    cache = make_cache()
    cached = CachedHistorySaver(db_saver, cache)
    thread_id = new_thread_id("prune")
    invoke(accessor("full", saver=db_saver), thread_id, "1", "2")
    head = checkpoint_tuples(db_saver, thread_id)[0]
    before = cached.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert before["messages"]["writes"]  # the parent's writes
    cached.prune([thread_id], strategy="keep_latest")
    assert cache_keys(cache, thread_id) == []
    after = cached.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert after == db_saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert after != before


def test_everything_else_is_delegated(saver, make_cache):
    cached = CachedHistorySaver(saver, make_cache())
    thread_id = new_thread_id("delegate")
    invoke(accessor("full", saver=cached), thread_id, "1")
    assert checkpoint_tuples(cached, thread_id) == checkpoint_tuples(saver, thread_id)
    assert cached.get_tuple(thread_config(thread_id)) == saver.get_tuple(thread_config(thread_id))
    # Versions carry a random suffix; the counter part must come from the inner saver.
    assert cached.get_next_version(None, None).split(".")[0] == saver.get_next_version(None, None).split(".")[0]
    assert cached.config_specs == saver.config_specs
    assert cached.serde is saver.serde


# -- async twins ---------------------------------------------------------------------


async def test_async_path_matches_the_sync_path_and_shares_entries(transactional_db, make_cache, cache_kind):
    thread_id = new_thread_id("async")
    sync_cache = make_cache()
    async_cache = make_cache(asynchronous=True, stats=sync_cache.stats) if cache_kind == "redis" else sync_cache
    try:
        resources = await async_resources()
        acached = CachedHistorySaver(resources.saver, async_cache)
        acc = StateAccessor(resolve_graph("lead_agent"), "delta", 2, saver=acached, store=resources.store)
        for text in ("1", "2", "3", "/interrupt"):
            await acc.graph.ainvoke({"messages": [HumanMessage(text)]}, acc.config(thread_id))
        await acc.graph.ainvoke(Command(resume="ok"), acc.config(thread_id))
        counts = sync_cache.stats.snapshot()
        assert counts["walks"] == 0 and counts["errors"] == 0
        tuples = [t async for t in resources.saver.alist(thread_config(thread_id))]
        async_answers = [await acached.aget_delta_channel_history(config=t.config, channels=CHANNELS) for t in tuples]
        raw_answers = [
            await resources.saver.aget_delta_channel_history(config=t.config, channels=CHANNELS) for t in tuples
        ]
        assert async_answers == raw_answers
        states = [s.values for s in await acc.ahistory(thread_id, limit=None)]
        raw_acc = StateAccessor(resolve_graph("lead_agent"), "delta", 2, saver=resources.saver, store=resources.store)
        assert states == [s.values for s in await raw_acc.ahistory(thread_id, limit=None)]
    finally:
        if async_cache is not sync_cache:
            await async_cache.aclose()
        await aclose_async_resources()
    # The sync twin on the same cache answers identically, from the entries the async path stored.
    sync_raw = sync_resources().saver
    hits = sync_cache.stats.snapshot()["hits"]
    assert histories(CachedHistorySaver(sync_raw, sync_cache), sync_raw, thread_id) == histories(
        sync_raw, sync_raw, thread_id
    )
    assert sync_cache.stats.snapshot()["hits"] == hits + len(tuples)


async def test_async_delete_thread_purges_entries(transactional_db, make_cache, cache_kind):
    thread_id = new_thread_id("adelete")
    cache = make_cache(asynchronous=cache_kind == "redis")
    try:
        resources = await async_resources()
        acached = CachedHistorySaver(resources.saver, cache)
        acc = StateAccessor(resolve_graph("lead_agent"), "delta", 2, saver=acached, store=resources.store)
        for text in ("1", "2"):
            await acc.graph.ainvoke({"messages": [HumanMessage(text)]}, acc.config(thread_id))
        await acc.ahistory(thread_id, limit=None)
        assert cache.stats.snapshot()["stores"] > 0
        await acached.adelete_thread(thread_id)
        assert [t async for t in resources.saver.alist(thread_config(thread_id))] == []
        if cache_kind == "memory":
            assert cache_keys(cache, thread_id) == []
        else:
            from checkpoints.history_cache import thread_pattern

            assert [k async for k in cache.aclient.scan_iter(match=thread_pattern(cache.prefix, thread_id))] == []
        assert cache.stats.snapshot()["purges"] == 1
    finally:
        await cache.aclose()
        await aclose_async_resources()
