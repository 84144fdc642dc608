"""The Redis stream bridge tails in slices, each bounded by its block time plus a margin."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from core import bridge as bridge_module
from core.bridge import END_EVENT, RedisStreamBridge
from core.redis import COMMAND_TIMEOUT_SECONDS, READ_BLOCK_SECONDS, blocking_timeout


@pytest.fixture
async def bridge(redis_url):
    bridge = RedisStreamBridge(redis_url, max_events=100, ttl_seconds=60, prefix=f"test-bridge:{uuid.uuid4().hex}")
    try:
        yield bridge
    finally:
        await bridge.aclose()


def test_blocking_reads_wait_longer_than_their_block_and_commands_keep_the_short_timeout(redis_url):
    bridge = RedisStreamBridge(redis_url, max_events=100, ttl_seconds=60)
    assert blocking_timeout(READ_BLOCK_SECONDS) > READ_BLOCK_SECONDS
    assert bridge.client.connection_pool.connection_kwargs["socket_timeout"] == COMMAND_TIMEOUT_SECONDS


async def test_a_tail_on_a_redis_that_never_answers_times_out_after_its_block_and_margin(monkeypatch):
    """The tail's bound is an asyncio timeout, not a socket timeout: a wedged server still ends the read."""
    peers = []
    silent = await asyncio.start_server(lambda reader, writer: peers.append(writer), "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    bridge = RedisStreamBridge(f"redis://127.0.0.1:{port}/0", max_events=100, ttl_seconds=60)
    bridge.block_seconds = 0.2
    monkeypatch.setattr(bridge_module, "blocking_timeout", lambda block: block + 0.5)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async for _event in bridge.subscribe("wedged", after=None, idle_timeout=30):
            pass
    assert time.monotonic() - started < 5
    assert peers, "the bridge never reached the silent server"
    await bridge.aclose()
    for writer in peers:
        writer.close()
    silent.close()
    await silent.wait_closed()


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
