"""``after_seconds`` (a delayed start) in-process.

The real ASGI app and run worker on the test's loop and the real database.
The worker polls only every 30 s here: a delayed run that starts on time was
woken by its timer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta

import httpx
import pytest
from channels.db import database_sync_to_async as db
from django.conf import settings
from django.utils import timezone

from deerflow_site import lifecycle
from deerflow_site.asgi import application
from runs.models import Cron, Run, RunEvent
from runs.services import lifecycle as run_lifecycle
from runs.services.admission import run_admit
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

POLL_SECONDS = 30.0


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def body(text: str, **options) -> dict:
    return {"assistant_id": "lead_agent", "input": human(text), **options}


def moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@pytest.fixture
async def http(owner, monkeypatch):
    monkeypatch.setattr(settings.DEERFLOW_CONFIG.runs, "poll_seconds", POLL_SECONDS)
    await lifecycle.startup()
    transport = httpx.ASGITransport(app=application)
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1/api", headers={"x-api-key": owner.key}, timeout=60
        ) as client:
            yield client
    finally:
        await lifecycle.shutdown()


async def new_thread(http) -> str:
    return (await http.post("/threads", json={})).json()["thread_id"]


async def wait_run(http, thread_id: str, run_id: str, wanted: set[str], within: float = 30) -> dict:
    deadline = time.monotonic() + within
    while True:
        run = (await http.get(f"/threads/{thread_id}/runs/{run_id}")).json()
        if run["status"] in wanted:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stuck in {run['status']}"
        await asyncio.sleep(0.05)


# -- validation: 422, nothing written ------------------------------------------------

ROUTES = ["/threads/{t}/runs", "/threads/{t}/runs/stream", "/threads/{t}/runs/wait", "/runs", "/runs/stream"]
BAD_OPTIONS = [
    ({"after_seconds": -1}, "after_seconds: Ensure this value is greater than or equal to 0"),
    ({"after_seconds": "5"}, "after_seconds: A valid number is required"),
    ({"after_seconds": True}, "after_seconds: A valid number is required"),
    ({"after_seconds": 86_401}, "after_seconds: must be at most 86400 seconds (runs.max_after_seconds)"),
    ({"after_seconds": 10**400}, "after_seconds"),
]


@pytest.mark.parametrize("route", ROUTES)
async def test_bad_delays_are_422_and_write_nothing(http, route):
    thread_id = await new_thread(http)
    threads_before = (await http.post("/threads/count", json={})).json()
    for options, detail in BAD_OPTIONS:
        response = await http.post(route.format(t=thread_id), json=body("hi", **options))
        assert response.status_code == 422, (options, response.text)
        assert detail in response.json()["detail"], response.text
    assert await db(Run.objects.count)() == 0
    assert (await http.post("/threads/count", json={})).json() == threads_before


async def test_crons_refuse_bad_delays_and_store_a_delay(http):
    too_late = await http.post("/runs/crons", json={"schedule": "*/5 * * * *", **body("x", after_seconds=-3)})
    assert too_late.status_code == 422 and "after_seconds" in too_late.json()["detail"]
    assert await db(Cron.objects.count)() == 0
    created = await http.post("/runs/crons", json={"schedule": "*/5 * * * *", **body("x", after_seconds=2.5)})
    assert created.status_code == 200, created.text
    assert created.json()["payload"]["after_seconds"] == 2.5


# -- after_seconds ---------------------------------------------------------------------


def test_no_claim_takes_a_delayed_run_before_its_time(owner):
    thread = ThreadMeta.objects.create(thread_id=f"d-{uuid.uuid4().hex}", owner=owner.user)
    run, _ = run_admit(
        owner=owner.user,
        thread=thread,
        assistant_id="lead_agent",
        strategy="reject",
        metadata={},
        kwargs={},
        after_seconds=60,
    )
    assert run.status == "pending"
    assert timedelta(seconds=59) < run.not_before - run.created_at <= timedelta(seconds=60)
    assert run_lifecycle.run_claim(run_id=run.run_id, worker_id="w", lease_seconds=30) is None
    assert run_lifecycle.run_claim_pending(worker_id="w", limit=10, lease_seconds=30) == []
    assert run_lifecycle.next_delayed_start() == run.not_before

    Run.objects.filter(pk=run.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    assert run_lifecycle.next_delayed_start() is None
    assert run_lifecycle.run_claim_pending(worker_id="w", limit=10, lease_seconds=30) == [run.run_id]


async def test_a_delayed_run_waits_pending_then_starts_at_its_time_not_at_the_next_poll(http):
    thread_id = await new_thread(http)
    admitted = (await http.post(f"/threads/{thread_id}/runs", json=body("later", after_seconds=1.5))).json()
    assert admitted["status"] == "pending"
    not_before, created = moment(admitted["not_before"]), moment(admitted["created_at"])
    assert abs((not_before - created).total_seconds() - 1.5) < 0.05
    assert admitted["kwargs"]["after_seconds"] == 1.5

    early = (await http.get(f"/threads/{thread_id}/runs/{admitted['run_id']}")).json()
    assert (early["status"], early["started_at"]) == ("pending", None)
    assert (await http.get(f"/threads/{thread_id}")).json()["status"] == "idle"

    done = await wait_run(http, thread_id, admitted["run_id"], {"success"})
    started = moment(done["started_at"])
    assert started >= not_before
    # Started by the claim loop's timer: the next poll was 30 s away.
    assert (started - not_before).total_seconds() < 5


async def test_wait_and_stream_on_a_delayed_run_wait_longer(http):
    thread_id = await new_thread(http)
    asked = time.monotonic()
    waited = await http.post(f"/threads/{thread_id}/runs/wait", json=body("w", after_seconds=1))
    assert waited.status_code == 200
    assert [m["content"] for m in waited.json()["messages"]] == ["w", "echo: w"]
    assert time.monotonic() - asked >= 1

    streamed = await http.post("/runs/stream", json=body("s", after_seconds=1, stream_mode=["values"]))
    events = [line.removeprefix("event: ") for line in streamed.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "metadata" and events[-1] == "values"
    for run in await db(list)(Run.objects.all()):
        assert run.started_at >= run.not_before


async def test_cancelling_a_delayed_run_before_its_time_means_it_never_runs(http):
    thread_id = await new_thread(http)
    admitted = (await http.post(f"/threads/{thread_id}/runs", json=body("never", after_seconds=1))).json()
    cancel = await http.post(f"/threads/{thread_id}/runs/{admitted['run_id']}/cancel")
    assert cancel.status_code == 202
    # Wait out the time it would have started at, and a claim pass beyond it.
    until = moment(admitted["not_before"]) + timedelta(seconds=1)
    while timezone.now() < until:  # noqa: ASYNC110 (waiting for a moment, not an event)
        await asyncio.sleep(0.05)
    run = (await http.get(f"/threads/{thread_id}/runs/{admitted['run_id']}")).json()
    assert (run["status"], run["error"], run["started_at"]) == ("interrupted", "Cancelled before it started", None)
    assert not await db(RunEvent.objects.filter(run_id=admitted["run_id"], event_type="run.start").exists)()
    assert (await http.get(f"/threads/{thread_id}/state")).json()["values"] == {}


async def test_a_delayed_run_holds_the_thread_like_any_pending_run(http):
    thread_id = await new_thread(http)
    delayed = (await http.post(f"/threads/{thread_id}/runs", json=body("first", after_seconds=1))).json()
    rejected = await http.post(f"/threads/{thread_id}/runs", json=body("second", multitask_strategy="reject"))
    assert rejected.status_code == 409
    queued = (await http.post(f"/threads/{thread_id}/runs", json=body("third", multitask_strategy="enqueue"))).json()
    assert queued["status"] == "pending"  # queued behind the delayed run, shown as pending
    third = await wait_run(http, thread_id, queued["run_id"], {"success"})
    first = (await http.get(f"/threads/{thread_id}/runs/{delayed['run_id']}")).json()
    assert first["status"] == "success"
    assert moment(third["started_at"]) >= moment(first["finished_at"])
    state = (await http.get(f"/threads/{thread_id}/state")).json()["values"]
    assert [m["content"] for m in state["messages"]] == ["first", "echo: first", "third", "echo: third"]
