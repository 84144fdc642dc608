"""Thread TTLs: ``ttl`` on create and patch, the clock activity restarts, and the workers' sweep.

Expiry is made to pass by writing ``expires_at`` (or by sweeping with a
later ``now``), never by waiting. Both channel modes for ``keep_latest``;
several sweepers at once on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from channels.db import database_sync_to_async as db
from django.utils import timezone

from core.errors import Conflict
from runs.models import Run, RunEvent
from tests.checkpoints.test_retention import ids, make_accessor, with_sibling_branch
from tests.helpers import aexecute_run, at_once, raw_checkpoint_count, run_turns
from threads.models import ThreadMeta
from threads.services import thread_mark_state_updated
from threads.ttl_sweep import SWEEP_CLAIM, _claim, _expire, threads_sweep_expired

pytestmark = pytest.mark.django_db(transaction=True)


def create(persona, **body) -> dict:
    response = persona.client.post("/api/threads", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def ttl_of(persona, thread_id: str) -> dict | None:
    response = persona.client.get(f"/api/threads/{thread_id}?include=ttl")
    assert response.status_code == 200, response.content
    return response.json().get("ttl")


def expire(thread_id: str, ago: timedelta = timedelta(seconds=1)) -> None:
    """Make the thread's TTL run out (the test hook: the expiry is written directly)."""
    assert ThreadMeta.objects.filter(pk=thread_id).update(expires_at=timezone.now() - ago) == 1


def unfinished_run(persona, thread_id: str, status: str = "pending") -> Run:
    return Run.objects.create(
        run_id=uuid.uuid4().hex, thread_id=thread_id, owner=persona.user, assistant_id="lead_agent", status=status
    )


# -- the policy on the wire ---------------------------------------------------------


def test_create_with_ttl_shows_it_on_get_with_include_ttl(owner):
    before = timezone.now()
    thread = create(owner, ttl={"ttl": 90, "strategy": "keep_latest"})
    assert "ttl" not in thread  # only on GET ?include=ttl, as the Platform
    assert "ttl" not in owner.client.get(f"/api/threads/{thread['thread_id']}").json()
    info = ttl_of(owner, thread["thread_id"])
    assert info["strategy"] == "keep_latest" and info["ttl_minutes"] == 90
    expires = timezone.datetime.fromisoformat(info["expires_at"])
    assert before + timedelta(minutes=90) <= expires <= timezone.now() + timedelta(minutes=90)


def test_strategy_defaults_to_delete_and_minutes_may_be_fractions(owner):
    thread = create(owner, ttl={"ttl": 0.5})
    info = ttl_of(owner, thread["thread_id"])
    assert (info["strategy"], info["ttl_minutes"]) == ("delete", 0.5)
    assert ThreadMeta.objects.get(pk=thread["thread_id"]).ttl == timedelta(seconds=30)


def test_a_thread_without_ttl_has_none(owner):
    thread = create(owner)
    assert ttl_of(owner, thread["thread_id"]) is None
    assert ThreadMeta.objects.get(pk=thread["thread_id"]).expires_at is None


def test_patch_replaces_the_ttl_and_restarts_the_clock_and_metadata_alone_keeps_it(owner):
    thread_id = create(owner, ttl={"ttl": 10})["thread_id"]
    expire(thread_id, timedelta(hours=1))
    response = owner.client.patch(
        f"/api/threads/{thread_id}",
        {"metadata": {"a": 1}, "ttl": {"ttl": 60, "strategy": "keep_latest"}},
        format="json",
    )
    assert response.status_code == 200, response.content
    row = ThreadMeta.objects.get(pk=thread_id)
    assert (row.ttl_strategy, row.ttl) == ("keep_latest", timedelta(minutes=60))
    assert row.expires_at > timezone.now() + timedelta(minutes=59)
    kept = row.expires_at
    assert owner.client.patch(f"/api/threads/{thread_id}", {"metadata": {"b": 2}}, format="json").status_code == 200
    row = ThreadMeta.objects.get(pk=thread_id)
    assert (row.ttl_strategy, row.expires_at, row.metadata) == ("keep_latest", kept, {"a": 1, "b": 2})


BAD_TTLS = [
    (5, "must be an object"),
    ("60", "must be an object"),
    ([60], "must be an object"),
    ({"strategy": "delete"}, "ttl.ttl: must be a number of minutes"),
    ({"ttl": "60"}, "ttl.ttl: must be a number of minutes"),
    ({"ttl": True}, "ttl.ttl: must be a number of minutes"),
    ({"ttl": None}, "ttl.ttl: must be a number of minutes"),
    ({"ttl": 0}, "must be more than 0"),
    ({"ttl": -5}, "must be more than 0"),
    ({"ttl": 1e12}, "at most"),
    ({"ttl": 5, "strategy": "archive"}, "ttl.strategy: must be one of delete, keep_latest"),
    ({"ttl": 5, "strategy": 1}, "ttl.strategy: must be one of"),
    ({"ttl": 5, "sweep_interval_minutes": 1}, "unknown key(s) 'sweep_interval_minutes'"),
]


