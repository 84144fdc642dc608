"""The Redis stream bridge tails in slices no longer than its sockets allow."""

from __future__ import annotations

import time
import uuid

import pytest

from deerflow_site.redis import COMMAND_TIMEOUT_SECONDS, READ_BLOCK_SECONDS
from runs.streaming.bridge import END_EVENT, RedisStreamBridge


@pytest.fixture
async def bridge(redis_url):
    bridge = RedisStreamBridge(redis_url, max_events=100, ttl_seconds=60, prefix=f"test-bridge:{uuid.uuid4().hex}")
    try:
        yield bridge
    finally:
        await bridge.aclose()


def test_blocking_reads_have_a_socket_timeout_longer_than_their_block(redis_url):
    bridge = RedisStreamBridge(redis_url, max_events=100, ttl_seconds=60)
    tail = bridge.reader.connection_pool.connection_kwargs
    plain = bridge.client.connection_pool.connection_kwargs
    assert tail["socket_timeout"] > READ_BLOCK_SECONDS
    assert plain["socket_timeout"] == COMMAND_TIMEOUT_SECONDS


async def test_idle_is_reported_after_idle_timeout_not_after_each_slice(bridge):
    bridge.block_seconds = 0.1  # slices much shorter than the idle timeout
    run_id = uuid.uuid4().hex
    await bridge.publish(run_id, "metadata", {"run_id": run_id})
    stream = bridge.subscribe(run_id, after=None, idle_timeout=0.5)
    assert (await anext(stream)).event == "metadata"
    started = time.monotonic()
    assert await anext(stream) is None
    assert 0.45 <= time.monotonic() - started < 1.5
    await bridge.publish(run_id, END_EVENT, {"status": "success"})
    assert (await anext(stream)).event == END_EVENT
