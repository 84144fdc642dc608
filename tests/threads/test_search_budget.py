"""A thread search answers a bounded amount of JSON and pages on (issue: 98 MB for 40 fat threads)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_budget(settings):
    config = settings.DEERFLOW_CONFIG
    limits = config.limits.model_copy(update={"max_response_bytes": 65_536})
    settings.DEERFLOW_CONFIG = config.model_copy(update={"limits": limits})
    return 65_536


def test_a_search_stops_at_the_response_budget_and_pages_through_everything(owner, small_budget):
    created = [
        owner.client.post("/api/threads", {"metadata": {"blob": f"{i}" * 30_000}}, format="json").json()["thread_id"]
        for i in range(5)
    ]
    seen: list[str] = []
    offset = 0
    while True:
        response = owner.client.post("/api/threads/search", {"limit": 10, "offset": offset}, format="json")
        assert response.status_code == 200
        page = response.json()
        assert len(response.content) <= small_budget
        assert 1 <= len(page) < 5  # five 30 KB threads never fit one 64 KiB answer
        assert response["X-Pagination-Total"] == "5"
        seen += [t["thread_id"] for t in page]
        if "X-Pagination-Next" not in response:
            break
        offset = int(response["X-Pagination-Next"])
        assert offset == len(seen)
    assert sorted(seen) == sorted(created)


def test_one_thread_larger_than_the_budget_is_still_listed(owner, settings):
    config = settings.DEERFLOW_CONFIG
    limits = config.limits.model_copy(update={"max_response_bytes": 65_536, "max_metadata_bytes": 131_072})
    settings.DEERFLOW_CONFIG = config.model_copy(update={"limits": limits})
    thread_id = owner.client.post("/api/threads", {"metadata": {"blob": "x" * 100_000}}, format="json").json()[
        "thread_id"
    ]
    response = owner.client.post("/api/threads/search", {}, format="json")
    assert [t["thread_id"] for t in json.loads(response.content)] == [thread_id]
    assert "X-Pagination-Next" not in response
