"""Helpers shared by the tests that drive real server processes."""

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


async def wait_message(client, thread_id: str, content: str, within: float = 20) -> list[dict]:
    """Poll the thread's state until a message reads ``content``; return the messages.

    A run that shows it in the state has written its first checkpoint, which
    a rollback test needs before cancelling (a fixed sleep only guessed it).
    """
    deadline = asyncio.get_running_loop().time() + within
    while True:
        messages = (await client.threads.get_state(thread_id))["values"].get("messages", [])
        if any(m.get("content") == content for m in messages):
            return messages
        assert asyncio.get_running_loop().time() < deadline, f"no message {content!r} on thread {thread_id}"
        await asyncio.sleep(0.05)


def npm_ci_once(folder, marker: str) -> None:
    """Install ``folder``'s pinned packages (``npm ci``) unless ``node_modules/<marker>`` is there.

    Both test passes run side by side and may reach this at the same moment:
    an exclusive lock on a file in the folder lets one install while the other
    waits, then finds the packages installed.
    """
    import fcntl
    import subprocess
    from pathlib import Path

    folder = Path(folder)
    with open(folder / ".npm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "node_modules" / marker).exists():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"], cwd=folder, check=True, capture_output=True, timeout=300
            )
