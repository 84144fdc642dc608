"""langgraph.json's http options on a real server (tests/fixtures/http_options), through the official SDK.

``disable_assistants`` and ``disable_store`` take those routes away (404,
and out of the schema) while the rest serves; ``configurable_headers``
copies the request headers it names into the run's ``configurable`` (the
graph answers with them), never the API key however the patterns read.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.server import project_server
from tests.live.support import human

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "http_options"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("http-options"), PROJECT / "langgraph.json") as live:
        yield live


async def test_disabled_families_are_not_served_and_the_rest_is(server):
    headers = {"x-api-key": server.api_key("runner")}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
        assert (await http.post("/assistants/search", json={})).status_code == 404
        assert (await http.get("/store/items", params={"namespace": "a", "key": "k"})).status_code == 404
        assert (await http.post("/threads/search", json={})).status_code == 200
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert "/api/threads" in paths and not any(p.startswith(("/api/store", "/api/assistants")) for p in paths)


async def test_configurable_headers_reach_the_graph_and_the_api_key_never_does(server):
    key = server.api_key("runner")
    client = get_client(url=server.url, api_key=key, headers={"x-tenant-id": "acme", "x-tenant-secret": "no"})
    thread = await client.threads.create()
    values = await client.runs.wait(thread["thread_id"], "tenant", input=human("hi"))
    assert values["messages"][-1]["content"] == "acme|None"
    run = (await client.runs.list(thread["thread_id"]))[0]
    configurable = run["kwargs"]["config"]["configurable"]
    assert configurable["x-tenant-id"] == "acme" and "x-tenant-secret" not in configurable
    assert key not in str(run)
