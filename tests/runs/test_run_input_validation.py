"""Run requests: malformed messages and unstorable values are 422 and admit nothing.

The serializer tests pin what is accepted and refused; the live tests send
raw bytes to every run-creating route of a real server process (on this
pass's backend) and check that no run and no thread was created.
"""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings

from runs.schemas import RunCreateSerializer


def validate(**body):
    serializer = RunCreateSerializer(data={"assistant_id": "lead_agent", **body})
    return serializer.is_valid(), serializer.errors


MALFORMED = [
    5,
    [{"foo": 1}],
    [{"type": "bogus", "content": "x"}],
    [{"role": "user", "content": {"a": 1}}],
    [{"role": "user", "content": [{"text": "no type"}]}],
    [{"type": "tool", "content": "r"}],
    [{"type": "ai", "content": "x", "tool_calls": 5}],
]


@pytest.mark.parametrize("messages", MALFORMED)
def test_malformed_input_messages_are_refused_naming_the_message(messages):
    ok, errors = validate(input={"messages": messages})
    assert not ok
    assert "messages[0]" in str(errors["input"])


@pytest.mark.parametrize("messages", MALFORMED)
def test_malformed_command_update_messages_are_refused(messages):
    ok, errors = validate(command={"update": {"messages": messages}})
    assert not ok
    assert "messages[0]" in str(errors["command"])


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}],
        {"role": "user", "content": "hi"},
        [{"type": "human", "content": [{"type": "text", "text": "hi"}]}],
        [{"type": "human", "content": "hi", "id": "m-1", "additional_kwargs": {"k": 1}}],
        [
            {"type": "ai", "content": "", "tool_calls": [{"name": "f", "args": {}, "id": "c-1"}]},
            {"type": "tool", "content": "r", "tool_call_id": "c-1"},
        ],
        "hello",
        [],
    ],
)
def test_messages_the_sdk_sends_are_accepted(messages):
    ok, errors = validate(input={"messages": messages})
    assert ok, errors


@pytest.mark.parametrize(
    "options",
    [
        {"raise_error": True},  # the sync SDK 0.4.3 sends it in the /wait body
        {"feedback_keys": ["thumbs"]},
        {"langsmith_tracer": {"project_name": "p"}},
        {"durability": "exit", "checkpoint_during": False, "if_not_exists": "create"},
    ],
)
def test_run_options_the_sdks_send_are_accepted(options):
    ok, errors = validate(input={"messages": []}, **options)
    assert ok, errors


@pytest.mark.parametrize("options", [{"raise_error": "maybe"}, {"feedback_keys": "thumbs"}, {"langsmith_tracer": 3}])
def test_malformed_run_options_are_refused(options):
    ok, errors = validate(input={"messages": []}, **options)
    assert not ok and set(errors) == set(options)


@pytest.mark.django_db
def test_run_metadata_over_the_limit_is_refused():
    limit = settings.DEERFLOW_CONFIG.limits.max_metadata_bytes
    ok, errors = validate(input={"messages": []}, metadata={"a": "x" * limit})
    assert not ok
    assert "limits.max_metadata_bytes" in str(errors["metadata"])


# -- live: every run-creating route, raw bytes --------------------------------------

HUMAN = b'{"messages": [{"role": "user", "content": "hi"}]}'
BAD_BODIES = [
    (b'{"assistant_id": "lead_agent", "input": {"messages": 5}}', "input.messages[0]"),
    (b'{"assistant_id": "lead_agent", "input": {"messages": [{"type": "bogus", "content": "x"}]}}', "bogus"),
    (b'{"assistant_id": "lead_agent", "input": ' + HUMAN + b', "metadata": {"x": 1e400}}', "metadata.x"),
    (b'{"assistant_id": "lead_agent", "input": ' + HUMAN + b', "metadata": {"x": "a\\u0000"}}', "metadata.x"),
    (
        b'{"assistant_id": "lead_agent", "input": ' + HUMAN + b', "config": {"configurable": {"k": "\\ud800"}}}',
        "config.configurable.k",
    ),
    (b'{"assistant_id": "lead_agent", "input": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested deeper"),
]
ROUTES = [
    "/threads/{t}/runs",
    "/threads/{t}/runs/stream",
    "/threads/{t}/runs/wait",
    "/runs",
    "/runs/stream",
    "/runs/wait",
]


@pytest.fixture
def http(api_server):
    with httpx.Client(
        base_url=api_server.url, headers={"x-api-key": api_server.api_key("runner")}, timeout=30
    ) as client:
        yield client


@pytest.mark.live
@pytest.mark.parametrize("route", ROUTES)
def test_bad_run_bodies_are_422_and_admit_nothing(http, route):
    thread_id = http.post("/threads", json={}).json()["thread_id"]
    threads_before = http.post("/threads/count", json={}).json()
    for raw, needle in BAD_BODIES:
        response = http.post(route.format(t=thread_id), content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 422, (raw[:80], response.text)
        assert needle in response.json()["detail"], response.text
    assert http.get(f"/threads/{thread_id}/runs").json() == []
    assert http.post("/threads/count", json={}).json() == threads_before
    thread = http.get(f"/threads/{thread_id}")
    assert thread.status_code == 200 and thread.json()["status"] == "idle"
    # The thread still runs.
    response = http.post(
        f"/threads/{thread_id}/runs/wait",
        json={"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]}},
    )
    assert response.status_code == 200
    assert [m["content"] for m in response.json()["messages"]] == ["hi", "echo: hi"]
