"""``after_seconds`` and ``webhook`` through the official SDK against real server processes.

The webhook receiver is a real HTTP server on 127.0.0.1, so the servers that
call it run with ``runs.webhooks.allow_private: true``; the default server
(private addresses refused) answers 422. On PostgreSQL, delayed runs
admitted by one process are claimed once, on time, by the others (a server
and a dedicated ``run_workers`` process), and each posts its webhook once.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from datetime import datetime

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import UnprocessableEntityError

from tests.live.server import LiveServer, WorkerProcess, fresh_postgres_database
from tests.live.support import DATABASE_URL, REDIS_URL, human, scaled_config, wait_status
from tests.receiver import WebhookReceiver

pytestmark = pytest.mark.live

HOOKS = {"webhooks": {"allow_private": True, "backoff_seconds": 0.2}}


def moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@pytest.fixture(scope="module")
def beating_server(tmp_path_factory):
    """A server on this pass's backend: heartbeats every 0.4 s, webhooks may call 127.0.0.1."""
    with ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        config = {"stream_bridge": {"heartbeat_seconds": 0.4}, "runs": HOOKS}
        server = LiveServer(tmp_path_factory.mktemp("delays"), config=config, database_url=url).setup().start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def client(beating_server):
    return get_client(url=beating_server.url, api_key=beating_server.api_key("alice"))


async def run_events(server: LiveServer, thread_id: str, run_id: str, category: str, within: float = 20) -> list:
    """Wait until the run has events of ``category`` (a webhook's follows its delivery); return them."""
    headers = {"x-api-key": server.api_key("alice")}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as http:
        for _ in range(int(within / 0.05)):
            events = (await http.get(f"/threads/{thread_id}/runs/{run_id}/events")).json()
            if found := [e for e in events if e["category"] == category]:
                return found
            await asyncio.sleep(0.05)
    raise AssertionError(f"no {category} event for run {run_id}")


async def test_a_delayed_run_is_pending_until_its_time_then_runs(client):
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=human("later"), after_seconds=1.5)
    assert run["status"] == "pending" and run["started_at"] is None
    not_before = moment(run["not_before"])
    assert abs((not_before - moment(run["created_at"])).total_seconds() - 1.5) < 0.05
    done = await wait_status(client, thread_id, run["run_id"], {"success"})
    assert moment(done["started_at"]) >= not_before
    assert (await client.threads.get_state(thread_id))["values"]["messages"][-1]["content"] == "echo: later"


async def test_the_stream_of_a_delayed_run_sends_heartbeats_until_it_starts(beating_server):
    headers = {"x-api-key": beating_server.api_key("alice")}
    body = {"assistant_id": "lead_agent", "input": human("beat"), "after_seconds": 1.5}
    frames: list[str] = []
    async with httpx.AsyncClient(base_url=beating_server.url, headers=headers, timeout=30) as http:
        async with http.stream("POST", "/runs/stream", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith(("event: ", ": heartbeat")):
                    frames.append(line)
    assert frames[0] == "event: metadata"
    before_values = frames[: frames.index("event: values")]
    assert before_values.count(": heartbeat") >= 2  # 1.5 s of waiting, a heartbeat every 0.4 s


async def test_wait_and_stream_through_the_sdk_wait_for_a_delayed_run(client):
    thread_id = (await client.threads.create())["thread_id"]
    parts = [p async for p in client.runs.stream(thread_id, "lead_agent", input=human("s"), after_seconds=1)]
    assert parts[0].event == "metadata"
    assert [p.data for p in parts if p.event == "values"][-1]["messages"][-1]["content"] == "echo: s"
    values = await client.runs.wait(thread_id, "lead_agent", input=human("w"), after_seconds=1)
    assert values["messages"][-1]["content"] == "echo: w"
    for run in await client.runs.list(thread_id):
        assert moment(run["started_at"]) >= moment(run["not_before"])


async def test_a_cancelled_delayed_run_never_runs(client):
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=human("never"), after_seconds=1)
    await client.runs.cancel(thread_id, run["run_id"])
    cancelled = await wait_status(client, thread_id, run["run_id"], {"interrupted"})
    # The moment it would have started has passed, and a claim poll (1 s) with it.
    while datetime.now(moment(run["not_before"]).tzinfo) < moment(run["not_before"]):  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.5)  # waiting out the poll after that moment, not for something to start
    again = await client.runs.get(thread_id, run["run_id"])
    assert again == cancelled and again["started_at"] is None
    assert (await client.threads.get_state(thread_id))["values"] == {}


