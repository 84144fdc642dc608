"""The process's async PostgreSQL pool gets back every connection a cancelled task had borrowed."""

from __future__ import annotations

import asyncio
import random
import time
import uuid

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from checkpoints.runtime import aclose_async_resources, async_resources

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

# Twice as many savers as the pool has connections, each writing and reading
# checkpoints as a run does, all cancelled together at a random moment. On
# psycopg_pool's own pool this test lost a connection in each of 5 runs, in
# round 11 to 83: the loss that, ten times over, left a server's runs waiting
# for connections forever (checkpoints.pg_pool).
ROUNDS = 200
SAVERS_PER_CONNECTION = 2
STEPS = 4
SETTLE_SECONDS = 5.0


async def _checkpointing(saver, steps: int) -> None:
    config = {"configurable": {"thread_id": f"pool-{uuid.uuid4().hex}", "checkpoint_ns": ""}}
    for step in range(steps):
        written = await saver.aput(config, empty_checkpoint(), {"step": step}, {})
        await saver.aput_writes(written, [("messages", step)], str(uuid.uuid4()))
        await saver.aget_tuple(config)


async def _all_connections_back(pool) -> dict:
    """Wait (bounded) until every connection the pool holds is idle in it; return its stats."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        stats = pool.get_stats()
        if stats.get("pool_available", 0) == stats.get("pool_size", 0) or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.01)


async def test_cancelled_checkpoint_writers_give_every_connection_back():
    resources = await async_resources()
    try:
        pool = resources.pool
        writers = SAVERS_PER_CONNECTION * pool.max_size
        rng = random.Random(20261203)
        for round_ in range(ROUNDS):
            tasks = [asyncio.ensure_future(_checkpointing(resources.new_saver(), STEPS)) for _ in range(writers)]
            await asyncio.sleep(rng.random() * 0.03)
            for task in tasks:
                task.cancel()
            _done, stuck = await asyncio.wait(tasks, timeout=30)
            assert not stuck, f"round {round_}: {len(stuck)} writers never ended"
            stats = await _all_connections_back(pool)
            assert stats.get("pool_available", 0) == stats.get("pool_size", 0), f"round {round_}: {stats}"
        # And the pool still serves.
        await _checkpointing(resources.new_saver(), 1)
    finally:
        await aclose_async_resources()
