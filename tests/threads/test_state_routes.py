"""State and history routes read full ThreadState objects through the accessor."""

from __future__ import annotations

import pytest

from tests.helpers import run_turns

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def thread_id(owner) -> str:
    thread_id = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]
    run_turns(thread_id, ["one", "two", "three"])
    return thread_id


def history(owner, thread_id, **body):
    response = owner.client.post(f"/api/threads/{thread_id}/history", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_state_has_the_sdk_shape(owner, thread_id):
    state = owner.client.get(f"/api/threads/{thread_id}/state").json()
    assert [m["content"] for m in state["values"]["messages"]] == [
        "one",
        "echo: one",
        "two",
        "echo: two",
        "three",
        "echo: three",
    ]
    assert state["next"] == [] and state["tasks"] == [] and state["interrupts"] == []
    checkpoint = state["checkpoint"]
    assert checkpoint["thread_id"] == thread_id and checkpoint["checkpoint_ns"] == ""
    assert state["checkpoint_id"] == checkpoint["checkpoint_id"]
    assert state["parent_checkpoint"]["checkpoint_id"] == state["parent_checkpoint_id"]
    assert state["metadata"]["source"] == "loop"
    assert state["created_at"]


def test_state_of_a_thread_without_checkpoints_is_empty(owner):
    thread_id = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]
    state = owner.client.get(f"/api/threads/{thread_id}/state").json()
    assert state["values"] == {} and state["checkpoint"]["checkpoint_id"] is None


def test_history_is_newest_first_with_complete_values(owner, thread_id):
    entries = history(owner, thread_id, limit=100)
    # Each turn writes three checkpoints: the input, the step before the node and after it.
    assert len(entries) == 9
    steps = [e["metadata"]["step"] for e in entries]
    assert steps == sorted(steps, reverse=True)
    counts = [len(e["values"].get("messages", [])) for e in entries]
    assert counts[0] == 6
    assert counts == sorted(counts, reverse=True)
    # Every entry carries complete values, not DeerFlow's trimmed ones.
    assert all(
        "title" in e["values"] for e in entries if e["values"].get("messages") and len(e["values"]["messages"]) > 1
    )


def test_history_limit_and_default(owner, thread_id):
    assert len(history(owner, thread_id)) == 9
    assert len(history(owner, thread_id, limit=2)) == 2


@pytest.mark.parametrize("encoding", ["id", "checkpoint", "config"])
def test_history_before_accepts_all_three_encodings(owner, thread_id, encoding):
    everything = history(owner, thread_id, limit=100)
    anchor = everything[2]["checkpoint"]
    before = {
        "id": anchor["checkpoint_id"],
        "checkpoint": anchor,
        "config": {"configurable": {"checkpoint_id": anchor["checkpoint_id"]}},
    }[encoding]
    page = history(owner, thread_id, limit=3, before=before)
    assert [e["checkpoint_id"] for e in page] == [e["checkpoint_id"] for e in everything[3:6]]


def test_history_pages_without_overlap(owner, thread_id):
    everything = [e["checkpoint_id"] for e in history(owner, thread_id, limit=100)]
    seen, before = [], None
    while True:
        page = history(owner, thread_id, limit=4, **({"before": before} if before else {}))
        if not page:
            break
        seen += [e["checkpoint_id"] for e in page]
        before = page[-1]["checkpoint"]
    assert seen == everything


def test_history_filters_by_metadata(owner, thread_id):
    inputs = history(owner, thread_id, limit=100, metadata={"source": "input"})
    assert len(inputs) == 3  # one input checkpoint per turn
    assert all(e["metadata"]["source"] == "input" for e in inputs)


def test_get_history_by_query(owner, thread_id):
    response = owner.client.get(f"/api/threads/{thread_id}/history?limit=2")
    assert response.status_code == 200
    assert len(response.json()) == 2


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"before": 12}, "before"),
        ({"before": {"checkpoint_id": 5}}, "before"),
        ({"metadata": "x"}, "metadata"),
    ],
)
def test_history_rejects_bad_input(owner, thread_id, body, needle):
    response = owner.client.post(f"/api/threads/{thread_id}/history", body, format="json")
    assert response.status_code == 422
    assert needle in response.json()["detail"]


def test_state_at_checkpoint_by_path_and_by_object(owner, thread_id):
    entries = history(owner, thread_id, limit=100)
    older = entries[3]
    by_path = owner.client.get(f"/api/threads/{thread_id}/state/{older['checkpoint_id']}").json()
    by_object = owner.client.post(
        f"/api/threads/{thread_id}/state/checkpoint", {"checkpoint": older["checkpoint"]}, format="json"
    ).json()
    assert by_path["values"] == older["values"] == by_object["values"]
    assert by_path["checkpoint_id"] == older["checkpoint_id"]


def test_unknown_checkpoint_is_404(owner, thread_id):
    response = owner.client.get(f"/api/threads/{thread_id}/state/1f000000-0000-6000-8000-000000000000")
    assert response.status_code == 404
    assert response.json() == {"detail": "Checkpoint 1f000000-0000-6000-8000-000000000000 not found"}


