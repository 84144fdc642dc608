"""Storage for the delta history cache: a memory LRU or Redis, plus its counters.

A checkpoint's delta history (the channel writes between it and the nearest
stored value, plus that value) depends only on its sealed ancestor chain, so
an entry never changes once written: no invalidation, and one Redis shared by
many processes stays coherent without coordination. Entries are dropped only
when their thread is deleted or pruned (and by LRU/TTL).

Both backends store the saver's own serialization (``serde.dumps_typed``), not
live objects: every read decodes fresh messages, so a node that mutates its
state in place can never alter what the next read returns. The seed (a whole
message list) is stored once per thread under a content hash and referenced
by the entries of the ~``3 × cadence`` checkpoints that share it; inlining it
would make the cache grow quadratically with thread length, like full mode.

Keys: ``{prefix}:{thread_id}:{sha256(ns \\0 checkpoint_id \\0 channel)[:24]}``
for entries and ``{prefix}:{thread_id}:seed:{sha256(blob)[:24]}`` for seeds, so
``{prefix}:{thread_id}:*`` covers a thread. The prefix defaults to
``ckpt-hist:v1:{sha256(database identity)[:12]}``; the identity carries no
credentials, so rotating a password keeps the cache.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoints.backend import Backend

logger = logging.getLogger(__name__)

KEY_VERSION = "v1"
COUNTERS = (
    "hits",
    "misses",
    "composes",
    "walks",
    "tuple_reads",
    "stores",
    "evictions",
    "purges",
    "errors",
    "bypasses",
)
# Redis SCAN batch for purges: a thread has ~3 entries per turn plus its seeds.
PURGE_SCAN_COUNT = 500
# A cache read must never cost more than the walk it saves. redis-py's default
# client retries with backoff (measured: ~5 s per call against a dead server),
# so cache clients fail fast (one quick retry, on a dropped connection only,
# heals a connection a Redis restart left stale), and after a failure the
# cache is skipped for a while.
REDIS_TIMEOUT_SECONDS = 0.5
OUTAGE_PAUSE_SECONDS = 5.0


@dataclass
class HistoryCacheStats:
    """Thread-safe counters of one process (or of one test's cache)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def incr(self, name: str, amount: int = 1) -> None:
        with self.lock:
            self.counts[name] += amount

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)


# The counters GET /api/info reports: every cache the runtime builds shares them.
process_stats = HistoryCacheStats()


def default_key_prefix(backend: Backend) -> str:
    """Return ``ckpt-hist:v1:{sha256(identity)[:12]}`` for a database."""
    return f"ckpt-hist:{KEY_VERSION}:{backend.cache_namespace}"


def _digest(*parts: str | bytes) -> str:
    hasher = hashlib.sha256()
    for index, part in enumerate(parts):
        if index:
            hasher.update(b"\0")
        hasher.update(part.encode() if isinstance(part, str) else part)
    return hasher.hexdigest()[:24]


def entry_key(prefix: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str, channel: str) -> str:
    """Return the key of one (checkpoint, channel) history."""
    return f"{prefix}:{thread_id}:{_digest(checkpoint_ns, checkpoint_id, channel)}"


def seed_key(prefix: str, thread_id: str, blob: bytes) -> str:
    """Return the content-addressed key of a serialized seed."""
    return f"{prefix}:{thread_id}:seed:{_digest(blob)}"


def thread_pattern(prefix: str, thread_id: str) -> str:
    """Return the Redis MATCH pattern of a thread's keys (glob characters escaped)."""
    escaped = "".join(f"\\{c}" if c in "*?[]\\" else c for c in thread_id)
    return f"{prefix}:{escaped}:*"


def pack(type_and_bytes: tuple[str, bytes]) -> bytes:
    """Join a ``serde.dumps_typed`` result into one value."""
    type_name, data = type_and_bytes
    return type_name.encode() + b"\n" + data


def unpack(value: bytes) -> tuple[str, bytes]:
    """Split a value written by pack()."""
    type_name, _, data = value.partition(b"\n")
    return type_name.decode(), data


