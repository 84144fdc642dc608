"""Thread TTLs on two server processes sharing one PostgreSQL: the official SDK sets them, both workers sweep.

The TTLs are made to run out by writing ``expires_at`` in the shared
database (no waiting out real minutes); each process's log says which
threads it deleted or pruned, and every thread must appear exactly once.
"""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import psycopg
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL, REDIS_URL, human, scaled_config

pytestmark = [pytest.mark.live]

SWEPT = re.compile(r"TTL sweep (deleted|pruned) thread (\S+) ")


@pytest.fixture(scope="module")
def sweeping_cluster(tmp_path_factory):
    """Two servers that execute runs (and so sweep), each taking at most 3 expired threads per 0.2 s poll."""
    if not DATABASE_URL or not REDIS_URL:
        pytest.skip("needs PostgreSQL and Redis: set DATABASE_URL and REDIS_URL")
    config = {**scaled_config(poll_seconds=0.2), "threads": {"ttl_sweep_limit": 3}}
    with fresh_postgres_database(DATABASE_URL) as url:
        a = LiveServer(tmp_path_factory.mktemp("a"), config=config, database_url=url).setup().start()
        b = LiveServer(tmp_path_factory.mktemp("b"), config=config, database_url=url).start()
        b.keys = a.keys
        try:
            yield a, b, url
        finally:
            a.stop()
            b.stop()


def swept_lines(server: LiveServer) -> list[tuple[str, str]]:
    text = (server.workdir / f"server-{server.port}.log").read_text(errors="replace")
    return SWEPT.findall(text)


@pytest.mark.postgres_only
async def test_two_processes_sweep_expired_threads_each_exactly_once(sweeping_cluster):
    a, b, url = sweeping_cluster
    key = a.api_key("alice")
    on_a, on_b = get_client(url=a.url, api_key=key), get_client(url=b.url, api_key=key)
    doomed = [(await on_a.threads.create(ttl=60))["thread_id"] for _ in range(12)]
    kept = [(await on_b.threads.create(ttl={"ttl": 60, "strategy": "keep_latest"}))["thread_id"] for _ in range(4)]
    for thread_id in kept:
        await on_a.runs.wait(thread_id, "lead_agent", input=human("first"))
        first_turn = (await on_a.threads.get_state(thread_id))["checkpoint"]["checkpoint_id"]
        await on_b.runs.wait(thread_id, "lead_agent", input=human("second"))
        # Fork from the first turn: the second turn is left as an abandoned branch, which keep_latest drops.
        await on_a.threads.update_state(thread_id, {"title": "forked"}, checkpoint_id=first_turn)
    info = (await on_b.threads.get(doomed[0], include=["ttl"]))["ttl"]
    assert (info["strategy"], info["ttl_minutes"]) == ("delete", 60)
    updated = await on_b.threads.update(kept[0], metadata={"k": 1}, ttl={"ttl": 90, "strategy": "keep_latest"})
    assert updated["metadata"]["k"] == 1
    assert (await on_a.threads.get(kept[0], include=["ttl"]))["ttl"]["ttl_minutes"] == 90
    values_before = {t: (await on_a.threads.get_state(t))["values"] for t in kept}
    async with httpx.AsyncClient(headers={"x-api-key": key}) as http:

        async def stored(thread_id: str) -> int:
            response = await http.get(f"{a.url}/threads/{thread_id}/storage")
            assert response.status_code == 200, response.text
            return response.json()["checkpoint_count"]

        stored_before = {t: await stored(t) for t in kept}

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE threads_threadmeta SET expires_at = now() - interval '1 minute' WHERE thread_id = ANY(%s)",
            [doomed + kept],
        )

    deadline = time.monotonic() + 60
    while len(swept_lines(a)) + len(swept_lines(b)) < len(doomed) + len(kept):
        assert time.monotonic() < deadline, f"swept only {swept_lines(a) + swept_lines(b)}"
        await asyncio.sleep(0.1)

    swept = swept_lines(a) + swept_lines(b)
    assert sorted(t for _, t in swept) == sorted(doomed + kept)  # each exactly once, across both processes
    assert {t for outcome, t in swept if outcome == "pruned"} == set(kept)
    for thread_id in doomed:
        with pytest.raises(NotFoundError):
            await on_b.threads.get(thread_id)
    async with httpx.AsyncClient(headers={"x-api-key": key}) as http:
        for thread_id in kept:
            assert (await on_b.threads.get_state(thread_id))["values"] == values_before[thread_id]
            storage = (await http.get(f"{b.url}/threads/{thread_id}/storage")).json()
            assert storage["checkpoint_count"] < stored_before[thread_id]
            assert (await on_a.threads.get(thread_id, include=["ttl"]))["ttl"]["expires_at"] is None
    for server in (a, b):
        log = (server.workdir / f"server-{server.port}.log").read_text(errors="replace")
        assert "TTL sweep left thread" not in log and "TTL sweep of thread" not in log
    print(f"process a swept {len(swept_lines(a))}, process b swept {len(swept_lines(b))}")


@pytest.mark.backend_free
async def test_the_memory_backend_refuses_keep_latest_but_takes_delete(tmp_path):
    server = LiveServer(tmp_path, config={"database": {"backend": "memory"}}).start()
    try:
        key = re.search(r"API key\s*:\s*(\S+)", server.log()).group(1)
        client = get_client(url=server.url, api_key=key)
        with pytest.raises(UnprocessableEntityError, match="keep_latest needs the sqlite or postgres backend"):
            await client.threads.create(ttl={"ttl": 5, "strategy": "keep_latest"})
        assert await client.threads.search() == []  # nothing written
        thread = await client.threads.create(ttl=5)
        assert (await client.threads.get(thread["thread_id"], include=["ttl"]))["ttl"]["strategy"] == "delete"
    finally:
        server.stop()
