"""A2A at /a2a/{assistant_id}: the official a2a-sdk client and raw JSON-RPC against a real server.

One server on this pass's backend; the PostgreSQL + Redis pass adds two
processes (``cluster``): a task sent through one is streamed, resubscribed,
read, listed and cancelled through the other.
"""

from __future__ import annotations

import contextlib
import json
import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import TaskNotCancelableError
from google.protobuf import json_format

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL
from tests.receiver import WebhookReceiver

pytestmark = pytest.mark.live

CARD = "/.well-known/agent-card.json"
# The push receiver is on 127.0.0.1: this server's pushes may call it.
LIMITS = {"limits": {"max_body_bytes": 65536}, "runs": {"webhooks": {"allow_private": True, "backoff_seconds": 0.1}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        live = LiveServer(tmp_path_factory.mktemp("a2a"), config=LIMITS, database_url=url).setup().start()
        try:
            yield live
        finally:
            live.stop()


def user_message(text: str, **fields) -> a2a.Message:
    return a2a.Message(message_id=uuid.uuid4().hex, role=a2a.ROLE_USER, parts=[a2a.Part(text=text)], **fields)


def rpc(method: str, params: dict, request_id=1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def strict(payload: dict, message):
    """Parse ProtoJSON refusing unknown fields: the answer is exactly A2A v1.0's shape."""
    return json_format.ParseDict(payload, message)


async def card_of(http: httpx.AsyncClient, base: str, assistant_id: str = "lead_agent") -> a2a.AgentCard:
    answer = await http.get(f"{base}{CARD}", params={"assistant_id": assistant_id})
    assert answer.status_code == 200, answer.text
    return parse_agent_card(answer.json())


async def sse_results(http: httpx.AsyncClient, url: str, body: dict, **headers) -> list[tuple[str | None, dict]]:
    """POST a streaming request; return (SSE id, JSON-RPC result) per event, to the stream's end."""
    events, event_id = [], None
    async with http.stream("POST", url, json=body, headers={"Accept": "text/event-stream", **headers}) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        async for line in answer.aiter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                events.append((event_id, json.loads(line[6:])["result"]))
                event_id = None
    return events


async def test_the_agent_card_describes_the_assistant_and_is_the_callers_alone(server):
    key, other = server.api_key("alice"), server.api_key(f"carol-{uuid.uuid4().hex[:6]}")
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=30) as http:
        card = await card_of(http, server.url)
        assert card.capabilities.streaming
        (interface,) = card.supported_interfaces
        assert interface.protocol_binding == "JSONRPC" and interface.protocol_version == "1.0"
        assert interface.url.startswith(f"{server.url}/a2a/")
        mine = (await http.post(f"{server.url}/assistants", json={"graph_id": "lead_agent", "name": "Echo"})).json()
        assert (await card_of(http, server.url, mine["assistant_id"])).name == "Echo"
        missing = await http.get(f"{server.url}{CARD}", params={"assistant_id": str(uuid.uuid4())})
        theirs = await http.get(
            f"{server.url}{CARD}", params={"assistant_id": mine["assistant_id"]}, headers={"x-api-key": other}
        )
        assert missing.status_code == theirs.status_code == 404
        assert (
            await http.get(f"{server.url}{CARD}?assistant_id=lead_agent", headers={"x-api-key": ""})
        ).status_code == 401
        sent = await http.post(
            f"{server.url}/a2a/{mine['assistant_id']}", json=rpc("GetTask", {"id": "x"}), headers={"x-api-key": other}
        )
        assert sent.status_code == 404


async def test_the_sdk_client_sends_streams_gets_lists_cancels_and_resubscribes(server):
    key = server.api_key("alice")
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=60) as http:
        card = await card_of(http, server.url)
        blocking = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
        streaming = await create_client(card, ClientConfig(httpx_client=http))

        # SendMessage: a new context (thread), then the same one.
        (first,) = [r async for r in blocking.send_message(a2a.SendMessageRequest(message=user_message("hi")))]
        task = first.task
        assert task.status.state == a2a.TASK_STATE_COMPLETED
        assert task.artifacts[0].parts[0].text == "echo: hi"
        assert task.id == f"{task.context_id}:{task.id.split(':')[1]}"
        thread = (await http.get(f"{server.url}/threads/{task.context_id}")).json()
        assert thread["thread_id"] == task.context_id
        again = a2a.SendMessageRequest(message=user_message("again", context_id=task.context_id))
        (second,) = [r async for r in blocking.send_message(again)]
        assert second.task.context_id == task.context_id and second.task.id != task.id
        assert [m.parts[0].text for m in second.task.history] == ["hi", "echo: hi", "again", "echo: again"]

        # GetTask with historyLength, in both scopes.
        got = await blocking.get_task(a2a.GetTaskRequest(id=second.task.id, history_length=1))
        assert [m.parts[0].text for m in got.history] == ["echo: again"]
        assert got.status.state == a2a.TASK_STATE_COMPLETED

        # SendStreamingMessage: the task, working, the reply in chunks, the final status.
        stream = [r async for r in streaming.send_message(a2a.SendMessageRequest(message=user_message("streamed")))]
        kinds = [r.WhichOneof("payload") for r in stream]
        assert kinds[0] == "task" and kinds[-1] == "status_update"
        assert stream[1].status_update.status.state == a2a.TASK_STATE_WORKING
        chunks = [r.artifact_update.artifact.parts[0].text for r in stream if r.HasField("artifact_update")]
        assert len(chunks) > 1 and "".join(chunks) == "echo: streamed"
        assert stream[-1].status_update.status.state == a2a.TASK_STATE_COMPLETED
        streamed_id = stream[0].task.id

        # SubscribeToTask on the ended task: replayed from its start.
        replay = [r async for r in streaming.subscribe(a2a.SubscribeToTaskRequest(id=streamed_id))]
        assert [r.WhichOneof("payload") for r in replay] == kinds
        assert replay[-1].status_update.status.state == a2a.TASK_STATE_COMPLETED

        # ListTasks: the caller's tasks on this agent, newest first.
        listed = await blocking.list_tasks(a2a.ListTasksRequest(page_size=100))
        ids = [t.id for t in listed.tasks]
        assert {task.id, second.task.id, streamed_id} <= set(ids) and ids.index(streamed_id) < ids.index(task.id)
        in_context = await blocking.list_tasks(a2a.ListTasksRequest(context_id=task.context_id))
        assert [t.id for t in in_context.tasks] == [second.task.id, task.id]

        # CancelTask on a running task, then on the ended one.
        slow = a2a.SendMessageRequest(
            message=user_message("/slow 20"), configuration=a2a.SendMessageConfiguration(return_immediately=True)
        )
        (started,) = [r async for r in blocking.send_message(slow)]
        assert started.task.status.state in (a2a.TASK_STATE_SUBMITTED, a2a.TASK_STATE_WORKING)
        cancelled = await blocking.cancel_task(a2a.CancelTaskRequest(id=started.task.id))
        assert cancelled.status.state == a2a.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await blocking.cancel_task(a2a.CancelTaskRequest(id=started.task.id))


async def test_json_rpc_answers_v1_and_v03_shapes_and_every_refusal(server):
    key, other = server.api_key("alice"), server.api_key(f"dave-{uuid.uuid4().hex[:6]}")
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=60) as http:
        url = (await card_of(http, server.url)).supported_interfaces[0].url

        async def call(method: str, params, *, as_key: str = key):
            answer = await http.post(url, json=rpc(method, params), headers={"x-api-key": as_key})
            assert answer.status_code == 200, answer.text
            return answer.json()

        sent = await call(
            "SendMessage", {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "v1"}]}}
        )
        task = strict(sent["result"], a2a.SendMessageResponse()).task
        assert task.status.state == a2a.TASK_STATE_COMPLETED
        old = await call(
            "message/send",
            {
                "message": {
                    "kind": "message",
                    "messageId": "m2",
                    "role": "user",
                    "parts": [{"kind": "text", "text": "v03"}],
                }
            },
        )
        assert old["result"]["kind"] == "task" and old["result"]["status"]["state"] == "completed"
        assert old["result"]["artifacts"][0]["parts"] == [{"kind": "text", "text": "echo: v03"}]
        assert old["result"]["history"][-1]["role"] == "agent"
        got = await call("tasks/get", {"id": task.id, "historyLength": 1, "historyScope": "task"})
        assert [m["parts"][0]["text"] for m in got["result"]["history"]] == ["echo: v1"]
        strict((await call("GetTask", {"id": task.id}))["result"], a2a.Task())

        # Another user's task is a missing task; so is another user's context.
        theirs = await call("GetTask", {"id": task.id}, as_key=other)
        missing = await call("GetTask", {"id": f"{task.context_id}:{uuid.uuid4()}"}, as_key=other)
        assert theirs["error"] == missing["error"] == {"code": -32001, "message": "Task not found"}
        assert (await call("CancelTask", {"id": task.id}, as_key=other))["error"]["code"] == -32001
        assert (await call("SubscribeToTask", {"id": task.id}, as_key=other))["error"]["code"] == -32001
        foreign = {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "contextId": task.context_id}
        }
        assert (await call("SendMessage", foreign, as_key=other))["error"]["code"] == -32001
        listed = (await call("ListTasks", {}, as_key=other))["result"]
        assert task.id not in {t["id"] for t in listed["tasks"]}

        # A terminal task takes no more messages (-32004) and cannot be cancelled (-32002).
        follow = {"message": {"messageId": "m3", "role": "ROLE_USER", "parts": [{"text": "more"}], "taskId": task.id}}
        assert (await call("SendMessage", follow))["error"]["code"] == -32004
        assert (await call("CancelTask", {"id": task.id}))["error"]["code"] == -32002

        # Malformed requests.
        assert (await call("GetTask", {"id": task.id, "historyLength": 11}))["error"]["code"] == -32602
        assert (await call("GetTask", {"id": task.id, "historyScope": "all"}))["error"]["code"] == -32602
        assert (await call("tasks/pushNotificationConfig/set", {}))["error"] == {
            "code": -32602,
            "message": "taskId: a task id (a non-empty string) is required",
        }
        assert (await call("NoSuchMethod", {}))["error"]["code"] == -32601
        assert (await call("SendMessage", {"message": {"role": "ROLE_USER", "parts": []}}))["error"]["code"] == -32602
        file_part = {"message": {"messageId": "f", "role": "ROLE_USER", "parts": [{"url": "https://x/y.png"}]}}
        assert (await call("SendMessage", file_part))["error"]["code"] == -32005
        bad_json = await http.post(url, content=b"{not json", headers={"content-type": "application/json"})
        assert bad_json.status_code == 200 and bad_json.json()["error"]["code"] == -32700
        not_rpc = await http.post(url, json={"id": 1, "method": "GetTask"})
        assert not_rpc.json()["error"]["code"] == -32600
        too_big = await http.post(url, json=rpc("SendMessage", {"pad": "x" * 70_000}))
        assert too_big.status_code == 413