def test_hidden_data_images_are_stripped_from_state_and_history_only_there(owner):
    thread_id = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]
    run_turns(thread_id, ["/image"])
    state = owner.client.get(f"/api/threads/{thread_id}/state").json()
    hidden = [m for m in state["values"]["messages"] if m["additional_kwargs"].get("hide_from_ui")]
    assert len(hidden) == 1
    assert hidden[0]["content"] == [{"type": "text", "text": "Here is the image you asked to view."}]
    assert len(state["values"]["messages"]) == 3
    newest = history(owner, thread_id, limit=1)[0]
    assert newest["values"]["messages"] == state["values"]["messages"]


def update(owner, thread_id, body, status=200):
    response = owner.client.post(f"/api/threads/{thread_id}/state", body, format="json")
    assert response.status_code == status, response.content
    return response.json()


def test_update_replaces_reducer_channels_and_mirrors_the_title(owner, thread_id):
    head_before = owner.client.get(f"/api/threads/{thread_id}/state").json()
    result = update(
        owner, thread_id, {"values": {"messages": [{"type": "human", "content": "only"}], "title": "Renamed"}}
    )
    checkpoint = result["checkpoint"]
    assert set(checkpoint) == {"thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint_map"}
    assert checkpoint["thread_id"] == thread_id
    state = owner.client.get(f"/api/threads/{thread_id}/state").json()
    assert state["checkpoint_id"] == checkpoint["checkpoint_id"]
    assert state["parent_checkpoint_id"] == head_before["checkpoint_id"]
    assert [m["content"] for m in state["values"]["messages"]] == ["only"]
    assert state["values"]["title"] == "Renamed"
    assert state["next"] == []
    assert state["metadata"]["source"] == "update"
    thread = owner.client.get(f"/api/threads/{thread_id}").json()
    assert thread["values"]["title"] == "Renamed"
    from threads.models import ThreadMeta

    assert ThreadMeta.objects.get(pk=thread_id).display_name == "Renamed"


def test_update_rejects_unknown_fields_and_writes_nothing(owner, thread_id):
    head = owner.client.get(f"/api/threads/{thread_id}/state").json()["checkpoint_id"]
    response = owner.client.post(f"/api/threads/{thread_id}/state", {"values": {"nope": 1, "zzz": 2}}, format="json")
    assert response.status_code == 422
    # A 422 of the checkpoint layer carries ``errors`` like every other 422.
    assert response.json() == {
        "detail": "Unknown thread-state field(s): nope, zzz",
        "errors": ["Unknown thread-state field(s): nope, zzz"],
    }
    assert owner.client.get(f"/api/threads/{thread_id}/state").json()["checkpoint_id"] == head


@pytest.mark.parametrize(
    "body", [{"values": [1, 2]}, {"values": "x"}, {"as_node": 5}, {"as_node": "__end__"}, {"as_node": "a|b"}]
)
def test_update_rejects_bad_shapes(owner, thread_id, body):
    response = owner.client.post(f"/api/threads/{thread_id}/state", body, format="json")
    assert response.status_code == 422


def test_update_refused_while_a_run_is_in_flight(owner, thread_id):
    import uuid

    from runs.models import Run

    Run.objects.create(
        run_id=uuid.uuid4().hex, thread_id=thread_id, owner=owner.user, assistant_id="lead_agent", status="running"
    )
    response = owner.client.post(f"/api/threads/{thread_id}/state", {"values": {"title": "x"}}, format="json")
    assert response.status_code == 409
    assert response.json() == {"detail": "Thread has a run in flight. Update state after the run finishes."}


def test_update_at_an_older_checkpoint_forks_from_it(owner, thread_id):
    older = history(owner, thread_id, limit=100)[3]
    result = update(owner, thread_id, {"values": {"title": "fork"}, "checkpoint_id": older["checkpoint_id"]})
    state = owner.client.get(f"/api/threads/{thread_id}/state/{result['checkpoint']['checkpoint_id']}").json()
    assert state["parent_checkpoint_id"] == older["checkpoint_id"]
    assert state["values"]["messages"] == older["values"]["messages"]


def test_update_with_unknown_checkpoint_is_404(owner, thread_id):
    response = owner.client.post(
        f"/api/threads/{thread_id}/state", {"values": {"title": "x"}, "checkpoint_id": "nope"}, format="json"
    )
    assert response.status_code == 404


def test_copy_as_node_forks_the_checkpoint(owner, thread_id):
    older = history(owner, thread_id, limit=100)[3]
    result = update(owner, thread_id, {"values": None, "as_node": "__copy__", "checkpoint_id": older["checkpoint_id"]})
    state = owner.client.get(f"/api/threads/{thread_id}/state").json()
    assert state["checkpoint_id"] == result["checkpoint"]["checkpoint_id"]
    assert state["values"]["messages"] == older["values"]["messages"]
    assert state["metadata"]["source"] == "fork"
