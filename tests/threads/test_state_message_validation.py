"""State updates refuse messages LangChain cannot coerce, and keep taking what the SDK sends."""

from __future__ import annotations

import pytest

from tests.helpers import raw_checkpoint_count, run_turns

pytestmark = pytest.mark.django_db(transaction=True)


def new_thread(persona) -> str:
    response = persona.client.post("/api/threads", {}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


def update(persona, thread_id: str, values):
    return persona.client.post(f"/api/threads/{thread_id}/state", {"values": values}, format="json")


@pytest.mark.parametrize(
    ("messages", "needles"),
    [
        (5, ("values.messages[0]",)),
        ([{"foo": 1}], ("values.messages[0]", "'type' or 'role'")),
        ([{"type": "bogus", "content": "x"}], ("values.messages[0]", "bogus")),
        ([{"role": "user", "content": {"a": 1}}], ("values.messages[0]", "content must be a string")),
        ([{"role": "user", "content": [1, 2]}], ("values.messages[0]", "content[0]")),
        ([{"role": "user", "content": [{"text": "no type"}]}], ("values.messages[0]", "content[0]")),
        ([{"role": "user", "content": "ok"}, {"type": "tool", "content": "r"}], ("values.messages[1]",)),
        ([{"type": "ai", "content": "x", "tool_calls": 5}], ("values.messages[0]",)),
        ([{"role": "user", "content": "x", "additional_kwargs": 5}], ("values.messages[0]",)),
        ([None], ("values.messages[0]",)),
        ({"role": 5, "content": "x"}, ("values.messages[0]", "'type' or 'role'")),
    ],
)
def test_malformed_messages_are_422_and_write_nothing(owner, messages, needles):
    thread_id = new_thread(owner)
    run_turns(thread_id, ["hi"])
    before = raw_checkpoint_count(thread_id)
    response = update(owner, thread_id, {"messages": messages})
    assert response.status_code == 422, response.content
    detail = response.json()["detail"]
    for needle in needles:
        assert needle in detail, detail
    assert raw_checkpoint_count(thread_id) == before
    # The thread stays readable and usable.
    assert owner.client.get(f"/api/threads/{thread_id}").status_code == 200
    assert owner.client.get(f"/api/threads/{thread_id}/state").status_code == 200
    run_turns(thread_id, ["again"])


SDK_MESSAGES = [
    [{"role": "user", "content": "hi"}],
    {"role": "user", "content": "hi"},
    [{"type": "human", "content": [{"type": "text", "text": "hi"}]}],
    [{"type": "human", "content": "hi", "id": "m-1", "additional_kwargs": {"k": 1}}],
    [
        {"type": "human", "content": "weather?", "id": "h-1"},
        {
            "type": "ai",
            "content": "",
            "id": "a-1",
            "tool_calls": [{"name": "weather", "args": {"city": "Paris"}, "id": "call-1"}],
        },
        {"type": "tool", "content": "sunny", "tool_call_id": "call-1", "id": "t-1"},
        {"type": "ai", "content": "It is sunny.", "id": "a-2"},
    ],
    [{"role": "system", "content": "be brief"}, {"role": "assistant", "content": "ok"}],
    ["plain text is a human message"],
    [["user", "a role/content pair"]],
    [],
]


@pytest.mark.parametrize("messages", SDK_MESSAGES)
def test_messages_the_sdk_sends_are_accepted(owner, messages):
    thread_id = new_thread(owner)
    run_turns(thread_id, ["hi"])
    response = update(owner, thread_id, {"messages": messages})
    assert response.status_code == 200, response.content
    state = owner.client.get(f"/api/threads/{thread_id}/state")
    assert state.status_code == 200
    expected = len(messages) if isinstance(messages, list) else 1
    assert len(state.json()["values"]["messages"]) == expected
    # The next turn runs on the updated state.
    run_turns(thread_id, ["next"])
    assert owner.client.get(f"/api/threads/{thread_id}").status_code == 200


def test_a_state_read_back_can_be_posted_again(owner):
    thread_id = new_thread(owner)
    run_turns(thread_id, ["hi", "there"])
    values = owner.client.get(f"/api/threads/{thread_id}/state").json()["values"]
    response = update(owner, thread_id, {"messages": values["messages"]})
    assert response.status_code == 200, response.content
