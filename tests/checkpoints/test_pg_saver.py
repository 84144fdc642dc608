"""The PostgreSQL savers on a pool serve calls side by side (checkpoints.pg_saver).

A history listing holds its cursor while the caller reads it (``alist`` and
``list`` yield inside it). Upstream's savers hold their one lock for as long,
so every other checkpoint read or write of the process waited for the
reader; ours take a pooled connection each and go on. Upstream's behaviour
is checked too, so the day its fix ships this test says so.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from checkpoints.backend import current_backend
from checkpoints.pg_saver import PooledAsyncPostgresSaver, PooledPostgresSaver
from checkpoints.runtime import _pg_kwargs, async_resources, sync_resources

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

# Long enough for a free call on a warm pool, short next to a test's run time.
WAIT_SECONDS = 2.0


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


async def _overlaps(saver, thread_id: str) -> bool:
    """Whether a read completes while a listing of the same saver holds its cursor."""
    listing = saver.alist(_config(thread_id))
    await anext(listing)  # the cursor is open until the listing ends
    try:
        await asyncio.wait_for(saver.aget_tuple(_config(thread_id)), WAIT_SECONDS)
        return True
    except TimeoutError:
        return False
    finally:
        await listing.aclose()


async def test_async_calls_on_a_pool_overlap_where_upstreams_queue():
    thread_id = f"overlap-{uuid.uuid4().hex}"
    async with AsyncConnectionPool(current_backend().conninfo, kwargs=_pg_kwargs(), min_size=2, max_size=4) as pool:
        ours, theirs = PooledAsyncPostgresSaver(pool), AsyncPostgresSaver(pool)
        for step in range(3):
            await ours.aput(_config(thread_id), empty_checkpoint(), {"step": step}, {})
        try:
            assert await _overlaps(ours, thread_id)
            assert not await _overlaps(theirs, thread_id), (
                "upstream no longer serialises: drop PooledAsyncPostgresSaver"
            )
        finally:
            await ours.adelete_thread(thread_id)


def _sync_overlaps(saver, thread_id: str) -> bool:
    listing = saver.list(_config(thread_id))
    next(listing)
    done = threading.Event()
    reader = threading.Thread(target=lambda: (saver.get_tuple(_config(thread_id)), done.set()), daemon=True)
    reader.start()
    try:
        return done.wait(WAIT_SECONDS)
    finally:
        listing.close()
        reader.join(WAIT_SECONDS * 5)


def test_request_threads_on_a_pool_overlap_where_upstreams_queue():
    thread_id = f"overlap-{uuid.uuid4().hex}"
    with ConnectionPool(current_backend().conninfo, kwargs=_pg_kwargs(), min_size=2, max_size=4) as pool:
        ours, theirs = PooledPostgresSaver(pool), PostgresSaver(pool)
        for step in range(3):
            ours.put(_config(thread_id), empty_checkpoint(), {"step": step}, {})
        try:
            assert _sync_overlaps(ours, thread_id)
            assert not _sync_overlaps(theirs, thread_id), "upstream no longer serialises: drop PooledPostgresSaver"
        finally:
            ours.delete_thread(thread_id)


async def test_the_process_savers_are_the_pooled_ones(closing_savers):
    assert isinstance((await async_resources()).saver, PooledAsyncPostgresSaver)
    assert isinstance((await async_resources()).new_saver(), PooledAsyncPostgresSaver)
    assert isinstance(sync_resources().saver, PooledPostgresSaver)
