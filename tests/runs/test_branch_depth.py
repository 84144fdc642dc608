"""Branching finds the chosen answer however far back it is: the thread bounds the search, not a constant.

The demo agent writes ~3 checkpoints a turn; a search capped at 200
checkpoints refused every answer older than ~66 turns with "This turn can no
longer be branched from."
"""

from __future__ import annotations

import pytest

from tests.helpers import raw_checkpoint_count, run_turns
from tests.threads.test_state_modes import create_thread, process_in_mode

pytestmark = pytest.mark.django_db(transaction=True)

TURNS = 70


@pytest.fixture(params=["full", "delta"])
def mode(request, settings):
    with process_in_mode(settings, request.param, frequency=10):
        yield request.param


def messages(owner, thread_id: str) -> list[dict]:
    response = owner.client.get(f"/api/threads/{thread_id}/state")
    assert response.status_code == 200, response.content
    return response.json()["values"]["messages"]


def test_branching_at_the_first_answer_of_a_long_thread(owner, mode):
    thread_id = create_thread(owner)
    run_turns(thread_id, [f"turn {n}" for n in range(TURNS)])
    assert raw_checkpoint_count(thread_id) > 200, "the answer lies beyond the old 200-checkpoint scan"
    first_answer = messages(owner, thread_id)[1]
    response = owner.client.post(
        f"/api/threads/{thread_id}/branches", {"message_id": first_answer["id"]}, format="json"
    )
    assert response.status_code == 200, response.content
    branch = response.json()["thread_id"]
    assert [(m["type"], m["content"]) for m in messages(owner, branch)] == [
        ("human", "turn 0"),
        ("ai", "echo: turn 0"),
    ]
    # The branch continues from that answer.
    run_turns(branch, ["a new second turn"])
    assert messages(owner, branch)[-1]["content"] == "echo: a new second turn"
