"""After PostgreSQL or Redis dropped a live server's connections, no request fails.

Pools keep connections across requests; when the server on the other end
closes them (a restart, a failover, ``pg_terminate_backend``, ``CLIENT
KILL``), the next request that draws one used to fail with a 500 or a run
``error: server closed the connection unexpectedly``, once per pooled
connection. Here every connection of the live server is dropped for real and
the next requests must all succeed.
"""

from __future__ import annotations

import asyncio
import os
import socket

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.server import LiveServer, fresh_postgres_database

pytestmark = [pytest.mark.live]

DATABASE_URL = os.environ.get("DATABASE_URL")

TERMINATE_BACKENDS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
)


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


async def exercise(server, key: str, rounds: int) -> list[str]:
    """Drive each pool (ORM, sync and async savers, Redis) ``rounds`` times at once; return the failures."""

    async def one_round(index: int) -> list[str]:
        failures = []
        async with httpx.AsyncClient(base_url=server.url, headers={"x-api-key": key}, timeout=30) as http:
            created = await http.post("/threads", json={})
            if created.status_code != 200:
                return [f"create {created.status_code}: {created.text[:200]}"]
            thread_id = created.json()["thread_id"]
            for method, path, body in (
                ("POST", "/threads/search", {"limit": 5}),
                ("GET", f"/threads/{thread_id}/state", None),
                (
                    "POST",
                    f"/threads/{thread_id}/runs/wait",
                    {"assistant_id": "lead_agent", "input": human(f"r{index}")},
                ),
                ("GET", f"/threads/{thread_id}/state", None),
                ("GET", f"/threads/{thread_id}/runs", None),
            ):
                response = await http.request(method, path, json=body)
                text = response.text
                if response.status_code != 200 or '"__error__"' in text:
                    failures.append(f"{method} {path.split('/')[-1]} {response.status_code}: {text[:200]}")
            runs = (await http.get(f"/threads/{thread_id}/runs")).json()
            failures += [f"run {r['status']}: {r.get('error')}" for r in runs if r["status"] != "success"]
        return failures

    results = await asyncio.gather(*(one_round(i) for i in range(rounds)))
    return [failure for result in results for failure in result]


@pytest.mark.postgres_only
async def test_every_request_succeeds_after_postgres_terminated_all_connections(tmp_path):
    import psycopg

    with fresh_postgres_database(DATABASE_URL) as url:
        server = LiveServer(tmp_path, database_url=url).setup().start()
        try:
            key = server.api_key("alice")
            assert await exercise(server, key, rounds=4) == []
            with psycopg.connect(url, autocommit=True) as conn:
                (killed,) = conn.execute(TERMINATE_BACKENDS, [url.rsplit("/", 1)[1]]).fetchone()
            assert killed >= 3  # the ORM pool and both saver pools held connections
            failures = await exercise(server, key, rounds=4)
            assert failures == [], f"{len(failures)} failed after {killed} connections were terminated: {failures}"
        finally:
            server.stop()


async def stream(server, key: str, text: str) -> list:
    client = get_client(url=server.url, api_key=key)
    thread_id = (await client.threads.create())["thread_id"]
    return [p async for p in client.runs.stream(thread_id, "lead_agent", input=human(text))]


def tcp_endpoints(pid: int) -> set[str]:
    """Return the ``ip:port`` local ends of a process's IPv4 TCP sockets (Redis' ``addr`` of them)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}") if os.path.exists(f"/proc/{pid}/fd/{fd}") else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    endpoints = set()
    with open(f"/proc/{pid}/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ip, port = fields[1].split(":")
                endpoints.add(f"{socket.inet_ntoa(bytes.fromhex(ip)[::-1])}:{int(port, 16)}")
    return endpoints


def kill_redis_clients_of(pid: int, redis_url: str) -> int:
    """``CLIENT KILL`` every connection process ``pid`` holds to Redis (and nobody else's)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        mine = tcp_endpoints(pid)
        ids = [c["id"] for c in client.client_list() if c["addr"] in mine]
        for client_id in ids:
            client.client_kill_filter(_id=client_id)
        return len(ids)
    finally:
        client.close()


@pytest.mark.backend_free  # Redis's behaviour, whatever the database: runs once
async def test_runs_and_streams_succeed_after_redis_dropped_the_server_connections(tmp_path, redis_url):
    from contextlib import nullcontext

    config = {"stream_bridge": {"type": "redis"}, "channel_layer": {"type": "redis"}, "redis": {"url": redis_url}}
    with fresh_postgres_database(DATABASE_URL) if DATABASE_URL else nullcontext(None) as url:
        server = LiveServer(tmp_path, config=config, database_url=url).setup().start()
        try:
            key = server.api_key("alice")
            assert await exercise(server, key, rounds=3) == []
            killed = kill_redis_clients_of(server.process.pid, redis_url)
            assert killed >= 2  # the bridge and the channel layer (the cancel listener's receive)
            parts, failures = await asyncio.gather(stream(server, key, "streamed"), exercise(server, key, rounds=3))
            assert failures == [], f"{len(failures)} failed after {killed} Redis connections were killed: {failures}"
            assert [p.event for p in parts][0] == "metadata"
            assert [p.data for p in parts if p.event == "values"][-1]["messages"][-1]["content"] == "echo: streamed"
        finally:
            server.stop()
