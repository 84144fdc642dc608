"""A delta-mode process wraps every saver it builds with the history cache; /api/info shows it."""

from __future__ import annotations

import pytest

from checkpoints.accessor import astate_accessor, state_accessor
from checkpoints.cached_saver import CachedHistorySaver
from checkpoints.history_cache import RedisHistoryCache, process_stats, thread_pattern
from checkpoints.runtime import aclose_async_resources, async_resources, sync_resources
from tests.checkpoints.conftest import configure
from tests.checkpoints.support import new_thread_id
from tests.helpers import run_turns

pytestmark = pytest.mark.django_db(transaction=True)


def info(owner) -> dict:
    response = owner.client.get("/api/info")
    assert response.status_code == 200, response.content
    return response.json()["checkpoints"]


def test_full_process_does_not_wrap_and_reports_the_cache_off(owner):
    assert not isinstance(sync_resources().saver, CachedHistorySaver)
    checkpoints = info(owner)
    assert checkpoints["channel_mode"] == "full" and checkpoints["snapshot_frequency"] == 10
    assert checkpoints["history_cache"]["enabled"] is False
    assert set(checkpoints["history_cache"]["counters"]) >= {"hits", "misses", "composes", "walks"}


def test_delta_process_reads_through_the_memory_cache_and_counts(settings, unfrozen_mode, owner):
    configure(settings, checkpoint_channel_mode="delta", snapshot_frequency=10, cache_max_entries=64)
    saver = sync_resources().saver
    assert isinstance(saver, CachedHistorySaver) and saver.cache.kind == "memory"
    assert saver.stats is process_stats
    thread_id = new_thread_id("wired")
    run_turns(thread_id, ["one", "two", "three"])
    before = info(owner)["history_cache"]["counters"]
    history = state_accessor("lead_agent").history(thread_id, limit=None)
    assert [m.content for m in history[0].values["messages"]][-1] == "echo: three"
    state_accessor("lead_agent").history(thread_id, limit=None)
    checkpoints = info(owner)
    assert checkpoints["channel_mode"] == "delta" and checkpoints["snapshot_frequency"] == 10
    cache_info = checkpoints["history_cache"]
    assert cache_info["enabled"] is True and cache_info["type"] == "memory" and cache_info["max_entries"] == 64
    after = cache_info["counters"]
    assert after["hits"] > before["hits"] and after["composes"] >= before["composes"]


async def test_delta_process_wraps_the_async_savers_too(settings, unfrozen_mode):
    configure(settings, checkpoint_channel_mode="delta", snapshot_frequency=2)
    try:
        resources = await async_resources()
        assert isinstance(resources.saver, CachedHistorySaver)
        run_saver = resources.new_saver()
        assert isinstance(run_saver, CachedHistorySaver) and run_saver.cache is resources.saver.cache
        accessor = await astate_accessor("lead_agent", fresh_saver=True)
        assert isinstance(accessor.saver, CachedHistorySaver) and accessor.mode == "delta"
        thread_id = new_thread_id("awired")
        await accessor.graph.ainvoke({"messages": [("user", "hi")]}, accessor.config(thread_id))
        assert [m.content for m in (await accessor.aget(thread_id)).values["messages"]] == ["hi", "echo: hi"]
    finally:
        await aclose_async_resources()


def test_delta_process_with_redis_cache(settings, unfrozen_mode, owner, redis_url, redis_prefix):
    configure(
        settings,
        checkpoint_channel_mode="delta",
        snapshot_frequency=10,
        cache_type="redis",
        cache_redis_url=redis_url,
        cache_key_prefix=redis_prefix,
        cache_ttl_seconds=300,
    )
    saver = sync_resources().saver
    assert isinstance(saver.cache, RedisHistoryCache) and saver.cache.prefix == redis_prefix
    thread_id = new_thread_id("rwired")
    run_turns(thread_id, ["one", "two", "three"])
    state_accessor("lead_agent").history(thread_id, limit=None)
    assert list(saver.cache.client.scan_iter(match=thread_pattern(redis_prefix, thread_id)))
    cache_info = info(owner)["history_cache"]
    assert cache_info["type"] == "redis" and cache_info["ttl_seconds"] == 300
    assert cache_info["key_prefix"] == redis_prefix
    # Deleting the thread through the API purges its entries.
    from threads.models import ThreadMeta

    ThreadMeta.objects.create(thread_id=thread_id, owner=owner.user, assistant_id="lead_agent")
    assert owner.client.delete(f"/api/threads/{thread_id}").status_code == 204
    assert list(saver.cache.client.scan_iter(match=thread_pattern(redis_prefix, thread_id))) == []
