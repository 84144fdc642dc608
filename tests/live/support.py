"""Helpers shared by the tests that drive real daphne processes."""

from __future__ import annotations

import asyncio
import os

DATABASE_URL = os.environ.get("DATABASE_URL")
REDIS_URL = os.environ.get("REDIS_URL")


def human(text: str) -> dict:
    """Return a run input holding one human message."""
    return {"messages": [{"role": "user", "content": text}]}


def scaled_config(**runs) -> dict:
    """Return the README's scale-out configuration (Redis bridge and channel layer)."""
    return {
        "stream_bridge": {"type": "redis"},
        "channel_layer": {"type": "redis"},
        "redis": {"url": REDIS_URL},
        "runs": {"lease_seconds": 6, **runs},
    }


async def wait_status(client, thread_id: str, run_id: str, wanted: set[str], within: float = 20) -> dict:
    """Poll the run until its status is in ``wanted``; fail after ``within`` seconds."""
    run: dict = {}
    for _ in range(int(within / 0.05)):
        run = await client.runs.get(thread_id, run_id)
        if run["status"] in wanted:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} stuck in {run.get('status')}")