@pytest.mark.parametrize(("ttl", "needle"), BAD_TTLS)
def test_bad_ttl_on_create_is_422_and_writes_nothing(owner, ttl, needle):
    before = ThreadMeta.objects.count()
    response = owner.client.post("/api/threads", {"ttl": ttl}, format="json")
    assert response.status_code == 422, response.content
    assert needle in response.json()["detail"]
    assert ThreadMeta.objects.count() == before


@pytest.mark.parametrize(("ttl", "needle"), BAD_TTLS)
def test_bad_ttl_on_patch_is_422_and_changes_nothing(owner, ttl, needle):
    thread_id = create(owner, metadata={"m": 1}, ttl={"ttl": 10})["thread_id"]
    before = ThreadMeta.objects.values().get(pk=thread_id)
    response = owner.client.patch(f"/api/threads/{thread_id}", {"metadata": {"m": 2}, "ttl": ttl}, format="json")
    assert response.status_code == 422, response.content
    assert needle in response.json()["detail"]
    assert ThreadMeta.objects.values().get(pk=thread_id) == before


def test_another_users_thread_ttl_is_404(owner, other, anonymous):
    thread_id = create(owner, ttl={"ttl": 10})["thread_id"]
    assert other.client.get(f"/api/threads/{thread_id}?include=ttl").status_code == 404
    patched = other.client.patch(f"/api/threads/{thread_id}", {"ttl": {"ttl": 1}}, format="json")
    assert patched.status_code == 404
    assert anonymous.get(f"/api/threads/{thread_id}?include=ttl").status_code == 401
    assert ThreadMeta.objects.get(pk=thread_id).ttl == timedelta(minutes=10)


# -- the clock ------------------------------------------------------------------------


def test_a_state_update_restarts_the_clock(owner):
    thread_id = create(owner, ttl={"ttl": 30})["thread_id"]
    expire(thread_id)
    response = owner.client.post(f"/api/threads/{thread_id}/state", {"values": {"title": "t"}}, format="json")
    assert response.status_code == 200, response.content
    assert ThreadMeta.objects.get(pk=thread_id).expires_at > timezone.now() + timedelta(minutes=29)
    assert threads_sweep_expired().deleted == []


def test_activity_leaves_a_thread_without_ttl_without_expiry(owner):
    thread_id = create(owner)["thread_id"]
    owner.client.post(f"/api/threads/{thread_id}/state", {"values": {"title": "t"}}, format="json")
    assert ThreadMeta.objects.get(pk=thread_id).expires_at is None


def test_a_run_restarts_the_clock_when_it_starts(owner):
    from runs.services.lifecycle import run_claim

    thread_id = create(owner, ttl={"ttl": 30})["thread_id"]
    expire(thread_id)
    run = unfinished_run(owner, thread_id)
    assert run_claim(run_id=run.run_id, worker_id="w", lease_seconds=30) is not None
    assert ThreadMeta.objects.get(pk=thread_id).expires_at > timezone.now() + timedelta(minutes=29)


async def test_a_run_restarts_the_clock_when_it_ends(owner, closing_savers):
    thread = await db(ThreadMeta.objects.get)(pk=(await db(create)(owner, ttl={"ttl": 30}))["thread_id"])
    await db(expire)(thread.thread_id)
    await aexecute_run(owner, thread, "lead_agent", {"input": {"messages": [{"type": "human", "content": "hi"}]}})
    row = await db(ThreadMeta.objects.get)(pk=thread.thread_id)
    run = await db(Run.objects.get)(thread_id=thread.thread_id)
    # Counted from the run's end (the last activity), not only from its start.
    assert row.expires_at >= run.finished_at + timedelta(minutes=30)


# -- the sweep ------------------------------------------------------------------------


def test_sweep_deletes_an_expired_delete_thread_with_everything_delete_removes(owner):
    thread_id = create(owner, ttl={"ttl": 5})["thread_id"]
    run_turns(thread_id, ["one", "two"])
    run = Run.objects.create(
        run_id=uuid.uuid4().hex, thread_id=thread_id, owner=owner.user, assistant_id="lead_agent", status="success"
    )
    RunEvent.objects.create(thread_id=thread_id, run=run, seq=1, event_type="message", category="message", content={})
    kept = create(owner, ttl={"ttl": 5})["thread_id"]  # not expired yet
    assert raw_checkpoint_count(thread_id) > 0
    expire(thread_id)
    report = threads_sweep_expired()
    assert report.deleted == [thread_id] and report.pruned == [] and report.skipped == []
    assert owner.client.get(f"/api/threads/{thread_id}").status_code == 404
    assert raw_checkpoint_count(thread_id) == 0
    assert not Run.objects.filter(thread_id=thread_id).exists()
    assert not RunEvent.objects.filter(thread_id=thread_id).exists()
    assert ThreadMeta.objects.filter(pk=kept).exists()
    assert threads_sweep_expired().deleted == []


