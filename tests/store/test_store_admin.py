"""The read-only admin page of Store items: per user and namespace, with sizes, filters."""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from store.selectors import store_item_size, store_user_id
from store.services import store_item_put

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/admin/checkpoints/store-items/"


@pytest.fixture
def staff_client(db) -> Client:
    user = get_user_model().objects.create_user(
        f"staff-{uuid.uuid4().hex[:6]}", password="x", is_staff=True, is_superuser=True
    )
    client = Client()
    client.force_login(user)
    return client


def test_plain_staff_cannot_read_users_memories(db):
    user = get_user_model().objects.create_user(f"staff-{uuid.uuid4().hex[:6]}", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(URL).status_code == 403


def item_rows(html: str) -> list[list[str]]:
    """Return the cells of the items table, one list per row."""
    rows = re.findall(r'<tr class="store-item">(.*?)</tr>', html, re.S)
    return [[cell.strip() for cell in re.findall(r"<td>(.*?)</td>", row, re.S)] for row in rows]


@pytest.fixture
def seeded(owner, other):
    tag = uuid.uuid4().hex[:8]
    values = {
        (owner, ("notes", tag), "a"): {"text": "short"},
        (owner, ("prefs", tag), "b"): {"text": "a much longer value " * 5},
        (other, ("notes", tag), "c"): {"n": 1},
    }
    for (persona, namespace, key), value in values.items():
        store_item_put(user_id=store_user_id(user=persona.user), namespace=namespace, key=key, value=value)
    return tag, values


def test_lists_every_users_items_with_their_size(staff_client, seeded, owner, other):
    tag, values = seeded
    response = staff_client.get(URL)
    assert response.status_code == 200
    rows = item_rows(response.content.decode())
    expected = {
        (persona.user.username, ".".join(namespace), key, str(store_item_size(value)))
        for (persona, namespace, key), value in values.items()
    }
    assert expected <= {tuple(row[:4]) for row in rows}


def test_filters_by_user_and_by_namespace(staff_client, seeded, owner, other):
    tag, _ = seeded
    by_user = item_rows(staff_client.get(URL, {"user": owner.user.pk}).content.decode())
    assert {row[0] for row in by_user} == {owner.user.username}
    assert {row[2] for row in by_user} >= {"a", "b"}

    by_namespace = item_rows(staff_client.get(URL, {"namespace": f"notes.{tag}"}).content.decode())
    assert {(row[0], row[2]) for row in by_namespace} == {(owner.user.username, "a"), (other.user.username, "c")}

    both = item_rows(staff_client.get(URL, {"user": owner.user.pk, "namespace": f"prefs.{tag}"}).content.decode())
    assert [(row[1], row[2]) for row in both] == [(f"prefs.{tag}", "b")]


def test_summarises_per_user_and_namespace(staff_client, seeded, owner):
    tag, values = seeded
    html = staff_client.get(URL, {"user": owner.user.pk}).content.decode()
    summary = re.search(r'<table id="store-namespaces">(.*?)</table>', html, re.S).group(1)
    size = store_item_size(values[(owner, ("prefs", tag), "b")])
    assert re.search(rf"prefs\.{tag}</a></td>\s*<td>1</td>\s*<td>{size}</td>", summary)


def test_a_bad_namespace_filter_shows_the_error(staff_client, seeded):
    html = staff_client.get(URL, {"namespace": "a..b"}).content.decode()
    assert "namespace: label 1 must be a non-empty string" in html and item_rows(html) == []


def test_needs_a_staff_login(client, owner):
    assert client.get(URL).status_code == 302
    client.force_login(owner.user)
    assert client.get(URL).status_code == 302


def test_is_linked_from_the_admin_index(staff_client):
    html = staff_client.get("/admin/").content.decode()
    assert f'href="{URL}"' in html and "Store items" in html


def test_page_cost_does_not_grow_with_items(staff_client, seeded, django_assert_max_num_queries):
    for index in range(30):
        user_id = store_user_id(user=get_user_model().objects.create_user(f"bulk-{uuid.uuid4().hex[:8]}"))
        store_item_put(user_id=user_id, namespace=("bulk",), key=f"k{index}", value={"i": index})
    # Store reads go through the Store's own connection; the ORM loads the
    # session, the staff user, its permissions (sidebar: 2) and all usernames (1).
    with django_assert_max_num_queries(5):
        assert staff_client.get(URL).status_code == 200


def test_plain_staff_get_no_link_to_users_memories(db):
    user = get_user_model().objects.create_user(f"staff-{uuid.uuid4().hex[:6]}", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    html = client.get("/admin/").content.decode()
    assert URL not in html and "Checkpoint settings" in html
