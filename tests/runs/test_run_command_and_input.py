"""A run request's input and command: the command wins, as on the LangGraph Platform, and the pair is never refused."""

from __future__ import annotations

import pytest

from runs.schemas import RunCreateSerializer

pytestmark = pytest.mark.backend_free

RESUME = {"resume": "yes"}


def validated(**body) -> dict:
    serializer = RunCreateSerializer(data={"assistant_id": "lead_agent", **body})
    assert serializer.is_valid(), serializer.errors
    return serializer.validated_data


@pytest.mark.parametrize("given", [{}, None, {"messages": [{"role": "user", "content": "ignored"}]}])
def test_a_command_beside_any_input_wins_and_the_input_is_dropped(given):
    # The Agent Chat UI's inbox sends input {} beside the resume; the Platform runs the command.
    data = validated(input=given, command=RESUME)
    assert data["command"] == RESUME
    assert data["input"] is None


@pytest.mark.parametrize("command", [{}, None])
def test_an_empty_or_null_command_leaves_the_input_to_run(command):
    data = validated(input={"messages": [{"role": "user", "content": "hi"}]}, command=command)
    assert data["input"] == {"messages": [{"role": "user", "content": "hi"}]}
    assert data["command"] is None


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"input": {}, "command": {"resume": 1, "bogus": 2}}, "command", "unknown command key(s): bogus"),
        ({"input": {}, "command": "resume"}, "command", "must be an object"),
        ({"input": [1], "command": RESUME}, "input", "must be an object or null"),
        ({"input": {"messages": [{"foo": 1}]}, "command": RESUME}, "input", "messages[0]"),
    ],
)
def test_a_malformed_input_or_command_is_still_refused_beside_the_other(body, field, message):
    serializer = RunCreateSerializer(data={"assistant_id": "lead_agent", **body})
    assert not serializer.is_valid()
    assert message in str(serializer.errors[field])