def test_sweep_with_a_later_clock_finds_what_will_have_expired(owner):
    thread_id = create(owner, ttl={"ttl": 5})["thread_id"]
    assert threads_sweep_expired().deleted == []
    assert threads_sweep_expired(now=timezone.now() + timedelta(minutes=6)).deleted == [thread_id]


@pytest.mark.parametrize("mode", ["full", "delta"])
def test_sweep_prunes_an_expired_keep_latest_thread_down_to_its_latest_state(owner, mode):
    thread_id = create(owner, ttl={"ttl": 5, "strategy": "keep_latest"})["thread_id"]
    acc = make_accessor(mode, 2)
    branch, _ = with_sibling_branch(acc, thread_id)
    state_before = acc.get(thread_id).values
    count_before = raw_checkpoint_count(thread_id)
    expire(thread_id)
    report = threads_sweep_expired()
    assert report.pruned == [thread_id] and report.deleted == []
    assert not set(branch) & set(ids(acc, thread_id))  # the abandoned branch is gone
    assert raw_checkpoint_count(thread_id) < count_before
    assert acc.get(thread_id).values == state_before
    row = ThreadMeta.objects.get(pk=thread_id)
    assert row.expires_at is None  # nothing to do until the next activity
    assert threads_sweep_expired(now=timezone.now() + timedelta(days=1)).pruned == []
    # The next activity restarts the clock; the policy was kept. (A full-mode
    # process cannot write the delta thread, so record the activity as a state update does.)
    thread_mark_state_updated(thread_id=thread_id)
    assert ThreadMeta.objects.get(pk=thread_id).expires_at > timezone.now() + timedelta(minutes=4)


@pytest.mark.parametrize("status", ["pending", "running"])
def test_sweep_never_touches_a_thread_with_an_unfinished_run(owner, status):
    thread_id = create(owner, ttl={"ttl": 5})["thread_id"]
    run_turns(thread_id, ["one"])
    run = unfinished_run(owner, thread_id, status)
    expire(thread_id)
    report = threads_sweep_expired()
    assert (report.deleted, report.skipped) == ([], [])  # not even claimed
    assert ThreadMeta.objects.filter(pk=thread_id).exists() and raw_checkpoint_count(thread_id) > 0
    Run.objects.filter(pk=run.pk).update(status="success")
    assert threads_sweep_expired().deleted == [thread_id]


def test_a_thread_used_after_the_sweep_claimed_it_is_left_alone(owner):
    for strategy in ("delete", "keep_latest"):
        thread_id = create(owner, ttl={"ttl": 5, "strategy": strategy})["thread_id"]
        with_sibling_branch(make_accessor("full"), thread_id)
        count = raw_checkpoint_count(thread_id)
        expire(thread_id)
        now = timezone.now()
        assert _claim([thread_id], now=now, claim=now + SWEEP_CLAIM) == [thread_id]
        # Activity lands between the claim and the delete or prune.
        owner.client.post(f"/api/threads/{thread_id}/state", {"values": {"title": "used"}}, format="json")
        with pytest.raises(Conflict, match="was used after it expired"):
            _expire(ThreadMeta.objects.get(pk=thread_id), claim=now + SWEEP_CLAIM)
        assert raw_checkpoint_count(thread_id) == count + 1  # the update's checkpoint, nothing pruned


def test_a_claim_wins_once(owner):
    thread_id = create(owner, ttl={"ttl": 5})["thread_id"]
    expire(thread_id)
    now = timezone.now()
    assert _claim([thread_id], now=now, claim=now + SWEEP_CLAIM) == [thread_id]
    assert _claim([thread_id], now=now, claim=now + SWEEP_CLAIM) == []  # the claim moved its expiry on


def test_a_sweep_is_bounded_and_takes_the_oldest_expiry_first(owner):
    made = [create(owner, ttl={"ttl": 5})["thread_id"] for _ in range(5)]
    for age, thread_id in enumerate(made):
        expire(thread_id, timedelta(minutes=10 + age))  # the last made expired first
    first = threads_sweep_expired(limit=2)
    assert first.deleted == [made[4], made[3]]
    assert threads_sweep_expired(limit=10).deleted == [made[2], made[1], made[0]]


