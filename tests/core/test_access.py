"""The custom-auth filter language compiled to SQL: the same rows on SQLite and PostgreSQL, nothing loose."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from core.access import AccessScope, InvalidAuthFilter, filter_q
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db

ROWS = {
    "plain": {"org_id": "a"},
    "other": {"org_id": "b", "tags": ["x", "y"]},
    "listed": {"org_id": ["a"]},
    "object": {"org_id": {"n": 1}},
    "dunder": {"weird__key": "v"},
    "number": {"n": 1},
    "flag": {"b": True},
    "bare": {},
}


@pytest.fixture
def rows():
    owner = get_user_model().objects.create(username="filters")
    for thread_id, metadata in ROWS.items():
        ThreadMeta.objects.create(thread_id=thread_id, owner=owner, metadata=metadata, assistant_id="lead_agent")
    return owner


def matching(filters) -> list[str]:
    return sorted(ThreadMeta.objects.filter(filter_q(filters)).values_list("thread_id", flat=True))


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"org_id": "a"}, ["plain"]),  # equality: a list holding "a" is not "a"
        ({"org_id": {"$eq": "a"}}, ["plain"]),
        ({"org_id": {"$eq": {"n": 1}}}, ["object"]),
        ({"tags": {"$contains": "x"}}, ["other"]),
        ({"tags": {"$contains": ["y", "x"]}}, ["other"]),
        ({"tags": {"$contains": ["x", "z"]}}, []),
        ({"org_id": {"$contains": "a"}}, ["listed"]),  # membership, not equality
        ({"$or": [{"org_id": "a"}, {"org_id": "b"}]}, ["other", "plain"]),
        ({"$and": [{"org_id": "b"}, {"tags": {"$contains": "y"}}]}, ["other"]),
        ({"org_id": "b", "tags": {"$contains": "nope"}}, []),  # top-level keys: AND
        ({"weird__key": "v"}, ["dunder"]),  # one key, not a lookup path
        ({"n": 1}, ["number"]),
        ({"b": True}, ["flag"]),
        ({"missing": "a"}, []),
    ],
)
def test_filter_compiles_to_the_platform_semantics(rows, filters, expected):
    assert matching(filters) == expected


@pytest.mark.parametrize(
    "filters",
    [
        {"org_id": {"$ne": "a"}},
        {"org_id": {"$eq": "a", "$contains": "a"}},
        {"$or": [{"org_id": "a"}]},
        {"$not": {"org_id": "a"}},
        {"$or": "org_id"},
    ],
)
def test_a_filter_outside_the_language_is_refused_not_matched_loosely(filters):
    with pytest.raises(InvalidAuthFilter):
        filter_q(filters)


def test_scope_combines_owner_and_filter_across_a_relation():
    scope = AccessScope(filters={"org_id": "a"})
    assert "thread__metadata" in str(scope.q(prefix="thread__"))
    assert AccessScope().q() == AccessScope().q() and not AccessScope().q()
