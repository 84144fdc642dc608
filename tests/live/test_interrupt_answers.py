"""One interrupt, many answers through two server processes: exactly one runs (PostgreSQL decides)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.support import human

pytestmark = [pytest.mark.live, pytest.mark.postgres_only]

ANSWERS = 10


async def test_answers_to_one_interrupt_through_two_processes_admit_exactly_one(cluster):
    a, b = cluster
    key = a.api_key("alice")
    client = get_client(url=a.url, api_key=key)
    thread_id = (await client.threads.create())["thread_id"]
    first = await client.runs.create(thread_id, "lead_agent", input=human("/interrupt"))
    await client.runs.join(thread_id, first["run_id"])
    [interrupt] = (await client.threads.get_state(thread_id))["interrupts"]

    def respond(n: int) -> dict:
        params = {"interrupt_id": interrupt["id"], "response": f"answer {n}"}
        return {"id": n, "method": "input.respond", "params": params}

    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=30) as http:
        await asyncio.gather(http.get(f"{a.url}/ok"), http.get(f"{b.url}/ok"))  # both warm: the race is the answers'
        replies = await asyncio.gather(
            *(http.post(f"{(a, b)[n % 2].url}/threads/{thread_id}/commands", json=respond(n)) for n in range(ANSWERS))
        )
    bodies = [r.json() for r in replies]
    winners = [body["id"] for body in bodies if body["type"] == "success"]
    assert len(winners) == 1, bodies
    assert sorted(body.get("error") for body in bodies if body["type"] == "error") == ["no_such_interrupt"] * (
        ANSWERS - 1
    )
    runs = await client.runs.list(thread_id, limit=100)
    assert len(runs) == 2
    [answer] = [r for r in runs if r["run_id"] != first["run_id"]]
    await client.runs.join(thread_id, answer["run_id"])
    messages = (await client.threads.get_state(thread_id))["values"]["messages"]
    resumed = [m["content"] for m in messages if m["content"].startswith("resumed")]
    assert resumed == [f"resumed: answer {winners[0]}"]