def test_sweep_limit_comes_from_config(owner, settings):
    from deerflow_site.config import parse_config

    settings.DEERFLOW_CONFIG = parse_config({"threads": {"ttl_sweep_limit": 1}}, source=Path("c.yaml"))
    for thread_id in [create(owner, ttl={"ttl": 5})["thread_id"] for _ in range(2)]:
        expire(thread_id)
    assert len(threads_sweep_expired().deleted) == 1


def test_config_refuses_a_bad_sweep_limit():
    from django.core.exceptions import ImproperlyConfigured

    from deerflow_site.config import parse_config

    with pytest.raises(ImproperlyConfigured, match="threads.ttl_sweep_limit"):
        parse_config({"threads": {"ttl_sweep_limit": 0}}, source=Path("c.yaml"))


def test_two_sweepers_claiming_the_same_candidates_win_each_thread_once(owner):
    made = [create(owner, ttl={"ttl": 5})["thread_id"] for _ in range(8)]
    for thread_id in made:
        expire(thread_id)
    now = timezone.now()
    # Both saw the same expired candidates before either claimed.
    won = at_once(lambda: _claim(made, now=now, claim=now + SWEEP_CLAIM), 2)
    assert sorted(won[0] + won[1]) == sorted(made)  # every thread won, none twice


@pytest.mark.postgres_only
def test_concurrent_sweepers_handle_each_thread_exactly_once(owner):
    made = [create(owner, ttl={"ttl": 5})["thread_id"] for _ in range(12)]
    for thread_id in made:
        run_turns(thread_id, ["x"])
        expire(thread_id)
    reports = at_once(lambda: threads_sweep_expired(limit=12), 3)
    deleted = [thread_id for report in reports for thread_id in report.deleted]
    assert sorted(deleted) == sorted(made)  # each exactly once across the three
    assert all(report.skipped == [] for report in reports)
    assert not ThreadMeta.objects.filter(pk__in=made).exists()


async def test_the_workers_poll_sweeps_expired_threads(owner, closing_savers):
    from core.bridge import MemoryStreamBridge
    from runs.execution.worker import RunWorker

    thread_id = (await db(create)(owner, ttl={"ttl": 5}))["thread_id"]
    await db(expire)(thread_id)
    worker = RunWorker(bridge=MemoryStreamBridge(max_events=100), claim=True, poll_seconds=0.05)
    await worker.start()
    try:
        deadline = time.monotonic() + 30
        while await db(ThreadMeta.objects.filter(pk=thread_id).exists)():
            assert time.monotonic() < deadline, "the worker's poll did not sweep the expired thread"
            await asyncio.sleep(0.05)
    finally:
        await worker.aclose()


# -- the deployment's default (langgraph.json checkpointer.ttl) ----------------------------------


@pytest.fixture
def default_ttl(settings):
    settings.DEERFLOW = {**settings.DEERFLOW, "DEFAULT_THREAD_TTL": {"ttl": 60, "strategy": "keep_latest"}}


def test_checkpointer_ttl_is_the_ttl_of_a_thread_created_without_one(owner, default_ttl):
    plain = create(owner)
    assert (ttl_of(owner, plain["thread_id"])["strategy"], ttl_of(owner, plain["thread_id"])["ttl_minutes"]) == (
        "keep_latest",
        60,
    )
    own = create(owner, ttl={"ttl": 5})
    assert ttl_of(owner, own["thread_id"])["ttl_minutes"] == 5  # a thread's own TTL wins


def test_checkpointer_ttl_covers_a_thread_a_run_creates(owner, default_ttl):
    from runs.services.start import _new_thread

    thread = _new_thread(
        owner=owner.user, thread_id=str(uuid.uuid4()), graph_id="lead_agent", assistant_id="lead_agent", granted={}
    )
    assert thread.ttl == timedelta(minutes=60) and thread.expires_at is not None


def test_a_bad_checkpointer_ttl_stops_start_up_in_one_line(tmp_path):
    import json

    from django.core.exceptions import ImproperlyConfigured

    from deerflow_site.config import parse_config

    for ttl, named in (
        ({"default_ttl": -1}, "default_ttl must be a positive number of minutes"),
        ({"default_ttl": 10, "strategy": "forget"}, "strategy must be delete or keep_latest"),
    ):
        (tmp_path / "langgraph.json").write_text(json.dumps({"graphs": {}, "checkpointer": {"ttl": ttl}}))
        config = parse_config({"langgraph_json": str(tmp_path / "langgraph.json")}, source=tmp_path / "c.yaml")
        with pytest.raises(ImproperlyConfigured, match=named):
            config.graph_sources()
