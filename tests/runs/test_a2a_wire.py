"""A2A's shapes and request checks (``runs.a2a.wire``), and the ``http.disable_a2a`` family."""

from __future__ import annotations

import pytest
from a2a.types import a2a_pb2 as a2a
from google.protobuf import json_format

from deerflow_site.graph_sources import DISABLE_FAMILIES
from deerflow_site.urls import route_family
from runs.a2a import wire
from runs.a2a.wire import A2AError

pytestmark = pytest.mark.backend_free

TASK = {
    "id": "t:r",
    "contextId": "t",
    "status": {
        "state": wire.COMPLETED,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "message": wire.text_message("ROLE_AGENT", "echo: hi", message_id="r:status", context_id="t", task="t:r"),
    },
    "artifacts": [wire.artifact("r", "echo: hi")],
    "history": [wire.text_message("ROLE_USER", "hi", message_id="m", context_id="t", task="t:r")],
}


def test_a_task_is_exactly_a2a_v1s_task():
    json_format.ParseDict(TASK, a2a.Task())  # unknown fields refused


def test_a_v03_method_gets_v03_shapes():
    old = wire.v03("SendMessage", {"task": TASK})
    assert old["kind"] == "task" and old["status"]["state"] == "completed"
    assert old["status"]["message"]["role"] == "agent" and old["history"][0]["role"] == "user"
    assert old["artifacts"][0]["parts"] == [{"kind": "text", "text": "echo: hi"}]
    update = wire.v03(
        "SubscribeToTask", {"statusUpdate": {"taskId": "t:r", "contextId": "t", "status": {"state": wire.WORKING}}}
    )
    assert update == {
        "kind": "status-update",
        "taskId": "t:r",
        "contextId": "t",
        "status": {"state": "working"},
        "final": False,
    }


@pytest.mark.parametrize(
    ("status", "awaiting", "state"),
    [
        ("pending", False, wire.SUBMITTED),
        ("queued", False, wire.SUBMITTED),
        ("running", False, wire.WORKING),
        ("success", False, wire.COMPLETED),
        ("success", True, wire.INPUT_REQUIRED),
        ("error", False, wire.FAILED),
        ("interrupted", False, wire.CANCELED),
    ],
)
def test_run_statuses_map_onto_task_states(status, awaiting, state):
    assert wire.task_state(status, awaiting_input=awaiting) == state


def test_message_text_reads_text_and_data_parts_and_refuses_files():
    parts = [{"text": "a"}, {"kind": "data", "data": {"x": 1}}]
    assert wire.message_text({"role": "user", "parts": parts}) == 'a\n{"x": 1}'
    with pytest.raises(A2AError) as refused:
        wire.message_text({"role": "ROLE_USER", "parts": [{"kind": "file", "file": {}}]})
    assert refused.value.code == wire.CONTENT_TYPE_NOT_SUPPORTED
    with pytest.raises(A2AError):
        wire.message_text({"role": "ROLE_AGENT", "parts": [{"text": "a"}]})


def test_history_length_is_at_most_ten_and_scope_context_or_task():
    assert wire.history_length(None, default=10) == 10
    for bad in (11, -1, True, "3"):
        with pytest.raises(A2AError):
            wire.history_length(bad, default=10)
    assert wire.history_scope(None, "task") == "task"
    with pytest.raises(A2AError):
        wire.history_scope("all")


def test_task_ids_compose_the_context_and_the_run():
    assert wire.split_task_id(wire.task_id("thread-1", "run-1")) == ("thread-1", "run-1")
    assert wire.split_task_id("run-1") == (None, "run-1")


def test_http_disable_a2a_removes_the_a2a_routes_alone():
    assert "a2a" in DISABLE_FAMILIES
    assert route_family("run-a2a") == route_family("assistant-a2a-card") == "a2a"
    assert route_family("run-create") == "runs"


def test_a_push_config_is_read_from_either_version_and_answered_in_each():
    from a2a.compat.v0_3 import types as v03_types

    v1 = wire.push_config(
        {"url": "https://h/p", "id": "c", "token": "t", "authentication": {"scheme": "Bearer", "credentials": "x"}},
        field="",
    )
    old = wire.push_config(
        {"url": "https://h/p", "id": "c", "token": "t", "authentication": {"schemes": ["Bearer"], "credentials": "x"}},
        field="pushNotificationConfig",
    )
    assert v1 == old == wire.PushConfig("c", "https://h/p", "t", "Bearer", "x")
    json_format.ParseDict(wire.push_config_json("t:r", "c", v1, v03=False), a2a.TaskPushNotificationConfig())
    answered = wire.push_config_json("t:r", "c", v1, v03=True)
    assert (
        v03_types.TaskPushNotificationConfig.model_validate(answered).model_dump(by_alias=True, exclude_none=True)
        == answered
    )
    with pytest.raises(A2AError) as refused:
        wire.push_config({"url": "https://h/p", "authentication": {"schemes": []}}, field="pushNotificationConfig")
    assert refused.value.message.startswith("pushNotificationConfig.authentication.scheme:")
