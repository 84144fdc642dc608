"""POST /runs/batch: several stateless runs at once; one bad payload creates none."""

from __future__ import annotations

import httpx
import pytest
from channels.db import database_sync_to_async as db

from deerflow_site import lifecycle
from deerflow_site.asgi import application
from runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def http(owner):
    await lifecycle.startup()
    transport = httpx.ASGITransport(app=application)
    headers = {"x-api-key": owner.key}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1/api", headers=headers) as client:
            yield client
    finally:
        await lifecycle.shutdown()


def payload(text: str) -> dict:
    return {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": text}]}}


async def test_a_batch_starts_one_stateless_run_per_payload(http):
    # Kept: a stateless run's thread is deleted when it ends, and a join after that is a 404.
    kept = [{**payload(text), "on_completion": "keep"} for text in ("one", "two")]
    response = await http.post("/runs/batch", json=kept)
    assert response.status_code == 200, response.text
    runs = response.json()
    assert len(runs) == 2 and len({r["thread_id"] for r in runs}) == 2
    for run, text in zip(runs, ["one", "two"], strict=True):
        joined = await http.get(f"/threads/{run['thread_id']}/runs/{run['run_id']}/join")
        assert joined.json()["messages"][-1]["content"] == f"echo: {text}"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ([payload("ok"), {"assistant_id": "lead_agent", "input": 5}], "[1].input"),
        ([], "list of 1-100 run payloads"),
        ({"assistant_id": "lead_agent"}, "list of 1-100 run payloads"),
    ],
)
async def test_a_bad_batch_is_422_and_starts_nothing(http, body, detail):
    response = await http.post("/runs/batch", json=body)
    assert response.status_code == 422
    assert detail in response.json()["detail"]
    assert await db(Run.objects.count)() == 0
