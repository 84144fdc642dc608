"""Fixtures for checkpoint tests: savers per backend, mode freezes, caches."""

from __future__ import annotations

import uuid

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from checkpoints.cached_saver import CachedHistorySaver
from checkpoints.runtime import sync_resources


@pytest.fixture
def db_saver(transactional_db):
    """The process's raw sync saver on this pass's database (SQLite or PostgreSQL)."""
    saver = sync_resources().saver
    assert not isinstance(saver, CachedHistorySaver), "the suite's process must be frozen full"
    return saver


@pytest.fixture(params=["db", "memory"])
def saver(request, transactional_db):
    """Each real saver kind: the pass's database saver, and LangGraph's InMemorySaver."""
    if request.param == "memory":
        return InMemorySaver()
    return request.getfixturevalue("db_saver")


def configure(settings, **database) -> None:
    """Replace ``settings.DEERFLOW_CONFIG.database`` fields (restored by the settings fixture)."""
    config = settings.DEERFLOW_CONFIG.model_copy(deep=True)
    for key, value in database.items():
        if key == "snapshot_frequency":
            config.database.checkpoint_delta.snapshot_frequency = value
        elif key.startswith("cache_"):
            setattr(config.database.checkpoint_cache, key.removeprefix("cache_"), value)
        else:
            setattr(config.database, key, value)
    settings.DEERFLOW_CONFIG = config


@pytest.fixture
def redis_prefix(redis_url):
    """A unique Redis key prefix for one test; every key under it is deleted afterwards."""
    import redis

    prefix = f"test-ckpt-hist:{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.unlink(*keys)
    client.close()


@pytest.fixture(params=["memory", "redis"])
def cache_kind(request):
    """Each cache backend: the process-local LRU and real Redis (skipped without REDIS_URL)."""
    if request.param == "redis":
        request.getfixturevalue("redis_url")
    return request.param


@pytest.fixture
def make_cache(request, cache_kind):
    """Build caches of ``cache_kind`` with fresh counters; Redis ones under a unique prefix."""
    from checkpoints.history_cache import HistoryCacheStats, MemoryHistoryCache, RedisHistoryCache

    built = []

    def make(*, max_entries: int = 128, asynchronous: bool = False, ttl_seconds: int = 600, stats=None):
        stats = stats if stats is not None else HistoryCacheStats()
        if cache_kind == "memory":
            prefix = f"test-mem:{uuid.uuid4().hex[:8]}"
            return MemoryHistoryCache(prefix=prefix, max_entries=max_entries, stats=stats)
        import redis
        import redis.asyncio

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        if asynchronous:
            cache = RedisHistoryCache(
                prefix=prefix, ttl_seconds=ttl_seconds, aclient=redis.asyncio.Redis.from_url(url), stats=stats
            )
        else:
            cache = RedisHistoryCache(
                prefix=prefix, ttl_seconds=ttl_seconds, client=redis.Redis.from_url(url), stats=stats
            )
        built.append(cache)
        return cache

    yield make
    for cache in built:
        cache.close()
