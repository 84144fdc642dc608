"""Protocol-v2 thread streaming with the official SDK's ``client.threads.stream()``, over SSE and WebSocket.

One server for the module on the pass's backend; the restart test stops and
starts it on the same database. The Python SDK sends no API key on its WebSocket
handshake except what ``stream(headers=…)`` passes, hence the header.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server on this pass's backend (the log on SQLite, or on PostgreSQL with DATABASE_URL)."""
    # Graphs of the in-process protocol tests, served as a user's graphs: tools and a subgraph, a subgraph's interrupt.
    config = {"graphs": {"agentic": "tests.runs.graphs:agentic", "asking_parent": "tests.runs.graphs:asking_parent"}}
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        live = LiveServer(tmp_path_factory.mktemp("pv2"), config=config, database_url=url).setup().start()
        try:
            yield live
        finally:
            live.stop()


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def sdk(server):
    key = server.api_key("alice")
    return get_client(url=server.url, api_key=key), {"x-api-key": key}


async def read_log(
    server, thread_id: str, *, since: int | None = None, until=None, within: float = 20, opened=None
) -> list[dict]:
    """Read the thread's protocol SSE until ``until(events)`` holds (default: the latest root terminal)."""
    until = until or (lambda evs: evs and _root_terminal(evs[-1]))
    body = {
        "channels": ["values", "updates", "messages", "lifecycle", "input", "custom", "tasks", "checkpoints", "tools"]
    }
    if since is not None:
        body["since"] = since
    events: list[dict] = []
    headers = {"x-api-key": server.api_key("alice"), "accept": "text/event-stream"}
    async with httpx.AsyncClient(timeout=within) as http:
        async with http.stream(
            "POST", f"{server.url}/threads/{thread_id}/stream/events", json=body, headers=headers
        ) as r:
            assert r.status_code == 200
            if opened is not None:
                opened.set()
            async with asyncio.timeout(within):
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        if until(events):
                            return events
    return events


def _root_terminal(event: dict) -> bool:
    return (
        event["method"] == "lifecycle"
        and not event["params"]["namespace"]
        and event["params"]["data"]["event"] in ("completed", "failed", "interrupted")
    )


async def wait_for(predicate, within: float = 15):
    deadline = asyncio.get_running_loop().time() + within
    while not (result := await predicate()):
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
    return result


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_values_tokens_and_an_interrupt_answered_with_respond(server, transport):
    client, headers = sdk(server)
    async with client.threads.stream(assistant_id="lead_agent", transport=transport, headers=headers) as thread:
        await thread.run.start(input=human("hello world"))
        streams = [m async for m in thread.messages]
        assert [[t async for t in m.text] for m in streams] == [["echo: ", "hello ", "world"]]
        output = await thread.output
        assert [m["content"] for m in output["messages"]] == ["hello world", "echo: hello world"]

        await thread.run.start(input=human("/interrupt"))
        snapshots = [s async for s in thread.values]
        assert snapshots and thread.interrupted
        [pending] = thread.interrupts
        assert pending["value"] == {"question": "approve?"}
        await thread.run.respond("yes")

        async def resumed():
            state = await client.threads.get_state(thread.thread_id)
            return state["values"]["messages"][-1]["content"] == "resumed: yes"

        await wait_for(resumed)
    log = await read_log(server, thread.thread_id, until=lambda evs: sum(map(_root_terminal, evs)) == 3)
    terminals = [e["params"]["data"]["event"] for e in log if _root_terminal(e)]
    assert terminals == ["completed", "interrupted", "completed"]
    requested = [e for e in log if e["method"] == "input.requested"]
    assert [e["params"]["data"]["value"] for e in requested] == [{"question": "approve?"}]
    assert log.index(requested[0]) == [i for i, e in enumerate(log) if _root_terminal(e)][1] - 1
    checkpoints = [i for i, e in enumerate(log) if e["method"] == "checkpoints"]
    # Each step's checkpoint comes just before that step's values (the input checkpoint has none).
    followed = [log[i]["params"]["data"]["step"] for i in checkpoints if log[i + 1]["method"] == "values"]
    assert followed and all(step >= 0 for step in followed)


