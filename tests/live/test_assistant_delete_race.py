"""``DELETE /assistants/{id}`` racing run admissions on two processes: after a 204 no run of it is unfinished.

The delete cancelled the assistant's unfinished runs, then deleted the row;
runs admitted on the other process in between ran on to ``success`` (3 to 6
of 8 per race). Admission now holds the assistant's row (``FOR SHARE``) and
the delete removes it only under ``FOR UPDATE`` once none of its runs is
unfinished, so every admission either lands before (and is cancelled, waited
for) or is refused with a 404.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.live.support import human

pytestmark = [pytest.mark.live, pytest.mark.postgres_only]

ADMISSIONS = 8
RACES = 5
UNFINISHED = {"pending", "running", "queued"}


async def race(http: httpx.AsyncClient, servers) -> tuple[int, list[int], list[dict]]:
    """Admit ``ADMISSIONS`` runs of a new assistant on both servers while deleting it; return the outcome."""
    a, b = servers
    assistant = (await http.post(f"{a.url}/assistants", json={"graph_id": "lead_agent", "name": "doomed"})).json()
    threads = [
        (await http.post(f"{(a, b)[i % 2].url}/threads", json={})).json()["thread_id"] for i in range(ADMISSIONS)
    ]
    body = {"assistant_id": assistant["assistant_id"], "input": human("/slow 3")}

    async def admit(i: int) -> int:
        response = await http.post(f"{(a, b)[i % 2].url}/threads/{threads[i]}/runs", json=body)
        return response.status_code

    async def delete() -> httpx.Response:
        await asyncio.sleep(0.01 * ADMISSIONS / 2)  # among the admissions, not before them
        return await http.delete(f"{b.url}/assistants/{assistant['assistant_id']}")

    *admitted, deleted = await asyncio.gather(*(admit(i) for i in range(ADMISSIONS)), delete())
    # Read at once: what a client sees right after the 204.
    runs = [run for thread_id in threads for run in (await http.get(f"{a.url}/threads/{thread_id}/runs")).json()]
    return deleted.status_code, admitted, runs


async def test_after_a_204_no_run_of_the_deleted_assistant_is_unfinished(cluster):
    a, b = cluster
    async with httpx.AsyncClient(headers={"x-api-key": a.api_key("alice")}, timeout=60) as http:
        outcomes = []
        for _ in range(RACES):
            deleted, admitted, runs = await race(http, (a, b))
            assert deleted == 204, deleted
            assert set(admitted) <= {200, 404}, admitted
            survivors = [run["status"] for run in runs if run["status"] in UNFINISHED]
            outcomes.append((admitted.count(200), survivors))
        assert all(not survivors for _, survivors in outcomes), outcomes
