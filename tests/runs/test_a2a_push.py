"""A2A push notification configs: registered at send or by method, delivered once when the task ends.

The real ASGI app and run worker on the test's loop, the real database (this
pass's backend), and a real HTTP receiver on 127.0.0.1 (``tests.receiver``):
the tests that deliver allow private addresses, the rest keep the default
refusal. Every body is compared with what ``GetTask`` answers.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from a2a.types import a2a_pb2 as a2a
from channels.db import database_sync_to_async as db
from django.conf import settings
from google.protobuf import json_format

from runs.models import A2APushConfig, Run, RunEvent
from runs.services.webhooks import a2a_pushes_send
from tests.helpers import in_process_api
from tests.receiver import WebhookReceiver

pytestmark = pytest.mark.django_db(transaction=True)

A2A = "/a2a/lead_agent"


@pytest.fixture
def webhooks(monkeypatch):
    """The process's ``runs.webhooks`` settings, for a test to tune (restored afterwards)."""
    cfg = settings.DEERFLOW_CONFIG.runs.webhooks

    def tune(**fields):
        for name, value in fields.items():
            monkeypatch.setattr(cfg, name, value)
        return cfg

    return tune


@pytest.fixture
def private(webhooks):
    """The receiver is on 127.0.0.1: deliveries may call it, quickly retried."""
    webhooks(allow_private=True, backoff_seconds=0.1)


@pytest.fixture
async def http(owner):
    async with in_process_api(owner.key) as client:
        yield client


@pytest.fixture
def receiver():
    with WebhookReceiver() as server:
        yield server


async def call(http, method: str, params: dict, key: str | None = None) -> dict:
    headers = {"x-api-key": key} if key else {}
    answer = await http.post(A2A, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


async def result(http, method: str, params: dict, key: str | None = None):
    body = await call(http, method, params, key)
    assert "error" not in body, body
    return body["result"]


async def refusal(http, method: str, params: dict, key: str | None = None) -> tuple[int, str]:
    body = await call(http, method, params, key)
    assert "result" not in body, body
    return body["error"]["code"], body["error"]["message"]


def message(text: str, *, v03: bool = False, **fields) -> dict:
    if v03:
        return {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "parts": [{"kind": "text", "text": text}], **fields}  # fmt: skip
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **fields}


async def send(http, text: str, *, push: dict | None = None, wait: bool = True) -> dict:
    configuration: dict = {"returnImmediately": not wait}
    if push is not None:
        configuration["taskPushNotificationConfig"] = push
    return (await result(http, "SendMessage", {"message": message(text), "configuration": configuration}))["task"]


async def push_events(run_id: str, count: int = 1, within: float = 10) -> list[RunEvent]:
    """Wait for ``count`` recorded push outcomes of the run (they follow the deliveries)."""
    deadline = time.monotonic() + within
    while True:
        events = await db(list)(RunEvent.objects.filter(run_id=run_id, category="webhook").order_by("seq"))
        if len(events) >= count:
            return events
        assert time.monotonic() < deadline, f"{len(events)} push event(s) for run {run_id}, expected {count}"
        await asyncio.sleep(0.05)


def run_of(task: dict) -> str:
    return task["id"].rpartition(":")[2]


async def test_the_card_says_push_notifications_are_supported(http):
    card = (await http.get("/.well-known/agent-card.json", params={"assistant_id": "lead_agent"})).json()
    assert card["capabilities"]["pushNotifications"] is True


# -- delivery ----------------------------------------------------------------------------------