async def test_the_sdk_client_registers_reads_lists_and_deletes_push_configs_and_is_pushed_the_task(server):
    key = server.api_key("alice")
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=60) as http:
        card = await card_of(http, server.url)
        assert card.capabilities.push_notifications
        client = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
        with WebhookReceiver(script=[(500, 0)]) as receiver:
            auth = a2a.AuthenticationInfo(scheme="Bearer", credentials="s3cret")
            at_send = a2a.TaskPushNotificationConfig(
                id="send", url=receiver.url("/send"), token="t1", authentication=auth
            )
            configuration = a2a.SendMessageConfiguration(task_push_notification_config=at_send)
            request = a2a.SendMessageRequest(message=user_message("push me"), configuration=configuration)
            (sent,) = [r async for r in client.send_message(request)]
            task = sent.task
            failed, pushed = await receiver.arrived(2)  # a 500, then the retry
            assert failed.body == pushed.body and pushed.path == "/send"
            assert pushed.headers["X-A2A-Notification-Token"] == "t1"
            assert pushed.headers["Authorization"] == "Bearer s3cret"
            assert strict(pushed.body, a2a.Task()) == await client.get_task(a2a.GetTaskRequest(id=task.id))

            later = a2a.TaskPushNotificationConfig(task_id=task.id, id="later", url=receiver.url("/later"))
            assert await client.create_task_push_notification_config(later) == later
            [_, _, at_once] = await receiver.arrived(3)  # an ended task: pushed at once
            assert at_once.path == "/later" and at_once.body["status"]["state"] == "TASK_STATE_COMPLETED"
            asked = a2a.GetTaskPushNotificationConfigRequest(task_id=task.id, id="send")
            assert await client.get_task_push_notification_config(asked) == a2a.TaskPushNotificationConfig(
                task_id=task.id, **{f: getattr(at_send, f) for f in ("id", "url", "token")}, authentication=auth
            )
            listed = await client.list_task_push_notification_configs(
                a2a.ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [c.id for c in listed.configs] == ["send", "later"]
            await client.delete_task_push_notification_config(
                a2a.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="later")
            )
            listed = await client.list_task_push_notification_configs(
                a2a.ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [c.id for c in listed.configs] == ["send"]
            assert len(receiver.received) == 3


async def test_resubscribe_replays_from_the_start_or_after_a_given_event(server):
    key = server.api_key("alice")
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=60) as http:
        url = (await card_of(http, server.url)).supported_interfaces[0].url
        message = {"messageId": "s1", "role": "ROLE_USER", "parts": [{"text": "/slow 1 resumed"}]}
        streamed = await sse_results(http, url, rpc("SendStreamingMessage", {"message": message}))
        task_id = streamed[0][1]["task"]["id"]
        assert streamed[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        for _, result in streamed:
            strict(result, a2a.StreamResponse())
        ids = [event_id for event_id, _ in streamed[1:]]
        assert all(ids) and [int(i) for i in ids] == sorted(int(i) for i in ids)

        whole = await sse_results(http, url, rpc("SubscribeToTask", {"id": task_id}))
        assert whole[1:] == streamed[1:]
        middle = len(streamed) // 2
        after = await sse_results(
            http, url, rpc("SubscribeToTask", {"id": task_id}), **{"Last-Event-ID": ids[middle - 1]}
        )
        assert after[0][1]["task"]["id"] == task_id
        assert after[1:] == streamed[middle + 1 :]
        old = await sse_results(http, url, rpc("tasks/resubscribe", {"id": task_id, "lastEventId": ids[-2]}))
        assert old[-1][1]["kind"] == "status-update" and old[-1][1]["final"] is True
        assert old[-1][1]["status"]["state"] == "completed"


@pytest.mark.postgres_only
async def test_a_task_sent_through_one_process_is_streamed_resubscribed_and_cancelled_through_the_other(cluster):
    a, b = cluster
    key = a.api_key("alice")
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=60) as http:
        on_a = (await card_of(http, a.url)).supported_interfaces[0].url
        on_b = (await card_of(http, b.url)).supported_interfaces[0].url
        message = {"messageId": "c1", "role": "ROLE_USER", "parts": [{"text": "/slow 1 across"}]}
        streamed = await sse_results(http, on_a, rpc("SendStreamingMessage", {"message": message}))
        task_id = streamed[0][1]["task"]["id"]
        whole = await sse_results(http, on_b, rpc("SubscribeToTask", {"id": task_id}))
        assert whole[1:] == streamed[1:]
        seq = streamed[2][0]
        after = await sse_results(http, on_b, rpc("SubscribeToTask", {"id": task_id}), **{"Last-Event-ID": seq})
        assert after[1:] == streamed[3:]
        got = (await http.post(on_b, json=rpc("GetTask", {"id": task_id}))).json()["result"]
        assert got["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = (await http.post(on_b, json=rpc("ListTasks", {"contextId": got["contextId"]}))).json()["result"]
        assert [t["id"] for t in listed["tasks"]] == [task_id]

        slow = {
            "message": {"messageId": "c2", "role": "ROLE_USER", "parts": [{"text": "/slow 20"}]},
            "configuration": {"returnImmediately": True},
        }
        started = (await http.post(on_a, json=rpc("SendMessage", slow))).json()["result"]["task"]
        live = http.stream(
            "POST", on_b, json=rpc("SubscribeToTask", {"id": started["id"]}), headers={"Accept": "text/event-stream"}
        )
        cancelled = (await http.post(on_b, json=rpc("CancelTask", {"id": started["id"]}))).json()["result"]
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        async with live as answer:
            states = [
                json.loads(line[6:])["result"] async for line in answer.aiter_lines() if line.startswith("data: ")
            ]
        assert states[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
