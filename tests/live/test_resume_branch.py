"""Regenerate, branch, resume and rollback never resurrect a replaced answer — in both modes."""

from __future__ import annotations

import os
from contextlib import ExitStack

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import human, wait_message, wait_status

pytestmark = pytest.mark.live

DATABASE_URL = os.environ.get("DATABASE_URL")


@pytest.fixture(scope="module", params=["full", "delta"])
def mode_server(request, tmp_path_factory):
    with ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        config = {"database": {"checkpoint_channel_mode": request.param, "checkpoint_delta": {"snapshot_frequency": 3}}}
        server = LiveServer(tmp_path_factory.mktemp(request.param), config=config, database_url=url).setup().start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def client(mode_server):
    return get_client(url=mode_server.url, api_key=mode_server.api_key("alice"))


async def two_turns(client) -> tuple[str, list[dict]]:
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "lead_agent", input=human("first question"))
    values = await client.runs.wait(thread_id, "lead_agent", input=human("second question"))
    return thread_id, values["messages"]


async def regenerate(client, thread_id: str, message_id: str) -> dict:
    prepared = await client.http.post(f"/threads/{thread_id}/runs/regenerate/prepare", json={"message_id": message_id})
    return await client.runs.wait(
        thread_id,
        "lead_agent",
        input=prepared["input"],
        checkpoint=prepared["checkpoint"],
        metadata=prepared["metadata"],
    )


def shape(messages: list[dict]) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in messages]


async def test_regenerate_replaces_the_latest_answer_for_good(client):
    thread_id, before = await two_turns(client)
    old_answer = before[-1]
    prepared = await client.http.post(
        f"/threads/{thread_id}/runs/regenerate/prepare", json={"message_id": old_answer["id"]}
    )
    assert prepared["input"]["messages"][0]["content"] == "second question"
    assert prepared["input"]["title"] == "first question"
    assert prepared["metadata"]["regenerate_from_message_id"] == old_answer["id"]
    runs = await client.runs.list(thread_id)
    assert prepared["target_run_id"] == runs[0]["run_id"]
    values = await regenerate(client, thread_id, old_answer["id"])
    reloaded = (await client.threads.get_state(thread_id))["values"]["messages"]
    for messages in (values["messages"], reloaded):
        assert shape(messages) == shape(before)
        assert old_answer["id"] not in [m["id"] for m in messages]


async def test_regenerate_refuses_what_it_cannot_do(client):
    thread_id, messages = await two_turns(client)
    path = f"/threads/{thread_id}/runs/regenerate/prepare"
    with pytest.raises(ConflictError, match="Only the latest assistant message"):
        await client.http.post(path, json={"message_id": messages[1]["id"]})
    with pytest.raises(ConflictError, match="Only visible assistant messages"):
        await client.http.post(path, json={"message_id": messages[2]["id"]})
    with pytest.raises(NotFoundError, match="Message nope not found"):
        await client.http.post(path, json={"message_id": "nope"})


async def test_branch_then_regenerate_in_the_branch_never_brings_back_the_old_answer(client):
    thread_id, before = await two_turns(client)
    branch = await client.http.post(f"/threads/{thread_id}/branches", json={"message_id": before[-1]["id"]})
    assert branch["parent_thread_id"] == thread_id and branch["history_seed_mode"] == "seeded"
    branch_id = branch["thread_id"]
    state = await client.threads.get_state(branch_id)
    assert shape(state["values"]["messages"]) == shape(before)
    thread = await client.threads.get(branch_id)
    assert thread["metadata"]["deerflow_branch"] is True
    assert thread["metadata"]["branch_parent_checkpoint_id"] == branch["parent_checkpoint_id"]
    feed = await client.http.get(f"/threads/{branch_id}/messages")
    assert [m["content"]["content"] for m in feed] == [m["content"] for m in before]

    old = state["values"]["messages"][-1]["id"]
    await regenerate(client, branch_id, old)
    reloaded = (await client.threads.get_state(branch_id))["values"]["messages"]
    assert shape(reloaded) == shape(before)
    assert old not in [m["id"] for m in reloaded]
    # The source thread is untouched.
    assert [m["id"] for m in (await client.threads.get_state(thread_id))["values"]["messages"]] == [
        m["id"] for m in before
    ]


async def test_branch_from_an_older_answer(client):
    thread_id, before = await two_turns(client)
    branch = await client.http.post(
        f"/threads/{thread_id}/branches", json={"message_id": before[1]["id"], "title": "Fork"}
    )
    state = await client.threads.get_state(branch["thread_id"])
    assert shape(state["values"]["messages"]) == shape(before[:2])
    assert (await client.threads.get(branch["thread_id"]))["values"]["title"] == "Fork"
    values = await client.runs.wait(branch["thread_id"], "lead_agent", input=human("other path"))
    assert shape(values["messages"]) == [*shape(before[:2]), ("human", "other path"), ("ai", "echo: other path")]


async def settled_after_first_turn(client, thread_id: str) -> dict:
    history = await client.threads.get_history(thread_id, limit=100)
    return next(h for h in history if len(h["values"].get("messages", [])) == 2 and not h["next"])


async def test_resume_from_an_older_checkpoint(client):
    thread_id, before = await two_turns(client)
    after_first = await settled_after_first_turn(client, thread_id)
    values = await client.runs.wait(
        thread_id, "lead_agent", input=human("instead"), checkpoint_id=after_first["checkpoint_id"]
    )
    expected = [*shape(before[:2]), ("human", "instead"), ("ai", "echo: instead")]
    assert shape(values["messages"]) == expected
    assert shape((await client.threads.get_state(thread_id))["values"]["messages"]) == expected


async def test_rollback_of_a_resumed_run_restores_the_state_before_the_resume(client):
    thread_id, before = await two_turns(client)
    after_first = await settled_after_first_turn(client, thread_id)
    run = await client.runs.create(
        thread_id, "lead_agent", input=human("/slow 8"), checkpoint_id=after_first["checkpoint_id"]
    )
    await wait_status(client, thread_id, run["run_id"], {"running"})
    await wait_message(client, thread_id, "/slow 8")  # the resume is linearized onto the head
    await client.runs.cancel(thread_id, run["run_id"], action="rollback", wait=True)
    restored = (await client.threads.get_state(thread_id))["values"]["messages"]
    assert [m["id"] for m in restored] == [m["id"] for m in before]


async def test_rollback_of_a_first_run_empties_the_thread(client):
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=human("/slow 8"))
    await wait_status(client, thread_id, run["run_id"], {"running"})
    await wait_message(client, thread_id, "/slow 8")  # the input checkpoint exists: there is something to undo
    await client.runs.cancel(thread_id, run["run_id"], action="rollback", wait=True)
    assert (await client.threads.get_state(thread_id))["values"] == {}
