"""Custom auth on a real server, driven by the official SDK: tests/fixtures/custom_auth served through langgraph_json:.

Identity is ``Authorization: Bearer <user>:<org>``; threads are scoped by
``org_id``. The run goes through the real worker, so the graph's answer
proves the authenticated user reached it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.server import LiveServer, project_server
from tests.live.support import human

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "custom_auth"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("custom-auth"), PROJECT / "langgraph.json") as live:
        yield live


def client_of(server: LiveServer, token: str):
    return get_client(url=server.url, api_key=None, headers={"Authorization": f"Bearer {token}"})


async def test_the_sdk_works_within_the_handlers_scope_and_nowhere_else(server):
    alice, bob, eve = (client_of(server, t) for t in ("alice:acme", "bob:acme", "eve:globex"))
    thread = await alice.threads.create(metadata={"org_id": "globex"})
    assert thread["metadata"]["org_id"] == "acme"  # the create handler's stamp wins

    values = await bob.runs.wait(thread["thread_id"], "whoami", input=human("who?"))
    assert values["messages"][-1]["content"] == "bob@acme"  # the graph got the caller
    assert [t["thread_id"] for t in await bob.threads.search(limit=100)] == [thread["thread_id"]]
    assert await bob.threads.count() == 1

    assert await eve.threads.search(limit=100) == [] and await eve.threads.count() == 0
    for attempt in (
        eve.threads.get(thread["thread_id"]),
        eve.threads.get_state(thread["thread_id"]),
        eve.runs.create(thread["thread_id"], "whoami", input=human("mine now")),
        eve.threads.delete(thread["thread_id"]),
    ):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await attempt
        assert refused.value.response.status_code == 404
    assert (await alice.threads.get(thread["thread_id"]))["thread_id"] == thread["thread_id"]


async def test_api_keys_are_no_way_around_the_handler(server):
    keyed = get_client(url=server.url, api_key=server.api_key("alice"))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await keyed.threads.search()
    assert refused.value.response.status_code == 401
    async with httpx.AsyncClient() as plain:
        assert (await plain.get(f"{server.url}/ok")).status_code == 200
