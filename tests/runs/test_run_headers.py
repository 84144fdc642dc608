"""Run routes locate the run relative to the API root, never from the request's Host header."""

from __future__ import annotations

import httpx
import pytest

from deerflow_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


async def test_location_is_relative_to_the_api_root_whatever_the_host(owner, runtime):
    # A Host a proxy might have rewritten (still allowed, so Django would build URLs from it).
    transport = httpx.ASGITransport(app=application)
    headers = {"x-api-key": owner.key, "host": "localhost:9999"}
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1/api", headers=headers) as http:
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        body = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}
        created = await http.post(f"/threads/{thread_id}/runs", json=body)
        run_id = created.json()["run_id"]
        waited = await http.post(f"/threads/{thread_id}/runs/wait", json={**body, "multitask_strategy": "enqueue"})

    assert created.headers["content-location"] == f"/api/threads/{thread_id}/runs/{run_id}"
    assert "location" not in created.headers
    wait_run = waited.headers["content-location"].rsplit("/", 1)[1]
    assert waited.headers["location"] == f"/threads/{thread_id}/runs/{wait_run}/join"
    assert waited.json()["messages"][-1]["content"] == "echo: hi"