async def test_a_stream_opened_before_its_thread_exists_gets_the_first_run_and_nobody_else_does(server):
    """The SDKs may open the stream on a minted id before ``run.start`` creates the thread."""
    thread_id = str(uuid.uuid4())
    alice_opened, opened = asyncio.Event(), asyncio.Event()
    alice = asyncio.ensure_future(read_log(server, thread_id, opened=alice_opened))
    frames: list[str] = []

    async def eavesdrop():  # another user on the same id: a live stream that carries nothing
        headers = {"x-api-key": server.api_key("mallory"), "accept": "text/event-stream"}
        async with httpx.AsyncClient(timeout=None) as http:
            async with http.stream(
                "POST",
                f"{server.url}/threads/{thread_id}/stream/events",
                json={"channels": ["values"]},
                headers=headers,
            ) as r:
                frames.append(str(r.status_code))
                opened.set()
                async for line in r.aiter_lines():
                    frames.append(line)

    mallory = asyncio.ensure_future(eavesdrop())
    await asyncio.wait_for(asyncio.gather(alice_opened.wait(), opened.wait()), 10)
    start = {"id": 1, "method": "run.start", "params": {"assistant_id": "lead_agent", "input": human("early bird")}}
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{server.url}/threads/{thread_id}/commands", json=start, headers={"x-api-key": server.api_key("alice")}
        )
    assert answer.json()["type"] == "success"
    log = await asyncio.wait_for(alice, 20)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert log[0]["method"] == "lifecycle" and _root_terminal(log[-1])
    assert log[-1]["params"]["data"]["event"] == "completed"
    mallory.cancel()
    assert frames[0] == "200" and not [f for f in frames if f.startswith(("data:", "event:"))]


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_a_tool_call_and_a_subgraph_reach_the_sdks_projections(server, transport):
    client, headers = sdk(server)
    async with client.threads.stream(assistant_id="agentic", transport=transport, headers=headers) as thread:
        await thread.run.start(input=human("look it up"))
        calls = [c async for c in thread.tool_calls]
        assert [c.name for c in calls] == ["lookup"]
        output = await calls[0].output
        assert output["status"] == "success" and output["content"] == "found v3"
        output = await thread.output
        assert [m["content"] for m in output["messages"]][-2:] == ["found v3", "sub says hi"]
    log = await read_log(server, thread.thread_id)
    sub = [e for e in log if e["params"]["namespace"] and e["params"]["namespace"][0].startswith("sub:")]
    assert {e["method"] for e in sub} >= {"lifecycle", "messages"}
    text = [
        e["params"]["data"]["delta"]["text"] for e in sub if e["params"]["data"].get("event") == "content-block-delta"
    ]
    assert "".join(text) == "sub says hi"
    tools = [e["params"]["data"]["event"] for e in log if e["method"] == "tools"]
    assert tools == ["tool-started", "tool-finished"]


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_an_interrupt_raised_inside_a_subgraph_is_answered_with_respond(server, transport):
    client, headers = sdk(server)
    async with client.threads.stream(assistant_id="asking_parent", transport=transport, headers=headers) as thread:
        await thread.run.start(input=human("go"))
        _ = [s async for s in thread.values]
        assert thread.interrupted
        [pending] = thread.interrupts
        assert pending["value"] == {"question": "from the subgraph?"}
        await thread.run.respond("yes")

        async def answered():
            state = await client.threads.get_state(thread.thread_id)
            return state["values"]["messages"][-1]["content"] == "sub got: yes" and not state["next"]

        await wait_for(answered)
    log = await read_log(server, thread.thread_id, until=lambda evs: sum(map(_root_terminal, evs)) == 2)
    [requested] = [e for e in log if e["method"] == "input.requested"]
    assert requested["params"]["data"]["value"] == {"question": "from the subgraph?"}
    terminals = [i for i, e in enumerate(log) if _root_terminal(e)]
    assert [log[i]["params"]["data"]["event"] for i in terminals] == ["interrupted", "completed"]
    assert log.index(requested) == terminals[0] - 1


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_cancel_ends_the_run_with_exactly_one_interrupted(server, transport):
    client, headers = sdk(server)
    async with client.threads.stream(assistant_id="lead_agent", transport=transport, headers=headers) as thread:
        run_id = (await thread.run.start(input=human("/slow 5 take your time")))["run_id"]
        await read_log(server, thread.thread_id, until=lambda evs: any(e["method"] == "messages" for e in evs))
        await client.runs.cancel(thread.thread_id, run_id)
    log = await read_log(server, thread.thread_id)
    terminals = [e["params"]["data"]["event"] for e in log if _root_terminal(e)]
    assert terminals == ["interrupted"]
    assert not [e for e in log if e["method"] == "input.requested"]
    assert (await client.runs.get(thread.thread_id, run_id))["status"] == "interrupted"


async def test_reconnect_mid_run_and_a_restart_replay_without_duplicates(server):
    client, headers = sdk(server)
    async with client.threads.stream(assistant_id="lead_agent", headers=headers) as thread:
        await thread.run.start(input=human("/slow 1 one two three four"))
        first = await read_log(server, thread.thread_id, until=lambda evs: any(e["method"] == "messages" for e in evs))
        rest = await read_log(server, thread.thread_id, since=first[-1]["seq"])
    ids = [e["event_id"] for e in first + rest]
    assert len(ids) == len(set(ids))
    whole = await read_log(server, thread.thread_id)
    assert [e["event_id"] for e in whole] == ids
    assert [e["seq"] for e in whole] == list(range(1, len(whole) + 1))

    server.stop()
    server.start()
    replayed = await read_log(server, thread.thread_id)
    assert replayed == whole
    tail = await read_log(server, thread.thread_id, since=len(whole) - 2)
    assert [e["seq"] for e in tail] == [len(whole) - 1, len(whole)]


