"""A run admitted while a state update writes its checkpoint is refused (409), so the update is never lost.

Before, the update checked for runs in flight and then wrote: a run admitted
in between started from the head being replaced, and a rollback of that run
deleted the acknowledged update. The seam is the accessor's ``update`` (the
checkpoint write itself): a second client's run arrives exactly then,
through the real admission service and the real routes.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from checkpoints.accessor import StateAccessor
from core.errors import Conflict
from runs.models import Run
from runs.services.admission import run_admit
from tests.helpers import run_turns
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

RUN = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}


def admit(owner, thread_id: str) -> Run:
    """Admit a run through the admission service (no worker runs here: the routes would 503 after admitting)."""
    thread = ThreadMeta.objects.get(pk=thread_id)
    run, _ = run_admit(
        owner=owner.user, thread=thread, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs={}
    )
    return run


@pytest.fixture
def thread_id(owner) -> str:
    thread_id = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]
    run_turns(thread_id, ["one"])
    return thread_id


def test_a_run_started_during_a_state_update_is_refused_and_the_update_lands(owner, thread_id, monkeypatch):
    answers = []
    write = StateAccessor.update

    def update_with_a_run_arriving(self, *args, **kwargs):
        # The update's check has passed; another client starts a run on the thread now.
        for strategy in ("reject", "enqueue", "interrupt", "rollback"):
            body = {**RUN, "multitask_strategy": strategy}
            answers.append(owner.client.post(f"/api/threads/{thread_id}/runs", body, format="json"))
        return write(self, *args, **kwargs)

    monkeypatch.setattr(StateAccessor, "update", update_with_a_run_arriving)
    updated = owner.client.post(
        f"/api/threads/{thread_id}/state", {"values": {"title": "by hand"}, "as_node": "agent"}, format="json"
    )
    monkeypatch.undo()

    assert updated.status_code == 200, updated.content
    for answer in answers:
        assert answer.status_code == 409, answer.content
        assert "having its state updated" in answer.json()["detail"]
    assert not Run.objects.filter(thread_id=thread_id).exclude(status="success").exists()  # nothing was admitted
    state = owner.client.get(f"/api/threads/{thread_id}/state").json()
    assert state["values"]["title"] == "by hand"
    assert state["checkpoint"]["checkpoint_id"] == updated.json()["checkpoint"]["checkpoint_id"]
    # The mark is gone once the checkpoint is written: runs are admitted again.
    assert ThreadMeta.objects.get(pk=thread_id).state_updating_at is None
    assert admit(owner, thread_id).status == "pending"


def test_a_failed_update_clears_its_mark(owner, thread_id, monkeypatch):
    def failing(self, *args, **kwargs):
        raise RuntimeError("the saver went away")

    monkeypatch.setattr(StateAccessor, "update", failing)
    with pytest.raises(RuntimeError):
        owner.client.post(f"/api/threads/{thread_id}/state", {"values": {"title": "x"}}, format="json")
    monkeypatch.undo()

    assert ThreadMeta.objects.get(pk=thread_id).state_updating_at is None
    assert admit(owner, thread_id).status == "pending"


def test_a_mark_left_by_a_process_that_died_mid_update_stops_refusing_after_a_minute(owner, thread_id):
    ThreadMeta.objects.filter(pk=thread_id).update(state_updating_at=timezone.now() - timedelta(seconds=30))
    with pytest.raises(Conflict, match="having its state updated"):
        admit(owner, thread_id)

    ThreadMeta.objects.filter(pk=thread_id).update(state_updating_at=timezone.now() - timedelta(seconds=61))
    assert admit(owner, thread_id).status == "pending"
