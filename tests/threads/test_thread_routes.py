"""Thread routes: create, search, count, get, patch, delete, copy, and bad input."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from checkpoints.accessor import state_accessor
from runs.models import Run, RunEvent
from tests.helpers import raw_checkpoint_count, run_turns
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


def create(persona, **body):
    response = persona.client.post("/api/threads", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_create_returns_the_sdk_thread_shape(owner):
    thread = create(owner, metadata={"topic": "x"})
    assert set(thread) >= {
        "thread_id",
        "created_at",
        "updated_at",
        "state_updated_at",
        "metadata",
        "status",
        "values",
        "interrupts",
        "config",
        "error",
    }
    assert thread["status"] == "idle"
    assert thread["values"] == {} and thread["interrupts"] == {}
    assert thread["metadata"] == {"topic": "x"}
    assert ThreadMeta.objects.get(pk=thread["thread_id"]).owner == owner.user


def test_create_with_id_and_if_exists(owner):
    thread_id = f"t-{uuid.uuid4().hex}"
    create(owner, thread_id=thread_id, metadata={"v": 1})
    conflict = owner.client.post("/api/threads", {"thread_id": thread_id}, format="json")
    assert conflict.status_code == 409
    assert conflict.json() == {"detail": f"Thread {thread_id} already exists"}
    again = create(owner, thread_id=thread_id, if_exists="do_nothing", metadata={"v": 2})
    assert again["metadata"] == {"v": 1}


def test_create_with_another_users_id_never_returns_their_thread(owner, other):
    thread_id = create(owner)["thread_id"]
    response = other.client.post("/api/threads", {"thread_id": thread_id, "if_exists": "do_nothing"}, format="json")
    assert response.status_code == 409
    assert "metadata" not in response.json()


def test_server_owned_metadata_keys_are_dropped(owner):
    thread = create(
        owner, metadata={"owner_id": "x", "user_id": "y", "deerflow_checkpoint_channel_mode": "delta", "ok": 1}
    )
    assert thread["metadata"] == {"ok": 1}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"thread_id": "has space"}, "thread_id"),
        ({"thread_id": "x" * 65}, "thread_id"),
        ({"metadata": "not-an-object"}, "metadata"),
        ({"if_exists": "replace"}, "if_exists"),
        ({"metadata": {"graph_id": "no-such-graph"}}, "graph_id"),
        ({"ttl": {"ttl": 5, "strategy": "archive"}}, "ttl.strategy"),
    ],
)
def test_create_rejects_bad_input_and_writes_nothing(owner, body, needle):
    before = ThreadMeta.objects.count()
    response = owner.client.post("/api/threads", body, format="json")
    assert response.status_code == 422
    assert needle in response.json()["detail"]
    assert ThreadMeta.objects.count() == before


def test_malformed_json_is_400_with_detail(owner):
    response = owner.client.post("/api/threads", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_text_plain_json_bodies_are_accepted(owner):
    response = owner.client.post("/api/threads", '{"metadata": {"k": 1}}', content_type="text/plain")
    assert response.status_code == 200
    assert response.json()["metadata"] == {"k": 1}


def test_search_filters_by_metadata_containment_ids_and_status(owner, other):
    a = create(owner, metadata={"team": "red", "tags": ["x", "y"], "nested": {"k": 1, "j": 2}})
    b = create(owner, metadata={"team": "blue", "tags": ["y"]})
    create(other, metadata={"team": "red"})

    def ids(body):
        response = owner.client.post("/api/threads/search", body, format="json")
        assert response.status_code == 200, response.content
        return {t["thread_id"] for t in response.json()}

    assert ids({"metadata": {"team": "red"}}) == {a["thread_id"]}
    assert ids({"metadata": {"tags": ["y"]}}) == {a["thread_id"], b["thread_id"]}
    assert ids({"metadata": {"nested": {"k": 1}}}) == {a["thread_id"]}
    assert ids({"metadata": {"nested": {"k": "1"}}}) == set()
    assert ids({"ids": [b["thread_id"]]}) == {b["thread_id"]}
    assert ids({"status": "idle"}) == {a["thread_id"], b["thread_id"]}
    assert ids({"status": "busy"}) == set()


def test_search_pages_with_headers_and_sorts(owner):
    made = [create(owner, thread_id=f"page-{i}-{uuid.uuid4().hex[:6]}", metadata={"batch": "p"}) for i in range(5)]
    first = owner.client.post(
        "/api/threads/search",
        {"metadata": {"batch": "p"}, "limit": 2, "sort_by": "thread_id", "sort_order": "asc"},
        format="json",
    )
    assert first["X-Pagination-Total"] == "5"
    assert first["X-Pagination-Next"] == "2"
    last = owner.client.post(
        "/api/threads/search",
        {"metadata": {"batch": "p"}, "limit": 2, "offset": 4, "sort_by": "thread_id", "sort_order": "asc"},
        format="json",
    )
    assert "X-Pagination-Next" not in last
    expected = sorted(t["thread_id"] for t in made)
    assert [t["thread_id"] for t in first.json()] == expected[:2]
    assert [t["thread_id"] for t in last.json()] == expected[4:]


def test_search_select_limits_fields(owner):
    create(owner)
    response = owner.client.post("/api/threads/search", {"select": ["thread_id", "status"]}, format="json")
    assert all(set(t) == {"thread_id", "status"} for t in response.json())


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 2**70}, "offset"),
        ({"sort_by": "title"}, "sort_by"),
        ({"sort_order": "sideways"}, "sort_order"),
        ({"status": "sleeping"}, "status"),
        ({"ids": ["bad id"]}, "ids"),
        ({"metadata": []}, "metadata"),
        ({"select": ["password"]}, "select"),
    ],
)
def test_search_rejects_bad_input(owner, body, needle):
    response = owner.client.post("/api/threads/search", body, format="json")
    assert response.status_code == 422
    assert needle in response.json()["detail"]


def test_count(owner, other):
    create(owner, metadata={"c": 1})
    create(owner, metadata={"c": 1})
    create(owner, metadata={"c": 2})
    create(other, metadata={"c": 1})
    response = owner.client.post("/api/threads/count", {"metadata": {"c": 1}}, format="json")
    assert response.status_code == 200
    assert response.json() == 2


def test_get_reads_values_and_interrupts_from_the_head(owner):
    thread_id = create(owner)["thread_id"]
    run_turns(thread_id, ["hello there"])
    thread = owner.client.get(f"/api/threads/{thread_id}").json()
    assert [m["content"] for m in thread["values"]["messages"]] == ["hello there", "echo: hello there"]
    assert thread["values"]["title"] == "hello there"
    assert thread["interrupts"] == {}
    run_turns(thread_id, ["/interrupt"])
    thread = owner.client.get(f"/api/threads/{thread_id}").json()
    assert thread["status"] == "interrupted"
    [(task_id, interrupts)] = thread["interrupts"].items()
    assert interrupts[0]["value"] == {"question": "approve?"}


def test_patch_merges_metadata(owner):
    thread = create(owner, metadata={"a": 1, "b": 1})
    response = owner.client.patch(f"/api/threads/{thread['thread_id']}", {"metadata": {"b": 2, "c": 3}}, format="json")
    assert response.status_code == 200
    assert response.json()["metadata"] == {"a": 1, "b": 2, "c": 3}
    minimal = owner.client.patch(
        f"/api/threads/{thread['thread_id']}", {"metadata": {"d": 4}}, format="json", HTTP_PREFER="return=minimal"
    )
    assert minimal.status_code == 204


def test_delete_removes_runs_events_checkpoints_and_writes(owner):
    thread_id = create(owner)["thread_id"]
    run_turns(thread_id, ["one", "/interrupt"])  # the interrupt leaves pending writes
    run = Run.objects.create(
        run_id=uuid.uuid4().hex, thread_id=thread_id, owner=owner.user, assistant_id="lead_agent", status="success"
    )
    RunEvent.objects.create(thread_id=thread_id, run=run, event_type="run.start", category="trace", seq=1)
    assert raw_checkpoint_count(thread_id) > 0
    assert state_accessor("lead_agent").head_tuple(thread_id).pending_writes

    response = owner.client.delete(f"/api/threads/{thread_id}")
    assert response.status_code == 204
    assert not ThreadMeta.objects.filter(pk=thread_id).exists()
    assert not Run.objects.filter(thread_id=thread_id).exists()
    assert not RunEvent.objects.filter(thread_id=thread_id).exists()
    assert raw_checkpoint_count(thread_id) == 0
    tables = (
        ["checkpoint_writes", "checkpoint_blobs", "checkpoints"]
        if connection.vendor == "postgresql"
        else ["writes", "checkpoints"]
    )
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT count(*) FROM {table} WHERE thread_id = %s", [thread_id])
            assert cursor.fetchone()[0] == 0, table
    assert owner.client.get(f"/api/threads/{thread_id}").status_code == 404


def test_a_delete_whose_cancelled_run_does_not_stop_is_409_and_erases_nothing(owner, settings):
    """A run row nobody executes stays running after its cancel: the delete gives up, thread whole."""
    settings.DEERFLOW_CONFIG = settings.DEERFLOW_CONFIG.model_copy(deep=True)
    settings.DEERFLOW_CONFIG.runs.delete_cancel_wait_seconds = 0.2
    thread_id = create(owner)["thread_id"]
    run_turns(thread_id, ["kept"])
    checkpoints = raw_checkpoint_count(thread_id)
    run = Run.objects.create(
        run_id=uuid.uuid4().hex, thread_id=thread_id, owner=owner.user, assistant_id="lead_agent", status="running"
    )
    response = owner.client.delete(f"/api/threads/{thread_id}")
    assert response.status_code == 409
    assert "did not stop after being cancelled" in response.json()["detail"]
    assert ThreadMeta.objects.filter(pk=thread_id).exists()
    assert Run.objects.get(pk=run.pk).cancel_action == "interrupt"  # the cancel itself was requested
    assert raw_checkpoint_count(thread_id) == checkpoints


def test_deleting_a_thread_with_a_queued_run_cancels_it_and_deletes(owner):
    thread_id = create(owner)["thread_id"]
    Run.objects.create(
        run_id=uuid.uuid4().hex, thread_id=thread_id, owner=owner.user, assistant_id="lead_agent", status="queued"
    )
    response = owner.client.delete(f"/api/threads/{thread_id}")
    assert response.status_code == 204, response.content
    assert not ThreadMeta.objects.filter(pk=thread_id).exists()
    assert not Run.objects.filter(thread_id=thread_id).exists()


def test_copy_rekeys_every_checkpoint(owner):
    source = create(owner, metadata={"m": 1})["thread_id"]
    run_turns(source, ["first", "second"])
    copy = owner.client.post(f"/api/threads/{source}/copy").json()
    assert copy["thread_id"] != source
    assert copy["metadata"] == {"m": 1}
    assert raw_checkpoint_count(copy["thread_id"]) == raw_checkpoint_count(source)
    source_state = owner.client.get(f"/api/threads/{source}/state").json()
    copy_state = owner.client.get(f"/api/threads/{copy['thread_id']}/state").json()
    assert copy_state["values"] == source_state["values"]
    assert copy_state["checkpoint"]["checkpoint_id"] == source_state["checkpoint"]["checkpoint_id"]
    # The copy lives on: a new turn extends it without touching the source.
    run_turns(copy["thread_id"], ["third"])
    assert len(owner.client.get(f"/api/threads/{source}/state").json()["values"]["messages"]) == 4


def test_bad_thread_id_in_path_is_422(owner):
    assert owner.client.get("/api/threads/bad%20id").status_code == 422


OWNED_ROUTES = [
    ("get", "/api/threads/{t}", None),
    ("patch", "/api/threads/{t}", {"metadata": {"x": 1}}),
    ("delete", "/api/threads/{t}", None),
    ("post", "/api/threads/{t}/copy", None),
    ("get", "/api/threads/{t}/state", None),
    ("post", "/api/threads/{t}/state/checkpoint", {"checkpoint": {"checkpoint_id": "x"}}),
    ("post", "/api/threads/{t}/history", {}),
    ("get", "/api/threads/{t}/history", None),
]


@pytest.mark.parametrize(("method", "path", "body"), OWNED_ROUTES)
def test_another_users_thread_is_404_on_every_route(owner, other, method, path, body):
    thread_id = create(owner, metadata={"secret": True})["thread_id"]
    response = getattr(other.client, method)(path.format(t=thread_id), body, format="json")
    assert response.status_code == 404
    assert response.json() == {"detail": f"Thread {thread_id} not found"}
    assert ThreadMeta.objects.get(pk=thread_id).metadata == {"secret": True}
    listed = other.client.post("/api/threads/search", {}, format="json").json()
    assert thread_id not in {t["thread_id"] for t in listed}
    assert other.client.post("/api/threads/count", {}, format="json").json() == 0
