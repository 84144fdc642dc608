"""langgraph.json's ``http.app`` on a real server (tests/fixtures/http_app): the project's routes beside the API.

The project's Starlette app answers its own paths (its lifespan ran first),
one of them shadowing ``/api/info`` as on the Platform; every other path is
ours, the SDK included. With ``http.enable_custom_route_auth`` its routes
pass custom auth's authenticate handler first, and the identity reaches the
app in ``scope["user"]``.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.server import LiveServer, project_server

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "http_app"


def root(server: LiveServer) -> str:
    """The server's own root: the project's routes live beside /api, not under it."""
    return server.url.removesuffix("/api")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("http-app"), PROJECT / "langgraph.json") as live:
        yield live


async def test_the_projects_routes_answer_beside_the_api(server):
    async with httpx.AsyncClient(base_url=root(server), timeout=30) as http:
        hello = await http.get("/custom/hello")
        assert hello.status_code == 200, hello.text
        assert hello.json() == {"hello": "from the project", "lifespan": ["up"], "user": None}
        posted = await http.post("/custom/webhook", json={"event": "x"})
        assert (posted.status_code, posted.json()) == (201, {"received": {"event": "x"}})
        # A method the project's route does not take is its app's 405, not our 404.
        assert (await http.get("/custom/webhook")).status_code == 405
        assert (await http.get("/api/info")).json() == {"served_by": "the project"}
        # Every other path is ours: the API with its key, and a 404 for what nobody serves.
        assert (await http.get("/api/ok")).json()["ok"] is True
        assert (await http.get("/custom/nothing")).status_code == 404
    client = get_client(url=server.url, api_key=server.api_key("runner"))
    thread = await client.threads.create()
    assert (await client.threads.get(thread["thread_id"]))["thread_id"] == thread["thread_id"]


async def test_the_projects_middleware_runs_once_on_every_route_streams_included(server):
    key = {"x-api-key": server.api_key("runner")}
    async with httpx.AsyncClient(base_url=root(server), timeout=30) as http:
        for path in ("/api/ok", "/custom/hello"):  # ours, and the project's (its app applies it: once)
            answered = await http.get(path, headers=key)
            assert answered.headers.get_list("x-project-middleware") == ["seen"], path
        # Its own policy refuses before any route of ours runs: nothing is written.
        before = (await http.post("/api/threads/search", json={}, headers=key)).json()
        refused = await http.post("/api/threads", json={}, headers={**key, "x-blocked-by-policy": "1"})
        assert (refused.status_code, refused.json()) == (451, {"detail": "refused by the project's policy"})
        assert (await http.post("/api/threads/search", json={}, headers=key)).json() == before
        # A run's SSE stream goes through it whole.
        thread = (await http.post("/api/threads", json={}, headers=key)).json()["thread_id"]
        body = {"assistant_id": "whoami", "input": {"messages": [{"type": "human", "content": "hi"}]}}
        async with http.stream("POST", f"/api/threads/{thread}/runs/stream", json=body, headers=key) as stream:
            assert stream.headers["x-project-middleware"] == "seen"
            text = "".join([chunk async for chunk in stream.aiter_text()])
        assert "event: metadata" in text and "event: values" in text


async def test_with_auth_first_the_projects_middleware_sees_the_caller(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("http-app"), PROJECT / "langgraph.auth_first.json") as live:
        async with httpx.AsyncClient(base_url=root(live), timeout=30) as http:
            alice = {"Authorization": "Bearer alice:acme"}
            answered = await http.post("/api/threads/search", json={}, headers=alice)
            assert answered.status_code == 200 and answered.headers["x-project-saw-user"] == "alice"
            # Nobody is refused by the layer itself: our views decide (401 here, public /api/ok answers).
            anonymous = await http.post("/api/threads/search", json={})
            assert anonymous.status_code == 401 and anonymous.headers["x-project-saw-user"] == "-"
            assert (await http.get("/api/ok")).status_code == 200


async def test_with_custom_route_auth_the_projects_routes_need_an_identity(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("http-app"), PROJECT / "langgraph.auth.json") as live:
        async with httpx.AsyncClient(base_url=root(live), timeout=30) as http:
            refused = await http.get("/custom/hello")
            assert refused.status_code == 401 and refused.json()["detail"]
            answered = await http.get("/custom/hello", headers={"Authorization": "Bearer alice:acme"})
            assert answered.status_code == 200, answered.text
            user = answered.json()["user"]
            assert (user["identity"], user["org_id"], user["permissions"]) == ("alice", "acme", ["org:acme"])
            # middleware_first (the default): the project's middleware runs on our routes before authentication.
            searched = await http.post("/api/threads/search", json={}, headers={"Authorization": "Bearer alice:acme"})
            assert searched.status_code == 200 and searched.headers["x-project-saw-user"] == "-"
