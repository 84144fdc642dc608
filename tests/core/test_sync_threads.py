"""Requests and runs reuse threads for their synchronous code, one block per thread at a time."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db.backends.signals import connection_created

from core import sync_threads
from deerflow_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


async def _thread_of_block(entered: asyncio.Event | None = None, release: asyncio.Event | None = None) -> set[int]:
    """The threads a block's thread-sensitive calls ran on (one, unless the contract broke)."""
    async with sync_threads.own_sync_thread():
        seen = {await sync_to_async(threading.get_ident)()}
        if entered is not None:
            entered.set()
            await release.wait()
        seen.add(await sync_to_async(threading.get_ident)())
    return seen


@pytest.mark.backend_free
async def test_a_block_runs_on_one_thread_that_the_next_block_reuses():
    first = await _thread_of_block()
    second = await _thread_of_block()
    assert len(first) == 1
    assert first == second
    assert threading.get_ident() not in first  # never the event loop's thread


@pytest.mark.backend_free
async def test_blocks_open_at_the_same_time_never_share_a_thread():
    releases = [asyncio.Event() for _ in range(sync_threads.IDLE_MAX + 3)]
    entered = [asyncio.Event() for _ in releases]
    tasks = [asyncio.ensure_future(_thread_of_block(e, r)) for e, r in zip(entered, releases, strict=True)]
    await asyncio.gather(*(e.wait() for e in entered))
    for release in releases:
        release.set()
    threads = await asyncio.gather(*tasks)

    assert all(len(seen) == 1 for seen in threads)
    assert len(set().union(*threads)) == len(releases)
    # Past IDLE_MAX idle threads, returned ones are stopped instead of kept.
    assert len(sync_threads._idle) == sync_threads.IDLE_MAX


@pytest.mark.sqlite_only
async def test_consecutive_api_requests_on_sqlite_reuse_one_connection(owner, runtime):
    opened: list[object] = []

    def count(sender, connection, **kwargs):
        opened.append(connection.connection)

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1/api", headers={"x-api-key": owner.key}
    ) as http:
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        connection_created.connect(count)
        try:
            answers = [await http.get(f"/threads/{thread_id}") for _ in range(5)]
        finally:
            connection_created.disconnect(count)

    assert [a.status_code for a in answers] == [200] * 5
    # Before, every request's new thread opened (and closed) a connection of its own.
    assert opened == []