async def test_a_config_given_at_send_receives_the_task_with_its_token_and_authorization(http, receiver, private):
    config = {"url": receiver.url("/push?k=v"), "token": "tok-1", "authentication": {"scheme": "Bearer", "credentials": "s3cret"}}  # fmt: skip
    task = await send(http, "hi", push=config)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    [got] = await receiver.arrived(1)
    assert got.path == "/push?k=v"
    assert got.headers["X-A2A-Notification-Token"] == "tok-1"
    assert got.headers["Authorization"] == "Bearer s3cret"
    assert got.body == await result(http, "GetTask", {"id": task["id"]})
    json_format.ParseDict(got.body, a2a.Task())  # exactly v1.0's Task
    assert got.body["artifacts"][0]["parts"] == [{"text": "echo: hi"}]
    [event] = await push_events(run_of(task))
    assert event.event_type == "webhook.sent"
    assert (event.content["kind"], event.content["config_id"], event.content["task_id"]) == ("a2a_push", task["id"], task["id"])  # fmt: skip
    assert event.content["url"] == receiver.url("/push?…")
    assert "tok-1" not in str(event.content) and "s3cret" not in str(event.content)


async def test_a_v03_config_at_send_receives_the_task_in_v03_shapes(http, receiver, private):
    config = {"id": "mine", "url": receiver.url(), "authentication": {"schemes": ["Basic"], "credentials": "dTpw"}}
    params = {"message": message("old", v03=True), "configuration": {"pushNotificationConfig": config}}
    task = await result(http, "message/send", params)
    [got] = await receiver.arrived(1)
    assert got.headers["Authorization"] == "Basic dTpw" and "X-A2A-Notification-Token" not in got.headers
    assert got.body == await result(http, "tasks/get", {"id": task["id"]})
    assert got.body["kind"] == "task" and got.body["status"]["state"] == "completed"
    listed = await result(http, "tasks/pushNotificationConfig/list", {"id": task["id"]})
    assert listed == [{"taskId": task["id"], "pushNotificationConfig": config}]


async def test_a_config_created_on_a_running_task_is_sent_at_its_end_once_retried_after_500(http, private):
    with WebhookReceiver(script=[(500, 0)]) as receiver:
        task = await send(http, "/slow 1", wait=False)
        created = await result(http, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "id": "a", "url": receiver.url()})  # fmt: skip
        assert created == {"taskId": task["id"], "id": "a", "url": receiver.url()}
        json_format.ParseDict(created, a2a.TaskPushNotificationConfig())
        failed, delivered = await receiver.arrived(2)
        [event] = await push_events(run_of(task))
    assert delivered.at - failed.at >= 0.1
    assert failed.body == delivered.body and delivered.body["status"]["state"] == "TASK_STATE_COMPLETED"
    assert event.event_type == "webhook.sent"
    assert [a["status_code"] for a in event.content["history"]] == [500, 200]
    assert len(receiver.received) == 2


