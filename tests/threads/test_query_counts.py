"""List endpoints do a constant number of ORM queries, however many rows they return."""

from __future__ import annotations

import uuid

import pytest

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
