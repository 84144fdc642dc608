"""``POST /threads`` with ``supersteps``: the thread starts with that history, written as bulk_update_state does.

Reducers apply (the Platform's semantics, unlike ``POST /state``, which
replaces); both channel modes; all or nothing.
"""

from __future__ import annotations

import uuid

import pytest

from checkpoints.modes import DELTA_MARKER_KEY
from tests.checkpoints.support import accessor, head_metadata
from tests.helpers import raw_checkpoint_count
from tests.threads.test_state_modes import process_in_mode
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

HI = {"type": "human", "content": "hi", "id": "h1"}
HELLO = {"type": "ai", "content": "hello", "id": "a1"}


def step(*updates: tuple) -> dict:
    return {"updates": [{"values": values, "as_node": node} for values, node in updates]}


HISTORY = [
    step(({"messages": [HI]}, "user")),
    step(({"messages": [HELLO]}, "agent")),
    step(({"title": "greeting"}, "agent")),
]


def create(persona, **body):
    return persona.client.post("/api/threads", body, format="json")


def created(persona, **body) -> dict:
    response = create(persona, **body)
    assert response.status_code == 200, response.content
    return response.json()


def history(persona, thread_id: str) -> list[dict]:
    response = persona.client.post(f"/api/threads/{thread_id}/history", {"limit": 100}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_supersteps_become_the_threads_history_with_reducers_applied(owner):
    thread = created(owner, supersteps=HISTORY)
    assert [m["content"] for m in thread["values"]["messages"]] == ["hi", "hello"]  # appended, not replaced
    assert thread["values"]["title"] == "greeting" and thread["status"] == "idle"
    states = history(owner, thread["thread_id"])
    assert len(states) == 3 and all(s["next"] == [] for s in states)
    assert [s["metadata"]["source"] for s in states] == ["update"] * 3
    assert [s["metadata"]["step"] for s in states] == [2, 1, 0]
    row = ThreadMeta.objects.get(pk=thread["thread_id"])
    assert row.display_name == "greeting" and row.state_updated_at is not None
    search = owner.client.post("/api/threads/search", {"values": {"title": "greeting"}}, format="json")
    assert [t["thread_id"] for t in search.json()] == [thread["thread_id"]]


def test_updates_of_one_node_share_a_checkpoint_and_several_nodes_are_written_in_turn(owner):
    same = created(owner, supersteps=[step(({"messages": [HI]}, "a"), ({"messages": [HELLO]}, "a"))])
    assert [m["id"] for m in same["values"]["messages"]] == ["h1", "a1"]
    assert len(history(owner, same["thread_id"])) == 1
    two = created(owner, supersteps=[step(({"messages": [HI]}, "a"), ({"messages": [HELLO]}, "b"))])
    assert [m["id"] for m in two["values"]["messages"]] == ["h1", "a1"]
    assert len(history(owner, two["thread_id"])) == 2


def test_command_update_is_written_and_wins_over_values(owner):
    thread = created(
        owner,
        supersteps=[
            {"updates": [{"values": {"title": "ignored"}, "command": {"update": {"title": "c"}}, "as_node": "x"}]}
        ],
    )
    assert thread["values"]["title"] == "c"


def test_a_message_stands_for_a_list(owner):
    thread = created(owner, supersteps=[step(({"messages": HI}, "user"))])
    assert [m["id"] for m in thread["values"]["messages"]] == ["h1"]


def test_input_goes_through_the_real_graph_and_waits_at_its_start(owner):
    thread = created(owner, supersteps=[step(({"messages": [HI]}, "__input__"))])
    [state] = history(owner, thread["thread_id"])
    # As bulk_update_state on the Platform: the input is pending for the graph's first step.
    assert state["metadata"]["source"] == "input" and state["next"] == ["__start__"]


def test_supersteps_in_delta_mode_write_delta_checkpoints_that_read_as_full_modes(owner, settings):
    full = created(owner, supersteps=HISTORY)
    with process_in_mode(settings, "delta"):
        delta = created(owner, supersteps=HISTORY)
        delta_state = owner.client.get(f"/api/threads/{delta['thread_id']}/state").json()
        assert head_metadata(accessor("delta").saver, delta["thread_id"])[DELTA_MARKER_KEY] == "delta"
    full_state = owner.client.get(f"/api/threads/{full['thread_id']}/state").json()
    assert delta_state["values"] == full_state["values"]
    assert DELTA_MARKER_KEY not in head_metadata(accessor("full").saver, full["thread_id"])


def test_with_ttl_and_metadata(owner):
    thread = created(owner, supersteps=HISTORY, metadata={"copied_from": "elsewhere"}, ttl={"ttl": 30})
    assert thread["metadata"] == {"copied_from": "elsewhere"}
    assert owner.client.get(f"/api/threads/{thread['thread_id']}?include=ttl").json()["ttl"]["ttl_minutes"] == 30


def test_do_nothing_on_an_existing_thread_writes_no_supersteps(owner):
    thread_id = created(owner, supersteps=HISTORY[:1])["thread_id"]
    again = created(owner, thread_id=thread_id, if_exists="do_nothing", supersteps=HISTORY)
    assert [m["id"] for m in again["values"]["messages"]] == ["h1"]
    assert raw_checkpoint_count(thread_id) == 1


@pytest.mark.parametrize(
    ("supersteps", "needle"),
    [
        ("history", "supersteps"),
        ([{"updates": []}], "supersteps[0].updates"),
        ([{}], "supersteps[0].updates"),
        ([{"updates": [{"values": {"title": "t"}}]}], "supersteps[0].updates[0].as_node"),
        ([step(({"title": "t"}, "__bad"))], "as_node: must be a node name"),
        ([step(({"title": "t"}, 3))], "as_node"),
        ([step((["title"], "x"))], "values: must be an object of channel values"),
        ([step(({"messages": [{"content": "no type"}]}, "x"))], "supersteps[0].updates[0].values"),
        (
            [HISTORY[0], step(({"nope": 1}, "x"))],
            "supersteps[1].updates[0].values: Unknown thread-state field(s): nope",
        ),
        (
            [{"updates": [{"values": None, "command": {"update": {"title": "t"}, "goto": "x"}, "as_node": "x"}]}],
            "only update is supported",
        ),
        ([{"updates": [{"command": {"updat": {}}, "as_node": "x"}]}], "unknown key(s) 'updat'"),
        ([{"updates": [{"command": {"update": "t"}, "as_node": "x"}]}], "command.update: must be an object"),
    ],
)
def test_bad_supersteps_are_422_and_write_nothing(owner, supersteps, needle):
    thread_id = f"s-{uuid.uuid4().hex}"
    response = create(owner, thread_id=thread_id, supersteps=supersteps)
    assert response.status_code == 422, response.content
    assert needle in response.json()["detail"]
    assert not ThreadMeta.objects.filter(pk=thread_id).exists()
    assert raw_checkpoint_count(thread_id) == 0


@pytest.mark.parametrize(
    ("supersteps", "needle"),
    [
        # Refused by LangGraph after earlier supersteps were written: those go too.
        ([*HISTORY, step((None, "__input__"))], "supersteps[3]: Received no input writes"),
        ([step(({"title": "t"}, "__copy__"))], "supersteps[0]: Cannot copy a non-existent checkpoint"),
    ],
)
def test_a_superstep_langgraph_refuses_removes_the_thread_and_what_was_written(owner, supersteps, needle):
    thread_id = f"s-{uuid.uuid4().hex}"
    response = create(owner, thread_id=thread_id, supersteps=supersteps)
    assert response.status_code == 422, response.content
    assert needle in response.json()["detail"]
    assert not ThreadMeta.objects.filter(pk=thread_id).exists()
    assert raw_checkpoint_count(thread_id) == 0


def test_an_unknown_graph_is_422_before_anything(owner):
    response = create(owner, metadata={"graph_id": "no-such-graph"}, supersteps=HISTORY)
    assert response.status_code == 422 and "graph_id" in response.json()["detail"]
