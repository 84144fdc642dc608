"""Several processes on one PostgreSQL and one Redis: any process serves any run.

Also: a server killed with SIGKILL mid-run, and admission races between processes.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from langgraph_sdk import get_client

from deerflow_site.config import DEFAULT_POSTGRES_POOL_SIZE
from tests.live.server import LiveServer, WorkerProcess, fresh_postgres_database
from tests.live.support import DATABASE_URL, REDIS_URL, human, scaled_config, wait_message, wait_status

pytestmark = [pytest.mark.live]

# A run worker's claim poll no run in the dedicated-worker test may wait for.
IDLE_POLL_SECONDS = 60


@pytest.mark.postgres_only
async def test_run_created_on_one_process_is_streamed_joined_and_cancelled_through_the_other(cluster):
    a, b = cluster
    key = a.api_key("alice")
    on_a = get_client(url=a.url, api_key=key)
    on_b = get_client(url=b.url, api_key=key)
    thread_id = (await on_a.threads.create())["thread_id"]

    run = await on_a.runs.create(
        thread_id, "lead_agent", input=human("/slow 1 across processes"), stream_mode=["messages-tuple"]
    )
    parts = [p async for p in on_b.runs.join_stream(thread_id, run["run_id"], last_event_id="-1")]
    assert parts[0].event == "metadata"
    assert "".join(p.data[0]["content"] for p in parts if p.event == "messages") == "echo: /slow 1 across processes"
    values = await on_b.runs.join(thread_id, run["run_id"])
    assert values["messages"][-1]["content"] == "echo: /slow 1 across processes"

    slow = await on_a.runs.create(thread_id, "lead_agent", input=human("/slow 10"))
    running = await wait_status(on_b, thread_id, slow["run_id"], {"running"})
    await on_b.runs.cancel(thread_id, slow["run_id"], action="interrupt", wait=True)
    cancelled = await on_a.runs.get(thread_id, slow["run_id"])
    assert cancelled["status"] == "interrupted"
    assert running["run_id"] == slow["run_id"]


@pytest.mark.postgres_only
async def test_twenty_simultaneous_rejecting_clients_admit_exactly_one(cluster):
    a, b = cluster
    key = a.api_key("alice")
    thread_id = (await get_client(url=a.url, api_key=key).threads.create())["thread_id"]
    body = {"assistant_id": "lead_agent", "input": human("/slow 1"), "multitask_strategy": "reject"}
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=30) as http:
        await asyncio.gather(http.get(f"{a.url}/ok"), http.get(f"{b.url}/ok"))
        responses = await asyncio.gather(
            *(http.post(f"{(a, b)[i % 2].url}/threads/{thread_id}/runs", json=body) for i in range(20))
        )
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [409] * 19, codes
    assert all("already running" in r.json()["detail"] for r in responses if r.status_code == 409)
    client = get_client(url=b.url, api_key=key)
    [run] = await client.runs.list(thread_id, limit=100)
    await client.runs.join(thread_id, run["run_id"])
    assert all(r["status"] == "success" for r in await client.runs.list(thread_id, limit=100))


@pytest.mark.postgres_only
async def test_dedicated_workers_execute_what_servers_admit(tmp_path):
    if not REDIS_URL:
        pytest.skip("needs Redis: set REDIS_URL")
    with fresh_postgres_database(DATABASE_URL) as url:
        server = (
            LiveServer(tmp_path / "s", config=scaled_config(execute_in_server=False), database_url=url).setup().start()
        )
        # A claim poll far longer than the test: only the server's wake-up can start these runs in time.
        worker_config = scaled_config(poll_seconds=IDLE_POLL_SECONDS)
        worker = WorkerProcess(LiveServer(tmp_path / "w", config=worker_config, database_url=url)).start()
        try:
            client = get_client(url=server.url, api_key=server.api_key("alice"))
            thread_id = (await client.threads.create())["thread_id"]

            async def three_runs() -> list:
                streamed = [p async for p in client.runs.stream(thread_id, "lead_agent", input=human("via worker"))]
                for turn in ("second", "third"):
                    await client.runs.wait(thread_id, "lead_agent", input=human(turn))
                return streamed

            parts = await asyncio.wait_for(three_runs(), IDLE_POLL_SECONDS / 3)
            assert [p.data for p in parts if p.event == "values"][-1]["messages"][-1]["content"] == "echo: via worker"
            runs = await client.runs.list(thread_id)
            assert [run["status"] for run in runs] == ["success"] * 3
        finally:
            assert worker.stop() == 0
            server.stop()


async def test_sigkill_mid_run_leaves_an_errored_run_and_a_readable_thread(tmp_path):
    """Kill the executing server; after restart the run says so and nothing committed is lost."""
    if DATABASE_URL:
        context = fresh_postgres_database(DATABASE_URL)
    else:
        from contextlib import nullcontext

        context = nullcontext(None)
    with context as url:
        server = LiveServer(tmp_path, database_url=url).setup().start()
        key = server.api_key("alice")
        client = get_client(url=server.url, api_key=key)
        thread_id = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread_id, "lead_agent", input=human("committed turn"))
        run = await client.runs.create(thread_id, "lead_agent", input=human("/slow 30"))
        await wait_status(client, thread_id, run["run_id"], {"running"})
        await wait_message(client, thread_id, "/slow 30")  # killed after its first checkpoint
        server.kill()
        server.start()
        try:
            client = get_client(url=server.url, api_key=key)
            failed = await client.runs.get(thread_id, run["run_id"])
            assert failed["status"] == "error"
            assert failed["error"] == "Server restarted before this run reached a durable final state."
            thread = await client.threads.get(thread_id)
            assert thread["status"] == "error"
            contents = [m["content"] for m in thread["values"]["messages"]]
            assert contents[:2] == ["committed turn", "echo: committed turn"]
            # The thread takes new runs again.
            values = await client.runs.wait(thread_id, "lead_agent", input=human("after restart"))
            assert values["messages"][-1]["content"] == "echo: after restart"
        finally:
            server.stop()


@pytest.mark.postgres_only
async def test_many_background_runs_do_not_leak_database_connections(tmp_path):
    """Many more runs than the ORM pool holds (``database.postgres_pool_size``), then the server still answers at once."""
    import time

    import psycopg

    with fresh_postgres_database(DATABASE_URL) as url:
        server = LiveServer(tmp_path, database_url=url).setup().start()
        try:
            client = get_client(url=server.url, api_key=server.api_key("alice"))
            threads = [(await client.threads.create())["thread_id"] for _ in range(30)]
            runs = await asyncio.gather(*(client.runs.create(t, "lead_agent", input=human("x")) for t in threads))
            for thread_id, run in zip(threads, runs, strict=True):
                await client.runs.join(thread_id, run["run_id"])
            assert {r["status"] for t in threads for r in await client.runs.list(t)} == {"success"}
            started = time.monotonic()
            await client.threads.create()
            assert time.monotonic() - started < 2, "the ORM pool is exhausted"
            dbname = url.rsplit("/", 1)[1]
            with psycopg.connect(url, autocommit=True) as conn:
                # The server's connections: this count's own is not one of them.
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [dbname]
                ).fetchone()
            # Django's pool + the async saver pool (all in use now that the saver has no lock) + the sync one.
            assert count <= 3 * DEFAULT_POSTGRES_POOL_SIZE, count
        finally:
            server.stop()


@pytest.mark.postgres_only
async def test_remember_then_recall_across_two_runs_and_two_processes(cluster):
    a, b = cluster
    alice_a = get_client(url=a.url, api_key=a.api_key("alice"))
    alice_b = get_client(url=b.url, api_key=a.api_key("alice"))
    bob_b = get_client(url=b.url, api_key=a.api_key("bob"))
    first = (await alice_a.threads.create())["thread_id"]
    noted = await alice_a.runs.wait(first, "lead_agent", input=human("/remember the cat is called Miso"))
    assert noted["messages"][-1]["content"] == "noted: the cat is called Miso"
    second = (await alice_b.threads.create())["thread_id"]
    recalled = await alice_b.runs.wait(second, "lead_agent", input=human("/recall"))
    assert "the cat is called Miso" in recalled["messages"][-1]["content"]
    # The graph and the /store routes see the same per-user items; bob sees none of them.
    items = await alice_b.store.search_items(["memories"])
    assert "the cat is called Miso" in [i["value"]["text"] for i in items["items"]]
    bob_thread = (await bob_b.threads.create())["thread_id"]
    nothing = await bob_b.runs.wait(bob_thread, "lead_agent", input=human("/recall"))
    assert nothing["messages"][-1]["content"] == "remembered: nothing"


@pytest.mark.postgres_only
async def test_crons_due_on_two_processes_fire_once_each(cluster):
    """Both processes poll for due crons; each slot becomes exactly one run, whichever process wins it."""
    from datetime import UTC, datetime, timedelta

    a, b = cluster
    key = a.api_key("alice")
    on_a, on_b = get_client(url=a.url, api_key=key), get_client(url=b.url, api_key=key)
    threads = [(await on_a.threads.create())["thread_id"] for _ in range(4)]
    for _ in range(5):  # all on one second, two seconds ahead (again if the machine was too slow for that)
        due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
        schedule = f"{due.minute} {due.hour} {due.day} {due.month} * {due.second}"
        crons = [
            await on_a.crons.create_for_thread(t, "lead_agent", schedule=schedule, input=human("tick"), timezone="UTC")
            for t in threads
        ]
        if all(datetime.fromisoformat(c["next_run_date"]) == due for c in crons):
            break
        for cron in crons:
            await on_a.crons.delete(cron["cron_id"])
    else:
        pytest.fail("could not schedule a slot two seconds ahead")
    for thread_id in threads:
        for _ in range(400):
            runs = await on_b.runs.list(thread_id)
            if runs and runs[0]["status"] == "success":
                break
            await asyncio.sleep(0.05)
        assert [r["status"] for r in runs] == ["success"], (thread_id, runs)
    for cron in crons:
        await on_b.crons.delete(cron["cron_id"])
