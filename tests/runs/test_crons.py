"""Crons in-process: the API, the claim (one winner), firing as ordinary runs, catch-up after downtime."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from runs.models import Cron, Run
from runs.services.crons import crons_due, crons_fire_due, next_run_after
from tests.helpers import at_once
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db

HELLO = {"messages": [{"role": "user", "content": "hello"}]}


def _thread(persona) -> ThreadMeta:
    return ThreadMeta.objects.create(thread_id=f"cr-{uuid.uuid4().hex[:12]}", owner=persona.user)


def _create(persona, path="/api/runs/crons", **body):
    response = persona.client.post(
        path, {"assistant_id": "lead_agent", "schedule": "*/5 * * * *", "input": HELLO, **body}, format="json"
    )
    assert response.status_code == 200, response.json()
    return response.json()


def _overdue(cron_id: str, by: timedelta) -> datetime:
    """Simulate a slot (or a downtime) in the past: the cron is due now."""
    past = timezone.now() - by
    Cron.objects.filter(pk=cron_id).update(next_run_date=past)
    return past


def test_next_run_is_read_in_the_crons_timezone():
    base = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
    assert next_run_after("0 9 * * *", "", base) == datetime(2026, 1, 16, 9, 0, tzinfo=UTC)
    # 09:00 in New York is 14:00 UTC in January (EST) and 13:00 UTC in July (EDT).
    assert next_run_after("0 9 * * *", "America/New_York", base) == datetime(2026, 1, 15, 14, 0, tzinfo=UTC)
    july = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
    assert next_run_after("0 9 * * *", "America/New_York", july) == datetime(2026, 7, 15, 13, 0, tzinfo=UTC)


def test_create_thread_and_stateless_crons(owner):
    thread = _thread(owner)
    on_thread = _create(
        owner, f"/api/threads/{thread.thread_id}/runs/crons", metadata={"kind": "t"}, timezone="Europe/Paris"
    )
    assert on_thread["thread_id"] == thread.thread_id and on_thread["on_run_completed"] is None
    assert (on_thread["timezone"], on_thread["enabled"], on_thread["metadata"]) == ("Europe/Paris", True, {"kind": "t"})
    assert on_thread["payload"]["input"] == HELLO
    assert on_thread["assistant_id"] == owner.client.get("/api/assistants/lead_agent").json()["assistant_id"]
    nxt = datetime.fromisoformat(on_thread["next_run_date"])
    assert timezone.now() < nxt <= timezone.now() + timedelta(minutes=5)
    stateless = _create(owner, end_time="2030-01-01T00:00:00Z", on_run_completed="keep", enabled=False)
    assert (stateless["thread_id"], stateless["on_run_completed"], stateless["enabled"]) == (None, "keep", False)
    assert stateless["end_time"].startswith("2030-01-01T00:00:00")
    assert _create(owner)["on_run_completed"] == "delete"
    assert owner.client.get(f"/api/runs/crons/{on_thread['cron_id']}").json() == on_thread


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"schedule": "every minute"}, "schedule", 422),
        ({"schedule": "61 * * * *"}, "schedule", 422),
        ({"schedule": "0 0 31 2 *"}, "schedule", 422),  # never fires
        ({"schedule": 5}, "schedule", 422),
        ({"timezone": "Mars/Olympus"}, "timezone", 422),
        ({"timezone": "../../etc/passwd"}, "timezone", 422),
        ({"end_time": "tomorrow"}, "end_time", 422),
        ({"enabled": "sometimes"}, "enabled", 422),
        ({"on_run_completed": "archive"}, "on_run_completed", 422),
        ({"input": "hi"}, "input", 422),
        ({"checkpoint_id": "x"}, "checkpoint_id", 422),
        ({"multitask_strategy": "explode"}, "multitask_strategy", 422),
        ({"config": {"configurable": {"password": "x"}}}, "config", 422),
        ({"assistant_id": "no-such-assistant"}, None, 404),
    ],
)
def test_bad_cron_input_is_4xx_naming_the_field_and_writes_nothing(owner, body, field, status):
    response = owner.client.post(
        "/api/runs/crons", {"assistant_id": "lead_agent", "schedule": "*/5 * * * *", **body}, format="json"
    )
    assert response.status_code == status, response.json()
    if field:
        # The field, or the key inside it (``config.configurable.password: looks like a secret``).
        assert response.json()["detail"].startswith((f"{field}:", f"{field}.")), response.json()
    assert not Cron.objects.exists()


def test_thread_crons_need_the_callers_thread(owner, other):
    thread = _thread(owner)
    response = other.client.post(
        f"/api/threads/{thread.thread_id}/runs/crons",
        {"assistant_id": "lead_agent", "schedule": "* * * * *"},
        format="json",
    )
    assert response.status_code == 404
    refused = owner.client.post(
        f"/api/threads/{thread.thread_id}/runs/crons",
        {"assistant_id": "lead_agent", "schedule": "* * * * *", "on_run_completed": "keep"},
        format="json",
    )
    assert refused.status_code == 422 and "on_run_completed" in refused.json()["detail"]
    assert not Cron.objects.exists()


def test_search_count_get_patch_delete_and_ownership(owner, other):
    thread = _thread(owner)
    a = _create(owner, metadata={"team": "a"})
    b = _create(owner, f"/api/threads/{thread.thread_id}/runs/crons", metadata={"team": "b"}, enabled=False)
    foreign = _create(other, metadata={"team": "a"})

    def ids(body):
        return [c["cron_id"] for c in owner.client.post("/api/runs/crons/search", body, format="json").json()]

    assert ids({}) == [b["cron_id"], a["cron_id"]]
    assert ids({"sort_order": "asc"}) == [a["cron_id"], b["cron_id"]]
    assert ids({"thread_id": thread.thread_id}) == [b["cron_id"]]
    assert ids({"enabled": True}) == [a["cron_id"]]
    assert ids({"metadata": {"team": "a"}}) == [a["cron_id"]]
    assert ids({"assistant_id": "lead_agent"}) == [b["cron_id"], a["cron_id"]]
    page = owner.client.post("/api/runs/crons/search", {"limit": 1, "select": ["cron_id", "schedule"]}, format="json")
    assert page.json() == [{"cron_id": b["cron_id"], "schedule": "*/5 * * * *"}]
    assert (page["X-Pagination-Total"], page["X-Pagination-Next"]) == ("2", "1")
    assert owner.client.post("/api/runs/crons/count", {}, format="json").json() == 2
    assert owner.client.post("/api/runs/crons/count", {"metadata": {"team": "b"}}, format="json").json() == 1

    cid = foreign["cron_id"]
    for response in (
        owner.client.get(f"/api/runs/crons/{cid}"),
        owner.client.patch(f"/api/runs/crons/{cid}", {"enabled": False}, format="json"),
        owner.client.delete(f"/api/runs/crons/{cid}"),
    ):
        assert response.status_code == 404
    assert owner.client.get("/api/runs/crons/not-a-uuid").status_code == 422
    assert Cron.objects.get(pk=cid).enabled

    before = datetime.fromisoformat(a["next_run_date"])
    patched = owner.client.patch(
        f"/api/runs/crons/{a['cron_id']}",
        {"schedule": "0 0 1 1 *", "metadata": {"x": 1}, "input": {"messages": [{"role": "user", "content": "new"}]}},
        format="json",
    ).json()
    assert patched["schedule"] == "0 0 1 1 *" and datetime.fromisoformat(patched["next_run_date"]) > before
    assert patched["metadata"] == {"team": "a", "x": 1}
    assert patched["payload"]["input"]["messages"][0]["content"] == "new"
    assert patched["payload"]["assistant_id"] == a["payload"]["assistant_id"]
    ended = owner.client.patch(f"/api/runs/crons/{a['cron_id']}", {"end_time": "2031-01-01T00:00:00Z"}, format="json")
    assert ended.json()["end_time"].startswith("2031")
    cleared = owner.client.patch(f"/api/runs/crons/{a['cron_id']}", {"end_time": None}, format="json").json()
    assert cleared["end_time"] is None
    bad = owner.client.patch(f"/api/runs/crons/{a['cron_id']}", {"timezone": "Nowhere/Land"}, format="json")
    assert bad.status_code == 422 and bad.json()["detail"].startswith("timezone:")
    assert owner.client.patch(f"/api/runs/crons/{a['cron_id']}", {}, format="json").status_code == 422
    assert (
        owner.client.patch(f"/api/runs/crons/{a['cron_id']}", {"assistant_id": "x"}, format="json").status_code == 422
    )

    assert owner.client.delete(f"/api/runs/crons/{a['cron_id']}").status_code == 204
    assert owner.client.get(f"/api/runs/crons/{a['cron_id']}").status_code == 404
    assert owner.client.post("/api/runs/crons/count", {}, format="json").json() == 1


def test_deleting_a_users_assistant_deletes_its_crons(owner):
    aid = owner.client.post("/api/assistants", {"graph_id": "lead_agent"}, format="json").json()["assistant_id"]
    cron = _create(owner, assistant_id=aid)
    assert cron["assistant_id"] == aid
    assert owner.client.delete(f"/api/assistants/{aid}").status_code == 204
    assert not Cron.objects.filter(pk=cron["cron_id"]).exists()


def test_a_due_thread_cron_fires_exactly_one_ordinary_run(owner):
    thread = _thread(owner)
    cron = _create(owner, f"/api/threads/{thread.thread_id}/runs/crons", metadata={"from": "cron"})
    assert crons_fire_due() == []  # not due yet
    slot = _overdue(cron["cron_id"], timedelta(seconds=1))

    [firing] = crons_fire_due()
    assert crons_fire_due() == []  # the slot is consumed

    run = Run.objects.get(thread=thread)
    assert firing.run.run_id == run.run_id and firing.error is None
    assert (run.status, run.multitask_strategy, run.assistant_id) == ("pending", "enqueue", "lead_agent")
    assert run.metadata == {"from": "cron"}
    assert run.kwargs["input"] == HELLO and run.kwargs["cron_id"] == cron["cron_id"]
    assert run.kwargs["cron_slot"] == slot.isoformat()  # the slot it was claimed for
    assert run.kwargs["config"]["configurable"]["cron_id"] == cron["cron_id"]
    row = Cron.objects.get(pk=cron["cron_id"])
    assert row.next_run_date > timezone.now() and row.last_run_date is not None


def test_a_stateless_cron_gets_a_new_thread_per_firing(owner):
    cron = _create(owner, on_run_completed="keep")
    threads = set()
    for _ in range(2):
        _overdue(cron["cron_id"], timedelta(seconds=1))
        [firing] = crons_fire_due()
        threads.add(firing.run.thread_id)
        assert firing.run.kwargs["on_completion"] == "keep"
    assert len(threads) == 2
    assert ThreadMeta.objects.filter(pk__in=threads, metadata__cron_id=cron["cron_id"]).count() == 2
    deleting = _create(owner)
    _overdue(deleting["cron_id"], timedelta(seconds=1))
    assert crons_fire_due()[0].run.kwargs["on_completion"] == "delete"


def test_catch_up_after_downtime_fires_once_then_resumes_the_schedule(owner):
    cron = _create(owner, schedule="*/5 * * * *")
    # Three hours down: 36 slots passed unseen.
    _overdue(cron["cron_id"], timedelta(hours=3))
    [firing] = crons_fire_due()
    assert firing.run is not None
    assert crons_fire_due() == []
    assert Run.objects.filter(owner=owner.user).count() == 1
    row = Cron.objects.get(pk=cron["cron_id"])
    now = timezone.now()
    assert now < row.next_run_date <= now + timedelta(minutes=5)


def test_disabled_and_ended_crons_do_not_fire_and_reenabling_skips_missed_slots(owner):
    paused = _create(owner, enabled=False)
    ended = _create(owner, end_time=(timezone.now() - timedelta(minutes=1)).isoformat())
    for cron in (paused, ended):
        _overdue(cron["cron_id"], timedelta(hours=1))
    assert crons_fire_due() == []
    owner.client.patch(f"/api/runs/crons/{paused['cron_id']}", {"enabled": True}, format="json")
    assert Cron.objects.get(pk=paused["cron_id"]).next_run_date > timezone.now()
    assert crons_fire_due() == [] and not Run.objects.exists()


def test_a_refused_admission_consumes_the_slot_and_says_why(owner):
    thread = _thread(owner)
    cron = _create(owner, f"/api/threads/{thread.thread_id}/runs/crons", multitask_strategy="reject")
    Run.objects.create(
        run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent", status="running"
    )
    _overdue(cron["cron_id"], timedelta(seconds=1))
    [firing] = crons_fire_due()
    assert firing.run is None and "already running" in firing.error
    assert Run.objects.filter(thread=thread).count() == 1
    assert Cron.objects.get(pk=cron["cron_id"]).next_run_date > timezone.now()


def test_a_stale_claim_wins_nothing(owner):
    cron = _create(owner)
    _overdue(cron["cron_id"], timedelta(seconds=1))
    [seen_by_a] = crons_due(now=timezone.now(), limit=10)
    [seen_by_b] = crons_due(now=timezone.now(), limit=10)
    from runs.services.crons import cron_fire

    assert cron_fire(due=seen_by_a, now=timezone.now()) is not None
    assert cron_fire(due=seen_by_b, now=timezone.now()) is None  # b read the same slot; a moved it on
    assert Run.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_claimers_racing_on_one_due_cron_fire_it_once(owner):
    crons = [_create(owner) for _ in range(5)]
    for cron in crons:
        _overdue(cron["cron_id"], timedelta(minutes=1))
    results = at_once(crons_fire_due, 2)
    fired = [f.cron_id for batch in results for f in batch]
    assert sorted(fired) == sorted(c["cron_id"] for c in crons)  # each exactly once, across both
    assert Run.objects.count() == 5


@pytest.mark.django_db(transaction=True)
async def test_the_worker_fires_due_crons_and_executes_their_runs(owner):
    import asyncio

    from channels.db import database_sync_to_async as db

    from checkpoints.runtime import aclose_async_resources
    from core.bridge import MemoryStreamBridge
    from runs.execution.worker import RunWorker

    thread = await db(_thread)(owner)
    on_thread = await db(_create)(owner, f"/api/threads/{thread.thread_id}/runs/crons")
    stateless = await db(_create)(owner)  # on_run_completed: delete
    for cron in (on_thread, stateless):
        await db(_overdue)(cron["cron_id"], timedelta(seconds=1))
    worker = RunWorker(bridge=MemoryStreamBridge(max_events=100), claim=True)
    worker.loop = asyncio.get_running_loop()

    def settled(firing) -> bool:
        row = Run.objects.filter(pk=firing.run.run_id).values_list("status", flat=True).first()
        gone = not ThreadMeta.objects.filter(pk=firing.run.thread_id).exists()
        # The stateless firing's thread (and its run with it) is deleted once the run ends.
        return row == "success" if firing.cron_id == on_thread["cron_id"] else gone

    try:
        firings = await worker.fire_due_crons()
        assert sorted(f.cron_id for f in firings) == sorted([on_thread["cron_id"], stateless["cron_id"]])
        deadline = time.monotonic() + 30
        while not all([await db(settled)(f) for f in firings]):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert await worker.fire_due_crons() == []
    finally:
        await worker.aclose()
        await aclose_async_resources()
    run = await db(Run.objects.get)(thread=thread)
    assert (run.status, run.last_ai_message) == ("success", "echo: hello")
