"""A cancelled checkpoint write on SQLite leaves the database writable (checkpoints.sqlite_aio).

SQLite has one writer. Upstream's async saver, cancelled between its
statement and its commit, kept the write transaction open on its shared
connection, and Django's next write waited out the busy timeout and failed
with ``database is locked`` (a run's finalize, a test's flush).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

import aiosqlite
import pytest

from checkpoints.sqlite_aio import CancelSafeAsyncSqliteSaver

pytestmark = pytest.mark.backend_free

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}}
WRITES = [("messages", "x" * 1000)] * 50


def another_writer_gets_the_lock(path) -> bool:
    other = sqlite3.connect(path, timeout=0.05, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


async def test_a_write_cancelled_at_any_point_ends_its_transaction(tmp_path):
    path = tmp_path / "c.db"
    conn = await aiosqlite.connect(path, timeout=20)
    saver = CancelSafeAsyncSqliteSaver(conn)
    await saver.setup()
    left_open = []
    try:
        # Cancelled after 0..6 loop turns: before, during and after the statement and the commit.
        for attempt in range(140):
            task = asyncio.create_task(saver.aput_writes(CONFIG, WRITES, f"task-{attempt}"))
            for _ in range(attempt % 7):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # or it had finished: nothing to end
                await task
            await conn.execute("SELECT 1")  # every call queued before it has run on the connection's thread
            if conn.in_transaction or not another_writer_gets_the_lock(path):
                left_open.append(attempt)
    finally:
        await conn.close()
    assert left_open == []


async def test_an_uncancelled_write_still_lands(tmp_path):
    conn = await aiosqlite.connect(tmp_path / "c.db", timeout=20)
    saver = CancelSafeAsyncSqliteSaver(conn)
    try:
        await saver.setup()
        await saver.aput_writes(CONFIG, WRITES[:2], "task")
        async with conn.execute("SELECT COUNT(*) FROM writes") as cursor:
            assert (await cursor.fetchone())[0] == 2
    finally:
        await conn.close()
