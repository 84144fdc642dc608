"""POST /threads/{id}/runs/edit-regenerate/prepare (DeerFlow's R2): rerun the latest turn with new text.

It starts no run: the answer is what a client posts. Posting it (here, the
graph run from the answered checkpoint with the answered input) replaces the
turn; every refusal is DeerFlow's text.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from checkpoints.accessor import state_accessor
from checkpoints.graphs import graph_cache
from checkpoints.serialization import serialize
from runs.models import Run, RunStatus
from runs.services.events import run_events_append
from tests.helpers import run_turns
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


def create_thread(owner, graph_id: str | None = None) -> str:
    metadata = {"graph_id": graph_id} if graph_id else {}
    response = owner.client.post("/api/threads", {"metadata": metadata}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


def messages(thread_id: str, assistant_id: str = "lead_agent") -> list[Any]:
    return state_accessor(assistant_id).get(thread_id).values["messages"]


def record_answer(thread_id: str, run_id: str, *, status: str = RunStatus.SUCCESS, metadata=None) -> None:
    """Record the run that produced the thread's latest answer, as a worker's journal does."""
    thread = ThreadMeta.objects.get(pk=thread_id)
    Run.objects.create(run_id=run_id, thread=thread, owner_id=thread.owner_id, status=status, metadata=metadata or {})
    answer = messages(thread_id, thread.assistant_id)[-1]
    run_events_append(
        thread_id=thread_id, run_id=run_id, events=[{"event_type": "llm.ai.response", "content": serialize(answer)}]
    )


@pytest.fixture
def thread_id(owner) -> str:
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one", "two"])
    record_answer(thread_id, "run-two")
    return thread_id


def prepare(owner, thread_id: str, human_message_id: str, text: str):
    return owner.client.post(
        f"/api/threads/{thread_id}/runs/edit-regenerate/prepare",
        {"human_message_id": human_message_id, "replacement_text": text},
        format="json",
    )


def refusal(response) -> str:
    assert response.status_code == 409, response.content
    return response.json()["detail"]


def test_the_prepared_edit_reruns_the_latest_turn_with_the_new_text(owner, thread_id):
    one, echo_one, two, echo_two = messages(thread_id)
    response = prepare(owner, thread_id, two.id, "  TWO, edited ")
    assert response.status_code == 200, response.content
    prepared = response.json()
    new_id = prepared["replacement_human_message_id"]
    replacement = {"type": "human", "id": new_id, "content": [{"type": "text", "text": "TWO, edited"}]}
    # The base is titled: the current title is replayed, so the rerun cannot bring back an older one.
    assert prepared["input"] == {"messages": [{**replacement, "additional_kwargs": {}}], "title": "one"}
    assert prepared["source_message_ids"] == [two.id, echo_two.id]
    assert prepared["target_run_id"] == "run-two"
    base_id = prepared["checkpoint"]["checkpoint_id"]
    assert prepared["checkpoint"] == {"checkpoint_ns": "", "checkpoint_id": base_id, "checkpoint_map": None}
    assert prepared["metadata"] == {
        "replay_kind": "edit",
        "regenerate_from_message_id": echo_two.id,
        "regenerate_from_run_id": "run-two",
        "regenerate_checkpoint_id": base_id,
        "edit_from_message_id": two.id,
        "edit_message_id": new_id,
        "edit_version_group_id": two.id,
    }
    # The base is the settled state before the edited turn.
    accessor = state_accessor("lead_agent")
    assert [m.id for m in accessor.get(thread_id, checkpoint_id=base_id).values["messages"]] == [one.id, echo_one.id]
    # Posting it replaces the turn.
    accessor.graph.invoke(prepared["input"], accessor.config(thread_id, base_id))
    assert [(m.type, m.text) for m in messages(thread_id)] == [
        ("human", "one"),
        ("ai", "echo: one"),
        ("human", "TWO, edited"),
        ("ai", "echo: TWO, edited"),
    ]


def test_an_untitled_base_replays_no_title(owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["first"])
    record_answer(thread_id, "run-first")
    human = messages(thread_id)[0]
    prepared = prepare(owner, thread_id, human.id, "first, edited").json()
    assert "title" not in prepared["input"]


def test_an_edit_of_an_edit_keeps_the_version_group(owner, thread_id):
    Run.objects.filter(pk="run-two").update(metadata={"edit_version_group_id": "original-human"})
    two = messages(thread_id)[2]
    assert prepare(owner, thread_id, two.id, "again").json()["metadata"]["edit_version_group_id"] == "original-human"


def test_refusals_about_the_text_and_the_turn(owner, thread_id):
    one, _, two, _ = messages(thread_id)
    assert refusal(prepare(owner, thread_id, two.id, "   ")) == "Edited message cannot be empty"
    assert refusal(prepare(owner, thread_id, two.id, " two ")) == "Edited message is unchanged"
    assert refusal(prepare(owner, thread_id, one.id, "new")) == "Only the latest completed user turn can be edited"
    assert refusal(prepare(owner, thread_id, "absent", "new")) == "Only the latest completed user turn can be edited"


def test_a_turn_ending_in_a_tool_call_cannot_be_edited(owner):
    thread_id = create_thread(owner)
    call = {"name": "lookup", "args": {}, "id": "tc-1", "type": "tool_call"}
    state_accessor("lead_agent").update(
        thread_id, {"messages": [HumanMessage("q", id="h1"), AIMessage("", id="a1", tool_calls=[call])]}
    )
    assert refusal(prepare(owner, thread_id, "h1", "new")) == "Only completed assistant text turns can be edited"


def test_refusals_about_the_source_run(owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one"])
    human = messages(thread_id)[0]
    assert refusal(prepare(owner, thread_id, human.id, "new")) == "Could not find source run for assistant message"
    record_answer(thread_id, "run-failed", status=RunStatus.ERROR)
    assert (
        refusal(prepare(owner, thread_id, human.id, "new")) == "Only successful assistant runs can be edited and rerun"
    )


def test_an_active_goal_blocks_an_edit(owner, settings):
    graphs = {**settings.DEERFLOW["GRAPHS"], "goal_agent": "tests.threads.test_deerflow_thread_routes:goal_builder"}
    settings.DEERFLOW = {**settings.DEERFLOW, "GRAPHS": graphs}
    try:
        thread_id = create_thread(owner, "goal_agent")
        run_turns(thread_id, ["one"], assistant_id="goal_agent")
        record_answer(thread_id, "run-one")
        human = messages(thread_id, "goal_agent")[0]
        owner.client.put(f"/api/threads/{thread_id}/goal", {"objective": "finish"}, format="json")
        assert refusal(prepare(owner, thread_id, human.id, "new")) == "Cannot edit while a goal is active"
        owner.client.delete(f"/api/threads/{thread_id}/goal")
        assert prepare(owner, thread_id, human.id, "new").status_code == 200
    finally:
        graph_cache.clear()


def test_a_thread_without_a_checkpoint_is_404_and_others_threads_are_404(owner, other, anonymous, thread_id):
    empty = create_thread(owner)
    missing = prepare(owner, empty, "h", "new")
    assert (missing.status_code, missing.json()) == (404, {"detail": f"Thread {empty} has no checkpoint"})
    two = messages(thread_id)[2]
    assert prepare(other, thread_id, two.id, "new").status_code == 404
    response = anonymous.post(
        f"/api/threads/{thread_id}/runs/edit-regenerate/prepare", {"human_message_id": two.id, "replacement_text": "x"}
    )
    assert response.status_code in (401, 403)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"human_message_id": "h"},
        {"human_message_id": "", "replacement_text": "x"},
        {"human_message_id": "h", "replacement_text": ""},
    ],
)
def test_a_bad_body_is_422(owner, thread_id, body):
    response = owner.client.post(f"/api/threads/{thread_id}/runs/edit-regenerate/prepare", body, format="json")
    assert response.status_code == 422, response.content