async def test_a_config_created_on_an_ended_task_is_sent_at_once(http, receiver, private):
    task = await send(http, "/fail")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    await result(http, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": receiver.url()})
    [got] = await receiver.arrived(1)
    assert got.body["status"]["state"] == "TASK_STATE_FAILED"
    assert "demo failure requested" in got.body["status"]["message"]["parts"][0]["text"]


async def test_an_interrupted_task_is_sent_input_required_and_a_canceled_one_canceled(http, receiver, private):
    asking = await send(http, "/interrupt", push={"url": receiver.url("/asking")})
    assert asking["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    slow = await send(http, "/slow 5", push={"url": receiver.url("/slow")}, wait=False)
    await result(http, "CancelTask", {"id": slow["id"]})
    received = {r.path: r.body for r in await receiver.arrived(2)}
    assert received["/asking"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert received["/slow"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_nothing_is_sent_twice_across_configs_replacements_and_a_rerun_of_the_outbox(http, receiver, private):
    task = await send(http, "/slow 0.5", push={"id": "one", "url": receiver.url("/one")}, wait=False)
    await result(http, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "id": "two", "url": receiver.url("/two")})  # fmt: skip
    await result(http, "GetTask", {"id": task["id"]})
    paths = sorted(r.path for r in await receiver.arrived(2))
    await push_events(run_of(task), count=2)
    assert paths == ["/one", "/two"]
    # The outbox again (a second pass over the run's end), and a replaced config already notified.
    assert await db(a2a_pushes_send)(run_id=run_of(task)) == 0
    await result(http, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "id": "one", "url": receiver.url("/again")})  # fmt: skip
    await asyncio.sleep(0.3)
    assert sorted(r.path for r in receiver.received) == ["/one", "/two"]
    assert await db(RunEvent.objects.filter(run_id=run_of(task), category="webhook").count)() == 2


# -- refusals ----------------------------------------------------------------------------------


async def test_a_private_address_is_refused_at_registration_and_nothing_starts(http, owner):
    push = {"url": "http://127.0.0.1:9/hook"}
    params = {"message": message("x"), "configuration": {"taskPushNotificationConfig": push}}
    code, text = await refusal(http, "SendMessage", params)
    assert code == -32602
    assert text.startswith("configuration.taskPushNotificationConfig.url: 127.0.0.1 is a loopback address")
    assert "runs.webhooks.allow_private" in text
    assert not await db(Run.objects.filter(owner=owner.user).exists)()
    task = await send(http, "y")
    assert await refusal(http, "CreateTaskPushNotificationConfig", {"taskId": task["id"], **push}) == (
        -32602,
        text.removeprefix("configuration.taskPushNotificationConfig."),
    )
    code, text = await refusal(http, "tasks/pushNotificationConfig/set", {"taskId": task["id"], "pushNotificationConfig": push})  # fmt: skip
    assert text.startswith("pushNotificationConfig.url: 127.0.0.1 is a loopback address")
    assert not await db(A2APushConfig.objects.exists)()


BAD = [
    ({}, "url: a URL is required"),
    ({"url": "ftp://example.com/x"}, "url: must be an http:// or https:// URL"),
    ({"url": "http://10.1.2.3/x"}, "url: 10.1.2.3 is a private address"),
    ({"url": "https://example.com/", "token": 5}, "token: a string of at most 4096 characters is required"),
    ({"url": "https://example.com/", "token": "a\nb"}, "token: control characters are not allowed"),
    ({"url": "https://example.com/", "token": "été"}, "token: sent as a header value, so ASCII only"),
    ({"url": "https://example.com/", "authentication": {"scheme": "Bearer"}}, "authentication.credentials: required"),
    (
        {"url": "https://example.com/", "authentication": {"scheme": "Be arer", "credentials": "c"}},
        "authentication.scheme",
    ),  # fmt: skip
    ({"url": "https://example.com/", "authentication": "Bearer c"}, "authentication: an object is required"),
    ({"url": "https://example.com/", "id": 3}, "id: a string"),
]


@pytest.mark.parametrize(("config", "problem"), BAD)
async def test_a_bad_config_is_refused_naming_its_field(http, config, problem):
    task = await send(http, "z")
    code, text = await refusal(http, "CreateTaskPushNotificationConfig", {"taskId": task["id"], **config})
    assert (code, text[: len(problem)]) == (-32602, problem)


async def test_a_task_has_at_most_ten_configs(http, receiver, private):
    task = await send(http, "/slow 1", wait=False)
    for n in range(10):
        await result(http, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "id": str(n), "url": receiver.url()})  # fmt: skip
    again = {"taskId": task["id"], "id": "0", "url": receiver.url("/other")}
    assert (await result(http, "CreateTaskPushNotificationConfig", again))["url"] == receiver.url("/other")
    code, text = await refusal(http, "CreateTaskPushNotificationConfig", {**again, "id": "10"})
    assert (code, text) == (-32602, "id: a task has at most 10 push configs")
    assert len(await receiver.arrived(10)) == 10


# -- get, list, delete, and isolation ------------------------------------------------------------


async def test_configs_are_read_listed_and_deleted_in_both_versions(http, receiver, private):
    task = await send(http, "crud")
    tid, url = task["id"], receiver.url()
    auth = {"scheme": "Bearer", "credentials": "c"}
    await result(http, "CreateTaskPushNotificationConfig", {"taskId": tid, "url": url, "token": "t", "authentication": auth})  # fmt: skip
    await result(http, "CreateTaskPushNotificationConfig", {"taskId": tid, "id": "b", "url": url})
    default = {"taskId": tid, "id": tid, "url": url, "token": "t", "authentication": auth}
    assert await result(http, "GetTaskPushNotificationConfig", {"taskId": tid, "id": tid}) == default
    page = await result(http, "ListTaskPushNotificationConfigs", {"taskId": tid, "pageSize": 1})
    assert page == {"configs": [default], "nextPageToken": "1"}
    json_format.ParseDict(page, a2a.ListTaskPushNotificationConfigsResponse())
    rest = await result(http, "ListTaskPushNotificationConfigs", {"taskId": tid, "pageToken": "1"})
    assert [c["id"] for c in rest["configs"]] == ["b"] and rest["nextPageToken"] == ""
    # v0.3: the nested shape; a get without a config id is the task's default config.
    old = await result(http, "tasks/pushNotificationConfig/get", {"id": tid})
    v03_auth = {"schemes": ["Bearer"], "credentials": "c"}
    assert old == {"taskId": tid, "pushNotificationConfig": {"id": tid, "url": url, "token": "t", "authentication": v03_auth}}  # fmt: skip
    assert (
        await result(http, "tasks/pushNotificationConfig/delete", {"id": tid, "pushNotificationConfigId": "b"}) is None
    )
    assert await result(http, "DeleteTaskPushNotificationConfig", {"taskId": tid, "id": tid}) == {}
    assert await result(http, "ListTaskPushNotificationConfigs", {"taskId": tid}) == {
        "configs": [],
        "nextPageToken": "",
    }
    gone = (-32001, "Push notification config not found")
    assert await refusal(http, "GetTaskPushNotificationConfig", {"taskId": tid, "id": "b"}) == gone
    assert await refusal(http, "DeleteTaskPushNotificationConfig", {"taskId": tid, "id": "b"}) == gone
    assert (await refusal(http, "GetTaskPushNotificationConfig", {"taskId": tid}))[1] == "id: a config id is required"


async def test_another_users_task_is_answered_like_a_missing_one(http, other, receiver, private):
    task = await send(http, "mine")
    await result(http, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "id": "a", "url": receiver.url()})  # fmt: skip
    missing = f"{task['contextId']}:{uuid.uuid4()}"
    calls = [
        ("CreateTaskPushNotificationConfig", {"id": "a", "url": "https://example.com/x"}, "taskId"),
        ("GetTaskPushNotificationConfig", {"id": "a"}, "taskId"),
        ("ListTaskPushNotificationConfigs", {}, "taskId"),
        ("DeleteTaskPushNotificationConfig", {"id": "a"}, "taskId"),
        ("tasks/pushNotificationConfig/set", {"pushNotificationConfig": {"url": "https://example.com/x"}}, "taskId"),
        ("tasks/pushNotificationConfig/get", {"pushNotificationConfigId": "a"}, "id"),
        ("tasks/pushNotificationConfig/list", {}, "id"),
        ("tasks/pushNotificationConfig/delete", {"pushNotificationConfigId": "a"}, "id"),
    ]
    for method, params, field in calls:
        theirs = await refusal(http, method, {**params, field: task["id"]}, key=other.key)
        assert theirs == await refusal(http, method, {**params, field: missing}) == (-32001, "Task not found")
    assert (await result(http, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "a"}))["url"] == receiver.url()  # fmt: skip
    assert len(await receiver.arrived(1)) == 1


async def test_with_webhooks_disabled_push_is_unsupported(http, monkeypatch):
    task = await send(http, "off")
    monkeypatch.setattr(settings, "DEERFLOW", {**settings.DEERFLOW, "WEBHOOKS_DISABLED": True})
    card = (await http.get("/.well-known/agent-card.json", params={"assistant_id": "lead_agent"})).json()
    assert card["capabilities"]["pushNotifications"] is False
    params = {"taskId": task["id"], "url": "https://example.com/"}
    assert (await refusal(http, "CreateTaskPushNotificationConfig", params))[0] == -32003
    sending = {
        "message": message("x"),
        "configuration": {"taskPushNotificationConfig": {"url": "https://example.com/"}},
    }
    assert (await refusal(http, "SendMessage", sending))[0] == -32003
