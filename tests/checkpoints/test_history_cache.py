"""The cache's storage: keys, prefixes, LRU, TTL, purges, and failure as a miss."""

from __future__ import annotations

import hashlib

import pytest

from checkpoints.backend import Backend, current_backend
from checkpoints.cached_saver import CachedHistorySaver
from checkpoints.history_cache import (
    MemoryHistoryCache,
    RedisHistoryCache,
    default_key_prefix,
    entry_key,
    make_history_cache,
    redis_client,
    resolved_key_prefix,
    thread_pattern,
)
from tests.checkpoints.support import accessor, checkpoint_tuples, invoke, new_thread_id

pytestmark = pytest.mark.django_db(transaction=True)
CHANNELS = ["messages"]


def test_default_prefix_hashes_the_database_identity_without_credentials(transactional_db):
    backend = current_backend()
    expected = hashlib.sha256(backend.identity.encode()).hexdigest()[:12]
    assert default_key_prefix(backend) == f"ckpt-hist:v1:{expected}"
    # Two connection strings to one database (another password) share the prefix.
    a = Backend(kind="postgres", conninfo="host=db user=u password=old dbname=x", identity="postgres:db:5432/x")
    b = Backend(kind="postgres", conninfo="host=db user=u password=new dbname=x", identity="postgres:db:5432/x")
    assert default_key_prefix(a) == default_key_prefix(b)
    assert "password" not in backend.identity and "old" not in default_key_prefix(a)


def test_configured_prefix_wins(settings):
    cache_config = settings.DEERFLOW_CONFIG.database.checkpoint_cache.model_copy(update={"key_prefix": "tenant-a"})
    assert resolved_key_prefix(cache_config, Backend(kind="memory", identity="memory")) == "tenant-a"


def test_entry_keys_live_under_the_thread():
    key = entry_key("p:v1:abc", "thread-1", "", "cid", "messages")
    prefix, thread, digest = key.rsplit(":", 2)
    assert (prefix, thread) == ("p:v1:abc", "thread-1")
    assert len(digest) == 24 and digest == hashlib.sha256(b"\0cid\0messages").hexdigest()[:24]
    assert entry_key("p", "t", "", "cid", "other") != entry_key("p", "t", "", "cid", "messages")
    assert thread_pattern("p", "a*b") == "p:a\\*b:*"


def test_memory_lru_evicts_the_least_recently_used_and_purges_by_thread():
    cache = MemoryHistoryCache(prefix="p", max_entries=2)
    cache.set_many("t1", {"p:t1:a": b"1", "p:t1:b": b"2"})
    assert cache.get_many(["p:t1:a"]) == [b"1"]  # a is now the most recent
    cache.set_many("t2", {"p:t2:c": b"3"})
    assert cache.get_many(["p:t1:a", "p:t1:b", "p:t2:c"]) == [b"1", None, b"3"]
    assert cache.stats.snapshot()["evictions"] == 1
    cache.purge_thread("t1")
    assert cache.get_many(["p:t1:a", "p:t2:c"]) == [None, b"3"] and len(cache) == 1
    assert not MemoryHistoryCache(prefix="p", max_entries=0).enabled


def test_redis_entries_carry_the_ttl(db_saver, redis_url, redis_prefix):
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        for ttl, check in ((120, lambda t: 0 < t <= 120), (0, lambda t: t == -1)):
            cache = RedisHistoryCache(prefix=f"{redis_prefix}:{ttl}", ttl_seconds=ttl, client=client)
            cached = CachedHistorySaver(db_saver, cache)
            thread_id = new_thread_id("ttl")
            invoke(accessor("delta", saver=cached), thread_id, "1", "2")
            for t in checkpoint_tuples(db_saver, thread_id):
                cached.get_delta_channel_history(config=t.config, channels=CHANNELS)
            keys = list(client.scan_iter(match=thread_pattern(cache.prefix, thread_id)))
            assert keys and all(check(client.ttl(k)) for k in keys)
            assert any(b":seed:" in k for k in keys)
    finally:
        client.close()


def test_unreachable_redis_is_a_miss_not_a_failure(db_saver):
    # The cache's own client, pointed at a port nothing listens on.
    cache = RedisHistoryCache(
        prefix="down", ttl_seconds=60, client=redis_client("redis://127.0.0.1:1/0", asynchronous=False)
    )
    cached = CachedHistorySaver(db_saver, cache)
    thread_id = new_thread_id("down")
    invoke(accessor("delta", saver=cached), thread_id, "1", "2", "3")
    for t in checkpoint_tuples(db_saver, thread_id):
        assert cached.get_delta_channel_history(config=t.config, channels=CHANNELS) == (
            db_saver.get_delta_channel_history(config=t.config, channels=CHANNELS)
        )
    cached.delete_thread(thread_id)  # the purge fails, the delete does not
    assert checkpoint_tuples(db_saver, thread_id) == []
    counts = cache.stats.snapshot()
    assert counts["hits"] == 0 and counts["stores"] == 0
    # One failure pauses the cache: the rest of the reads skip it instead of timing out.
    assert counts["errors"] >= 1 and counts["bypasses"] > counts["errors"]


def test_an_entry_whose_seed_is_gone_is_recomputed(db_saver, make_cache, cache_kind):
    cache = make_cache()
    cached = CachedHistorySaver(db_saver, cache)
    thread_id = new_thread_id("seedless")
    invoke(accessor("delta", 10, saver=cached), thread_id, "1", "2", "3", "4", "5", "6")
    head = checkpoint_tuples(db_saver, thread_id)[0]
    expected = db_saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert "seed" in expected["messages"]
    assert cached.get_delta_channel_history(config=head.config, channels=CHANNELS) == expected
    seeds = [k for k in _keys(cache, thread_id) if ":seed:" in str(k)]
    assert seeds
    _delete(cache, thread_id, seeds)
    misses = cache.stats.snapshot()["misses"]
    assert cached.get_delta_channel_history(config=head.config, channels=CHANNELS) == expected
    assert cache.stats.snapshot()["misses"] == misses + 1


def _keys(cache, thread_id):
    if cache.kind == "memory":
        return list(cache._by_thread[thread_id])
    return [k.decode() for k in cache.client.scan_iter(match=thread_pattern(cache.prefix, thread_id))]


def _delete(cache, thread_id, keys):
    if cache.kind == "memory":
        for key in keys:
            cache._values.pop(key)
            cache._by_thread[thread_id].discard(key)
    else:
        cache.client.unlink(*keys)


def test_factory_builds_what_the_configuration_says(settings, redis_url):
    backend = Backend(kind="sqlite", sqlite_path="/x.db", identity="sqlite:/x.db")
    memory_config = settings.DEERFLOW_CONFIG.database.checkpoint_cache.model_copy(update={"max_entries": 32})
    sync_cache = make_history_cache(memory_config, backend, asynchronous=False)
    # One LRU per process: the sync views and the event loop share entries.
    assert make_history_cache(memory_config, backend, asynchronous=True) is sync_cache
    assert sync_cache.max_entries == 32 and sync_cache.prefix == default_key_prefix(backend)
    redis_config = memory_config.model_copy(update={"type": "redis", "redis_url": redis_url, "ttl_seconds": 30})
    cache = make_history_cache(redis_config, backend, asynchronous=False)
    try:
        assert cache.kind == "redis" and cache.ttl_seconds == 30 and cache.client.ping()
        assert cache.aclient is None
    finally:
        cache.close()