async def test_bad_delays_and_private_webhooks_are_422_on_the_default_server(api_server):
    client = get_client(url=api_server.url, api_key=api_server.api_key("alice"))
    thread_id = (await client.threads.create())["thread_id"]
    for bad in (-1, 86_401):
        with pytest.raises(UnprocessableEntityError) as refused:
            await client.runs.create(thread_id, "lead_agent", input=human("x"), after_seconds=bad)
        assert "after_seconds" in str(refused.value.response.json()["detail"])
    with pytest.raises(UnprocessableEntityError) as refused:
        await client.runs.create(thread_id, "lead_agent", input=human("x"), webhook="http://127.0.0.1:9/hook")
    assert "127.0.0.1 is a loopback address" in str(refused.value.response.json()["detail"])
    assert await client.runs.list(thread_id) == []


async def test_a_delayed_run_with_a_webhook_posts_its_final_record(client, beating_server):
    thread_id = (await client.threads.create())["thread_id"]
    with WebhookReceiver() as receiver:
        run = await client.runs.create(
            thread_id, "lead_agent", input=human("later"), after_seconds=1, webhook=receiver.url("/in?t=tok")
        )
        [got] = await receiver.arrived(1)
    record = await client.runs.get(thread_id, run["run_id"])
    sent = dict(got.body)
    sent.pop("webhook_sent_at")
    values = sent.pop("values")
    assert sent == record
    assert record["status"] == "success" and moment(record["started_at"]) >= moment(record["not_before"])
    assert values == (await client.threads.get_state(thread_id))["values"]
    assert got.path == "/in?t=tok" and "tok" not in str(record["kwargs"])
    [event] = await run_events(beating_server, thread_id, run["run_id"], "webhook")
    assert event["event_type"] == "webhook.sent" and event["content"]["status_code"] == 200


async def test_a_webhook_answered_500_is_retried(client, beating_server):
    thread_id = (await client.threads.create())["thread_id"]
    with WebhookReceiver(script=[(500, 0)]) as receiver:
        values = await client.runs.wait(thread_id, "lead_agent", input=human("r"), webhook=receiver.url())
        assert values["messages"][-1]["content"] == "echo: r"
        failed, delivered = await receiver.arrived(2)
    assert failed.body["run_id"] == delivered.body["run_id"]
    assert delivered.at - failed.at >= 0.2
    [event] = await run_events(beating_server, thread_id, failed.body["run_id"], "webhook")
    assert [a["status_code"] for a in event["content"]["history"]] == [500, 200]


@pytest.mark.postgres_only
async def test_delayed_runs_admitted_on_one_process_start_once_on_time_elsewhere(tmp_path):
    """A server that only admits; a server and a dedicated worker that execute (and post the webhooks)."""
    if not REDIS_URL:
        pytest.skip("needs Redis: set REDIS_URL")
    # The processes stop (the stack) before their database is dropped.
    with fresh_postgres_database(DATABASE_URL) as url, ExitStack() as stack:
        admits = LiveServer(
            tmp_path / "a", config=scaled_config(execute_in_server=False, **HOOKS), database_url=url
        ).setup()
        admits.start()
        stack.callback(admits.stop)
        executes = LiveServer(tmp_path / "b", config=scaled_config(**HOOKS), database_url=url).start()
        stack.callback(executes.stop)
        worker = WorkerProcess(LiveServer(tmp_path / "w", config=scaled_config(**HOOKS), database_url=url)).start()
        stack.callback(worker.stop)
        receiver = stack.enter_context(WebhookReceiver())
        client = get_client(url=admits.url, api_key=admits.api_key("alice"))

        threads = [(await client.threads.create())["thread_id"] for _ in range(6)]
        runs = await asyncio.gather(
            *(
                client.runs.create(t, "lead_agent", input=human(f"d{i}"), after_seconds=2, webhook=receiver.url())
                for i, t in enumerate(threads)
            )
        )
        for thread_id, run in zip(threads, runs, strict=True):
            done = await wait_status(client, thread_id, run["run_id"], {"success"}, within=60)
            lateness = (moment(done["started_at"]) - moment(done["not_before"])).total_seconds()
            assert 0 <= lateness < 1 + 1.5, lateness  # at most one poll late, on a loaded machine
            starts = await run_events(admits, thread_id, run["run_id"], "trace")
            assert [e["event_type"] for e in starts].count("run.start") == 1
        received = await receiver.arrived(6, within=30)
        assert sorted(r.body["run_id"] for r in received) == sorted(r["run_id"] for r in runs)
        assert all(r.body["status"] == "success" for r in received) and len(receiver.received) == 6
