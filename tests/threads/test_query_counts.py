"""List endpoints do a constant number of ORM queries, however many rows they return."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver

from checkpoints.accessor import state_accessor
from checkpoints.graphs import DEFAULT_GRAPH_ID
from checkpoints.runtime import sync_resources
from runs.models import Run, RunEvent
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def many(owner):
    threads = [
        ThreadMeta.objects.create(thread_id=f"qc-{i}-{uuid.uuid4().hex[:6]}", owner=owner.user) for i in range(25)
    ]
    runs = [
        Run.objects.create(
            run_id=uuid.uuid4().hex, thread=threads[0], owner=owner.user, assistant_id="lead_agent", status="success"
        )
        for _ in range(25)
    ]
    for seq, run in enumerate(runs, start=1):
        RunEvent.objects.create(thread=threads[0], run=run, event_type="llm.ai.response", category="message", seq=seq)
    return threads


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/api/threads/search", {"limit": 25}),
        ("post", "/api/threads/count", {}),
        ("get", "/api/threads/{t}/runs?limit=25", None),
        ("get", "/api/threads/{t}/messages?limit=25", None),
        ("get", "/api/threads/{t}/messages/page?limit=25", None),
        ("get", "/api/threads/{t}/token-usage", None),
    ],
)
def test_list_routes_query_a_constant_number_of_times(owner, many, method, path, body, django_assert_max_num_queries):
    with django_assert_max_num_queries(6):
        response = getattr(owner.client, method)(path.format(t=many[0].thread_id), body, format="json")
    assert response.status_code == 200
    if path.endswith("search"):
        assert len(response.json()) == 25


class CountingSaver(BaseCheckpointSaver):
    """The process's real saver, counting the reads that reach it."""

    def __init__(self, inner: BaseCheckpointSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.reads: Counter[str] = Counter()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get_tuple(self, config):
        self.reads[config["configurable"]["thread_id"]] += 1
        return self.inner.get_tuple(config)

    def list(self, config, **kwargs):
        self.reads["list"] += 1
        return self.inner.list(config, **kwargs)

    def get_delta_channel_history(self, *args, **kwargs):
        self.reads["delta-history"] += 1
        return self.inner.get_delta_channel_history(*args, **kwargs)


@pytest.fixture
def counting_saver(monkeypatch):
    resources = sync_resources()
    saver = CountingSaver(resources.saver)
    monkeypatch.setattr(resources, "saver", saver)
    return saver


@pytest.fixture
def with_checkpoints(owner, many):
    """Give every listed thread a history, the first ones a long one: a head read must not walk it."""
    accessor = state_accessor(DEFAULT_GRAPH_ID)
    for i, thread in enumerate(many):
        for turn in range(5 if i < 5 else 1):
            accessor.update(thread.thread_id, {"messages": [{"type": "human", "content": f"t{i}-{turn}"}]})
    return many


def test_thread_search_reads_each_listed_head_once_and_no_history(
    owner, with_checkpoints, counting_saver, django_assert_max_num_queries
):
    with django_assert_max_num_queries(6):
        response = owner.client.post("/api/threads/search", {"limit": 25}, format="json")
    assert response.status_code == 200
    listed = [t["thread_id"] for t in response.json()]
    assert len(listed) == 25 and all(t["values"]["messages"] for t in response.json())
    assert counting_saver.reads == Counter({thread_id: 1 for thread_id in listed})


def test_thread_search_without_values_reads_no_checkpoint(owner, with_checkpoints, counting_saver):
    response = owner.client.post(
        "/api/threads/search", {"limit": 25, "select": ["thread_id", "metadata"]}, format="json"
    )
    assert response.status_code == 200 and len(response.json()) == 25
    assert counting_saver.reads == Counter()
