"""The official langgraph-sdk client against a real server: runs, streams, cancel, strategies."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from tests.live.support import human, wait_message, wait_status

pytestmark = pytest.mark.live


@pytest.fixture
def client(api_server):
    return get_client(url=api_server.url, api_key=api_server.api_key("alice"))


@pytest.fixture
async def thread_id(client) -> str:
    return (await client.threads.create())["thread_id"]


async def contents(client, thread_id: str) -> list[str]:
    state = await client.threads.get_state(thread_id)
    return [m["content"] for m in state["values"].get("messages", [])]


async def test_wait_returns_the_final_values_and_records_usage(client, thread_id):
    values = await client.runs.wait(thread_id, "lead_agent", input=human("hello world"))
    assert [m["content"] for m in values["messages"]] == ["hello world", "echo: hello world"]
    assert values["title"] == "hello world"
    [run] = await client.runs.list(thread_id)
    assert run["status"] == "success"
    assert (run["total_input_tokens"], run["total_output_tokens"], run["total_tokens"]) == (2, 3, 5)
    assert run["model_name"] == "demo-echo"
    thread = await client.threads.get(thread_id)
    assert thread["status"] == "idle"


async def test_stream_emits_metadata_first_then_each_requested_mode(client, thread_id):
    modes = ["values", "updates", "messages-tuple", "custom", "debug", "tasks", "checkpoints"]
    parts = [p async for p in client.runs.stream(thread_id, "lead_agent", input=human("a b"), stream_mode=modes)]
    events = [p.event for p in parts]
    assert events[0] == "metadata"
    assert parts[0].data["thread_id"] == thread_id and parts[0].data["attempt"] == 1
    for name in ("values", "updates", "messages", "custom", "debug", "tasks", "checkpoints"):
        assert name in events, name
    assert [p.data for p in parts if p.event == "custom"] == [{"status": "replying", "to": "a b"}]
    tokens = [p.data[0]["content"] for p in parts if p.event == "messages"]
    assert "".join(tokens) == "echo: a b"
    assert len(tokens) == 3  # token by token
    assert parts[[p.event for p in parts].index("messages")].data[1]["langgraph_node"] == "agent"
    last_values = [p.data for p in parts if p.event == "values"][-1]
    assert [m["content"] for m in last_values["messages"]] == ["a b", "echo: a b"]


async def test_stream_headers_locate_the_run(api_server, thread_id):
    key = api_server.api_key("alice")
    async with httpx.AsyncClient(base_url=api_server.url, headers={"x-api-key": key}) as http:
        async with http.stream(
            "POST", f"/threads/{thread_id}/runs/stream", json={"assistant_id": "lead_agent", "input": human("hi")}
        ) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            location = response.headers["content-location"]
            assert location.startswith(f"/api/threads/{thread_id}/runs/")
            run_id = location.rsplit("/", 1)[1]
            # Relative to the API root, as the Platform sends it: never built from Host.
            assert response.headers["location"] == f"/threads/{thread_id}/runs/{run_id}/stream"
            body = (await response.aread()).decode()
    assert body.startswith(": ok")
    assert "event: metadata\r\ndata: " in body
    assert f'"run_id":"{run_id}"' in body
    assert "\r\nid: " in body


async def test_background_run_then_join(client, thread_id):
    run = await client.runs.create(thread_id, "lead_agent", input=human("bg"))
    assert run["status"] in ("pending", "running", "success")
    values = await client.runs.join(thread_id, run["run_id"])
    assert values["messages"][-1]["content"] == "echo: bg"
    assert (await client.runs.get(thread_id, run["run_id"]))["status"] == "success"


async def test_join_stream_resumes_strictly_after_last_event_id(client, thread_id):
    run = await client.runs.create(
        thread_id, "lead_agent", input=human("/slow 1 one two three four"), stream_mode=["messages-tuple", "values"]
    )
    seen = []
    async for part in client.runs.join_stream(thread_id, run["run_id"], last_event_id="-1"):
        seen.append(part)
    everything = [(p.event, p.id) for p in seen]
    ids = [i for _, i in everything]
    assert len(ids) == len(set(ids)), "event ids must be unique"
    assert everything[0][0] == "metadata"
    assert [e for e, _ in everything].count("messages") == 7  # "echo: /slow 1 one two three four", word by word
    cut = len(everything) // 2
    resumed = [p async for p in client.runs.join_stream(thread_id, run["run_id"], last_event_id=ids[cut])]
    assert [(p.event, p.id) for p in resumed] == everything[cut + 1 :]


async def test_join_stream_live_from_a_second_connection(client, thread_id):
    run = await client.runs.create(
        thread_id, "lead_agent", input=human("/slow 1 alpha beta gamma"), stream_mode=["messages-tuple"]
    )
    first = client.runs.join_stream(thread_id, run["run_id"])
    events = [p async for p in first]
    tokens = "".join(p.data[0]["content"] for p in events if p.event == "messages")
    assert tokens == "echo: /slow 1 alpha beta gamma"


async def test_cancel_interrupt_keeps_checkpoints(client, thread_id):
    await client.runs.wait(thread_id, "lead_agent", input=human("before"))
    run = await client.runs.create(thread_id, "lead_agent", input=human("/slow 8"))
    await wait_status(client, thread_id, run["run_id"], {"running"})
    assert (await client.threads.get(thread_id))["status"] == "busy"
    await wait_message(client, thread_id, "/slow 8")
    await client.runs.cancel(thread_id, run["run_id"], action="interrupt", wait=True)
    cancelled = await client.runs.get(thread_id, run["run_id"])
    assert cancelled["status"] == "interrupted"
    assert cancelled["cancel_action"] == "interrupt"
    # The run's input checkpoint stays: interrupt keeps what was written.
    assert (await contents(client, thread_id))[:3] == ["before", "echo: before", "/slow 8"]
    assert (await client.threads.get(thread_id))["status"] == "idle"


async def test_cancel_rollback_restores_the_pre_run_state(client, thread_id):
    await client.runs.wait(thread_id, "lead_agent", input=human("keep me"))
    before = await contents(client, thread_id)
    run = await client.runs.create(thread_id, "lead_agent", input=human("/slow 8"))
    await wait_status(client, thread_id, run["run_id"], {"running"})
    await wait_message(client, thread_id, "/slow 8")  # the run has written: the rollback has work to do
    await client.runs.cancel(thread_id, run["run_id"], action="rollback", wait=True)
    rolled = await client.runs.get(thread_id, run["run_id"])
    assert (rolled["status"], rolled["error"]) == ("error", "Rolled back by user")
    assert await contents(client, thread_id) == before
    # The thread goes on from the restored state.
    await client.runs.wait(thread_id, "lead_agent", input=human("next"))
    assert await contents(client, thread_id) == [*before, "next", "echo: next"]


async def test_cancel_of_a_finished_run_is_409(client, thread_id):
    run = await client.runs.create(thread_id, "lead_agent", input=human("quick"))
    await client.runs.join(thread_id, run["run_id"])
    with pytest.raises(ConflictError):
        await client.runs.cancel(thread_id, run["run_id"])


async def test_multitask_reject_is_409_and_admits_nothing(client, thread_id):
    first = await client.runs.create(thread_id, "lead_agent", input=human("/slow 3"))
    with pytest.raises(ConflictError) as excinfo:
        await client.runs.create(thread_id, "lead_agent", input=human("second"), multitask_strategy="reject")
    assert "already running" in str(excinfo.value)
    assert [r["run_id"] for r in await client.runs.list(thread_id)] == [first["run_id"]]
    await client.runs.cancel(thread_id, first["run_id"], wait=True)


async def test_multitask_interrupt_cancels_the_older_run(client, thread_id):
    first = await client.runs.create(thread_id, "lead_agent", input=human("/slow 8"))
    await wait_status(client, thread_id, first["run_id"], {"running"})
    second = await client.runs.create(thread_id, "lead_agent", input=human("newer"), multitask_strategy="interrupt")
    await client.runs.join(thread_id, second["run_id"])
    assert (await client.runs.get(thread_id, first["run_id"]))["status"] == "interrupted"
    assert (await client.runs.get(thread_id, second["run_id"]))["status"] == "success"
    assert (await contents(client, thread_id))[-1] == "echo: newer"


async def test_multitask_rollback_erases_the_older_run(client, thread_id):
    await client.runs.wait(thread_id, "lead_agent", input=human("base"))
    first = await client.runs.create(thread_id, "lead_agent", input=human("/slow 8"))
    await wait_status(client, thread_id, first["run_id"], {"running"})
    second = await client.runs.create(
        thread_id, "lead_agent", input=human("replacement"), multitask_strategy="rollback"
    )
    await client.runs.join(thread_id, second["run_id"])
    older = await client.runs.get(thread_id, first["run_id"])
    assert (older["status"], older["error"]) == ("error", "Rolled back by user")
    assert await contents(client, thread_id) == ["base", "echo: base", "replacement", "echo: replacement"]


async def test_multitask_enqueue_runs_in_order(client, thread_id):
    first = await client.runs.create(thread_id, "lead_agent", input=human("/slow 1"))
    second = await client.runs.create(thread_id, "lead_agent", input=human("two"), multitask_strategy="enqueue")
    third = await client.runs.create(thread_id, "lead_agent", input=human("three"), multitask_strategy="enqueue")
    assert second["status"] == "pending" and third["status"] == "pending"
    with pytest.raises(ConflictError):  # reject still sees the queue
        await client.runs.create(thread_id, "lead_agent", input=human("x"), multitask_strategy="reject")
    await client.runs.join(thread_id, third["run_id"])
    for run in (first, second, third):
        assert (await client.runs.get(thread_id, run["run_id"]))["status"] == "success"
    assert await contents(client, thread_id) == [
        "/slow 1",
        "echo: /slow 1",
        "two",
        "echo: two",
        "three",
        "echo: three",
    ]


async def test_interrupt_then_resume(client, thread_id):
    values = await client.runs.wait(thread_id, "lead_agent", input=human("/interrupt"))
    assert values["__interrupt__"][0]["value"] == {"question": "approve?"}
    [run] = await client.runs.list(thread_id)
    assert run["status"] == "success"
    thread = await client.threads.get(thread_id)
    assert thread["status"] == "interrupted"
    assert list(thread["interrupts"].values())[0][0]["value"] == {"question": "approve?"}
    resumed = await client.runs.wait(thread_id, "lead_agent", command={"resume": "yes"})
    assert resumed["messages"][-1]["content"] == "resumed: yes"
    assert (await client.threads.get(thread_id))["status"] == "idle"


async def test_failure_surfaces_as_an_error(client, thread_id):
    with pytest.raises(Exception, match="demo failure requested"):
        await client.runs.wait(thread_id, "lead_agent", input=human("/fail"))
    parts = [p async for p in client.runs.stream(thread_id, "lead_agent", input=human("/fail"))]
    [error] = [p for p in parts if p.event == "error"]
    assert error.data["message"] == "demo failure requested"
    assert error.data["name"] == "RuntimeError"
    runs = await client.runs.list(thread_id)
    assert {(r["status"], r["error"]) for r in runs} == {("error", "demo failure requested")}
    assert (await client.threads.get(thread_id))["status"] == "error"


async def test_stateless_runs(client):
    values = await client.runs.wait(None, "lead_agent", input=human("stateless"))
    assert values["messages"][-1]["content"] == "echo: stateless"
    parts = [p async for p in client.runs.stream(None, "lead_agent", input=human("streamed"))]
    assert parts[0].event == "metadata"
    assert [p.data for p in parts if p.event == "values"][-1]["messages"][-1]["content"] == "echo: streamed"
    # on_completion defaults to delete: the temporary thread goes once the run is done.
    temporary = parts[0].data["thread_id"]
    for _ in range(100):
        try:
            await client.threads.get(temporary)
        except NotFoundError:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the stateless run's thread was not deleted")
    run = await client.runs.create(None, "lead_agent", input=human("bg"), on_completion="keep")
    joined = await client.runs.join(run["thread_id"], run["run_id"])
    assert joined["messages"][-1]["content"] == "echo: bg"
    assert (await client.threads.get(run["thread_id"]))["values"]["messages"][-1]["content"] == "echo: bg"


async def test_bad_run_requests_admit_nothing(client, api_server, thread_id):
    with pytest.raises(NotFoundError):
        await client.runs.create(thread_id, "no-such-assistant", input=human("x"))
    with pytest.raises(UnprocessableEntityError, match="events"):
        await client.runs.create(thread_id, "lead_agent", input=human("x"), stream_mode="events")
    with pytest.raises(UnprocessableEntityError, match="unknown command key"):
        await client.runs.create(thread_id, "lead_agent", input=human("x"), command={"resume": 1, "bogus": 2})
    with pytest.raises(NotFoundError):
        await client.runs.create(
            thread_id, "lead_agent", input=human("x"), checkpoint_id="1f000000-0000-6000-8000-000000000000"
        )
    with pytest.raises(NotFoundError):
        await client.runs.create("no-such-thread", "lead_agent", input=human("x"))
    with pytest.raises(UnprocessableEntityError, match="secret"):
        await client.runs.create(thread_id, "lead_agent", input=human("x"), metadata={"api_key": "sk-1"})
    bob = get_client(url=api_server.url, api_key=api_server.api_key("bob"))
    with pytest.raises(NotFoundError):
        await bob.runs.create(thread_id, "lead_agent", input=human("x"))
    with pytest.raises(NotFoundError):
        await bob.runs.list(thread_id)
    assert await client.runs.list(thread_id) == []


async def test_if_not_exists_create_makes_the_thread(client):
    thread_id = f"made-by-run-{asyncio.get_running_loop().time():.0f}".replace(".", "")
    values = await client.runs.wait(thread_id, "lead_agent", input=human("hi"), if_not_exists="create")
    assert values["messages"][-1]["content"] == "echo: hi"
    assert (await client.threads.get(thread_id))["thread_id"] == thread_id


@pytest.mark.parametrize(
    ("policy", "text", "outcome"), [("cancel", "/slow 6", "interrupted"), ("continue", "/slow 1", "success")]
)
async def test_a_client_that_drops_the_stream_cancels_only_with_on_disconnect_cancel(
    api_server, client, thread_id, policy, text, outcome
):
    key = api_server.api_key("alice")
    body = {
        "assistant_id": "lead_agent",
        "input": human(text),
        "on_disconnect": policy,
        "stream_mode": ["messages-tuple"],
    }
    async with httpx.AsyncClient(base_url=api_server.url, headers={"x-api-key": key}) as http:
        async with http.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as response:
            run_id = response.headers["content-location"].rsplit("/", 1)[1]
            async for line in response.aiter_lines():
                if line.startswith("event: messages"):
                    break
    run = await wait_status(client, thread_id, run_id, {"interrupted", "success", "error"})
    assert run["status"] == outcome