@pytest.mark.postgres_only
@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_a_run_started_on_one_process_streams_token_by_token_from_the_other(cluster, transport):
    a, b = cluster
    key = a.api_key("alice")
    thread_id = str(uuid.uuid4())
    start = {"id": 1, "method": "run.start", "params": {"assistant_id": "lead_agent", "input": human("/slow 1 a b c")}}
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"{a.url}/threads/{thread_id}/commands", json=start, headers={"x-api-key": key})
    assert answer.json()["type"] == "success"
    on_b = get_client(url=b.url, api_key=key)
    async with on_b.threads.stream(
        thread_id, assistant_id="lead_agent", transport=transport, headers={"x-api-key": key}
    ) as thread:
        streams = [m async for m in thread.messages]
        tokens = [[t async for t in m.text] for m in streams]
    assert len(tokens) == 1 and len(tokens[0]) > 1 and "".join(tokens[0]) == "echo: /slow 1 a b c"
    from_a, from_b = await read_log(a, thread_id), await read_log(b, thread_id)
    assert from_a == from_b
    assert [e["seq"] for e in from_b] == list(range(1, len(from_b) + 1))


async def _join(client, thread_id: str, *, last_event_id: str | None = None, stream_mode="run_modes", runs: int = 1):
    parts = []
    async with asyncio.timeout(20):
        stream = await client.threads.join_stream(thread_id, last_event_id=last_event_id, stream_mode=stream_mode)
        async with contextlib.aclosing(stream) as following:
            async for part in following:
                parts.append(part)
                if sum(p.event == "metadata" and p.data.get("status") == "run_done" for p in parts) == runs:
                    return parts
    return parts


async def test_the_classic_join_stream_replays_every_run_after_last_event_id(server):
    client, _ = sdk(server)
    thread_id = (await client.threads.create())["thread_id"]
    for text, modes in (("one", ["values", "messages-tuple"]), ("two", ["updates"])):
        run = await client.runs.create(thread_id, "lead_agent", input=human(text), stream_mode=modes)
        await client.runs.join(thread_id, run["run_id"])
    parts = await _join(client, thread_id, last_event_id="-1", runs=2)
    assert [p.event for p in parts if p.event != "messages"] == [
        "metadata",
        "values",
        "values",
        "metadata",
        "metadata",
        "updates",
        "metadata",
    ]
    assert "".join(p.data[0]["content"] for p in parts if p.event == "messages") == "echo: one"
    ids = [int(p.id) for p in parts]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    first_done = next(p for p in parts if p.event == "metadata" and p.data["status"] == "run_done")
    tail = await _join(client, thread_id, last_event_id=first_done.id)
    assert [p.event for p in tail] == ["metadata", "updates", "metadata"]
    lifecycle = await _join(client, thread_id, last_event_id="-1", stream_mode="lifecycle", runs=2)
    assert [p.data["status"] for p in lifecycle] == ["running", "run_done", "running", "run_done"]


async def test_the_join_streams_state_update_mode_carries_each_state_update(server):
    client, _ = sdk(server)
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=human("hi"))
    await client.runs.join(thread_id, run["run_id"])

    async def first_state_update(last_event_id):
        async with asyncio.timeout(20):
            stream = await client.threads.join_stream(
                thread_id, last_event_id=last_event_id, stream_mode="state_update"
            )
            async with contextlib.aclosing(stream) as parts:  # closed, not left open until the server stops
                async for part in parts:
                    if part.event == "state_update":
                        return part

    following = asyncio.ensure_future(first_state_update(None))
    written = await client.threads.update_state(thread_id, {"title": "renamed"}, as_node="agent")
    part = await following
    assert part.data == {"checkpoint": written["checkpoint"], "as_node": "agent", "values": {"title": "renamed"}}
    replayed = await first_state_update("-1")  # the run's events are not in this mode
    assert (replayed.id, replayed.data) == (part.id, part.data)
    mixed = await _join(client, thread_id, last_event_id="-1", stream_mode="run_modes")
    assert "state_update" not in {p.event for p in mixed}
    again = await client.runs.create(thread_id, "lead_agent", input=human("again"))
    await client.runs.join(thread_id, again["run_id"])
    after = await read_log(server, thread_id, since=int(part.id) - 1)  # no protocol-v2 channel carries it
    assert after[0]["seq"] == int(part.id) + 1 and after[0]["method"] == "lifecycle"