class MemoryHistoryCache:
    """A process-local LRU of serialized entries and seeds; ``max_entries=0`` disables it.

    A seed counts as one entry. Memory needs no I/O, so the async twins are the
    sync methods; one lock keeps the threads of sync views and the event loop apart.
    """

    kind = "memory"

    def __init__(self, *, prefix: str, max_entries: int, stats: HistoryCacheStats | None = None) -> None:
        self.prefix = prefix
        self.max_entries = max_entries
        self.stats = stats if stats is not None else HistoryCacheStats()
        # key -> (thread_id, value); the thread id lets eviction update the index.
        self._values: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._by_thread: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def __len__(self) -> int:
        return len(self._values)

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        with self._lock:
            values = []
            for key in keys:
                item = self._values.get(key)
                if item is not None:
                    self._values.move_to_end(key)
                values.append(item[1] if item is not None else None)
            return values

    def set_many(self, thread_id: str, items: Mapping[str, bytes]) -> None:
        with self._lock:
            keys = self._by_thread.setdefault(thread_id, set())
            for key, value in items.items():
                self._values[key] = (thread_id, value)
                self._values.move_to_end(key)
                keys.add(key)
            self._evict()
        self.stats.incr("stores", len(items))

    def _evict(self) -> None:
        while len(self._values) > self.max_entries:
            key, (thread_id, _) = self._values.popitem(last=False)
            self._by_thread.get(thread_id, set()).discard(key)
            self.stats.incr("evictions")

    def purge_thread(self, thread_id: str) -> None:
        with self._lock:
            for key in self._by_thread.pop(thread_id, set()):
                self._values.pop(key, None)
        self.stats.incr("purges")

    async def aget_many(self, keys: list[str]) -> list[bytes | None]:
        return self.get_many(keys)

    async def aset_many(self, thread_id: str, items: Mapping[str, bytes]) -> None:
        self.set_many(thread_id, items)

    async def apurge_thread(self, thread_id: str) -> None:
        self.purge_thread(thread_id)

    def close(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def redis_client(url: str, *, asynchronous: bool) -> Any:
    """Return a fail-fast Redis client (short timeouts, one retry on a dropped connection) for the cache."""
    # Redis is imported only where the Redis cache is configured.
    from core.redis import connection_kwargs

    options = connection_kwargs("history-cache", socket_timeout=REDIS_TIMEOUT_SECONDS, asynchronous=asynchronous)
    if asynchronous:
        import redis.asyncio

        return redis.asyncio.Redis.from_url(url, **options)
    import redis

    return redis.Redis.from_url(url, **options)


class RedisHistoryCache:
    """Entries in Redis, shared by every process on the same database.

    Holds a sync client (views, commands) or an asyncio client (the event
    loop); the other twin is unavailable. Redis failures never fail a read:
    they count as ``errors`` and the caller walks the saver instead; for
    ``OUTAGE_PAUSE_SECONDS`` after a failure reads and writes skip Redis
    (counted as ``bypasses``), so an outage costs one timeout, not one per read.
    """

    kind = "redis"
    enabled = True

    def __init__(
        self,
        *,
        prefix: str,
        ttl_seconds: int,
        client: Any = None,
        aclient: Any = None,
        stats: HistoryCacheStats | None = None,
    ) -> None:
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.client = client
        self.aclient = aclient
        self.stats = stats if stats is not None else HistoryCacheStats()
        self._paused_until = 0.0

    def _ex(self) -> int | None:
        return self.ttl_seconds or None

    def _paused(self) -> bool:
        if time.monotonic() < self._paused_until:
            self.stats.incr("bypasses")
            return True
        return False

    def _pause(self) -> None:
        self._paused_until = time.monotonic() + OUTAGE_PAUSE_SECONDS

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        if self._paused():
            return [None] * len(keys)
        try:
            return self.client.mget(keys)
        except Exception:
            self._pause()
            raise

    async def aget_many(self, keys: list[str]) -> list[bytes | None]:
        if self._paused():
            return [None] * len(keys)
        try:
            return await self.aclient.mget(keys)
        except Exception:
            self._pause()
            raise

    def _set_pipeline(self, client: Any, items: Mapping[str, bytes]) -> Any:
        """Return ``client``'s pipeline with one SET per item queued (nothing is sent until it executes)."""
        pipe = client.pipeline(transaction=False)
        for key, value in items.items():
            pipe.set(key, value, ex=self._ex())
        return pipe

    def set_many(self, thread_id: str, items: Mapping[str, bytes]) -> None:
        if self._paused():
            return
        pipe = self._set_pipeline(self.client, items)
        try:
            pipe.execute()
        except Exception:
            self._pause()
            raise
        self.stats.incr("stores", len(items))

    async def aset_many(self, thread_id: str, items: Mapping[str, bytes]) -> None:
        if self._paused():
            return
        pipe = self._set_pipeline(self.aclient, items)
        try:
            await pipe.execute()
        except Exception:
            self._pause()
            raise
        self.stats.incr("stores", len(items))

    def purge_thread(self, thread_id: str) -> None:
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=thread_pattern(self.prefix, thread_id), count=PURGE_SCAN_COUNT):
            batch.append(key)
            if len(batch) >= PURGE_SCAN_COUNT:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)
        self.stats.incr("purges")

    async def apurge_thread(self, thread_id: str) -> None:
        batch: list[bytes] = []
        async for key in self.aclient.scan_iter(match=thread_pattern(self.prefix, thread_id), count=PURGE_SCAN_COUNT):
            batch.append(key)
            if len(batch) >= PURGE_SCAN_COUNT:
                await self.aclient.unlink(*batch)
                batch = []
        if batch:
            await self.aclient.unlink(*batch)
        self.stats.incr("purges")

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    async def aclose(self) -> None:
        if self.aclient is not None:
            await self.aclient.aclose()


HistoryCache = MemoryHistoryCache | RedisHistoryCache

_memory_caches: dict[str, MemoryHistoryCache] = {}
_memory_lock = threading.Lock()


def resolved_key_prefix(cache_config: Any, backend: Backend) -> str:
    """Return the configured key prefix, or the one derived from the database identity."""
    return cache_config.key_prefix or default_key_prefix(backend)


def process_memory_cache(*, prefix: str, max_entries: int) -> MemoryHistoryCache:
    """Return the process's memory cache for a prefix, shared by the sync and async savers."""
    with _memory_lock:
        cache = _memory_caches.get(prefix)
        if cache is None or cache.max_entries != max_entries:
            cache = _memory_caches[prefix] = MemoryHistoryCache(
                prefix=prefix, max_entries=max_entries, stats=process_stats
            )
        return cache


def make_history_cache(cache_config: Any, backend: Backend, *, asynchronous: bool) -> HistoryCache:
    """Build the cache ``database.checkpoint_cache`` describes, for sync or async savers."""
    prefix = resolved_key_prefix(cache_config, backend)
    if cache_config.type == "memory":
        return process_memory_cache(prefix=prefix, max_entries=cache_config.max_entries)
    client = redis_client(cache_config.resolved_redis_url(), asynchronous=asynchronous)
    if asynchronous:
        return RedisHistoryCache(
            prefix=prefix, ttl_seconds=cache_config.ttl_seconds, aclient=client, stats=process_stats
        )
    return RedisHistoryCache(prefix=prefix, ttl_seconds=cache_config.ttl_seconds, client=client, stats=process_stats)
