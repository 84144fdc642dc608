"""Graphs the project does not own, served through langgraph_json:, driven by the official SDK.

One server process per channel mode (on this pass's backend: SQLite, or
PostgreSQL with DATABASE_URL) serves tests/fixtures/byo_graphs/langgraph.json:
a compiled graph with interrupt_before and a recursion_limit default, a
(config, runtime) factory, a builder, and a graph needing the dependencies
folder and the .env file.
"""

from __future__ import annotations

import os
from contextlib import ExitStack

import pytest
from langgraph_sdk import get_client

from tests.conftest import BYO_GRAPHS
from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import human

pytestmark = pytest.mark.live

DATABASE_URL = os.environ.get("DATABASE_URL")


@pytest.fixture(scope="module", params=["full", "delta"])
def byo_server(request, tmp_path_factory):
    with ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        config = {
            "database": {"checkpoint_channel_mode": request.param},
            "langgraph_json": str(BYO_GRAPHS / "langgraph.json"),
        }
        server = LiveServer(tmp_path_factory.mktemp(request.param), config=config, database_url=url).setup().start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def client(byo_server):
    return get_client(url=byo_server.url, api_key=byo_server.api_key("alice"))


async def test_the_sdk_drives_each_kind_of_user_graph(client, byo_server):
    graphs = {a["graph_id"] for a in await client.assistants.search(limit=20)}
    assert {"lead_agent", "compiled_agent", "factory_agent", "builder_agent", "deps_agent"} <= graphs

    # A compiled graph: stops before its interrupt_before node, with its own recursion_limit default.
    thread_id = (await client.threads.create())["thread_id"]
    values = await client.runs.wait(thread_id, "compiled_agent", input=human("hi"))
    assert (values["limit"], [m["content"] for m in values["messages"]]) == (7, ["hi", "draft: hi"])
    thread = await client.threads.get(thread_id)
    assert (thread["status"], thread["metadata"]["graph_id"]) == ("interrupted", "compiled_agent")
    assert (await client.threads.get_state(thread_id))["next"] == ["review"]
    resumed = await client.runs.wait(thread_id, "compiled_agent", input=None)
    assert resumed["reviewed"] is True and resumed["messages"][-1]["content"] == "reviewed"
    assert (await client.threads.get(thread_id))["status"] == "idle"

    # A (config, runtime) factory, called for the run with its config and context.
    thread_id = (await client.threads.create())["thread_id"]
    values = await client.runs.wait(
        thread_id,
        "factory_agent",
        input={"text": "hi"},
        config={"configurable": {"suffix": "made"}},
        context={"value": "ctx"},
    )
    assert (values["text"], values["access_context"], values["context_value"]) == (
        "hi made",
        "threads.create_run",
        "ctx",
    )
    assert (await client.threads.get_state(thread_id))["values"]["text"] == "hi made"

    # A builder, streamed token by token as values.
    thread_id = (await client.threads.create())["thread_id"]
    parts = [p async for p in client.runs.stream(thread_id, "builder_agent", input=human("x"), stream_mode="values")]
    assert [p.event for p in parts][0] == "metadata"
    assert parts[-1].data["messages"][-1]["content"] == "builder: x"

    # A graph importing from the dependencies folder and reading langgraph.json's env file.
    values = await client.runs.wait(None, "deps_agent", input=human("hey"))
    assert values["messages"][-1]["content"] == "hello from .env: HEY!"
