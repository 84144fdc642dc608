"""One ``langgraph.json`` project using every key at once (tests/fixtures/full_project), through both official SDKs.

Its own auth (``Authorization: Bearer <user>:<org>``, threads scoped by
org), its own routes (``http.app``) under a mount prefix, a semantic Store
(``store.index``) with a default item TTL (``store.ttl``), a default thread
TTL (``checkpointer.ttl``) and its own encryption handlers
(``encryption.path``, a key per org; ``LANGGRAPH_AES_KEY`` from its ``env``
stays configured for what it sealed): the Python SDK and the JS SDK drive it
unchanged, and the database holds no checkpoint and no thread metadata in
the clear.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.server import LiveServer, project_server, server_query
from tests.live.support import human

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "full_project"
ALICE = {"Authorization": "Bearer alice:acme"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("full-project"), PROJECT / "langgraph.json") as live:
        yield live


def sealed_tables(server: LiveServer) -> list[tuple[str, bytes]]:
    tables = ["checkpoints", "writes"] if server.database_url is None else ["checkpoint_blobs", "checkpoint_writes"]
    column = {"checkpoints": "checkpoint", "writes": "value"}
    rows = []
    for table in tables:
        rows += server_query(server, f"SELECT type, {column.get(table, 'blob')} FROM {table}")
    return [(type_, bytes(value)) for type_, value in rows if value is not None]


async def test_the_python_sdk_drives_every_key_at_once(server):
    client = get_client(url=server.url, headers=ALICE)
    thread = await client.threads.create(metadata={"purpose": "the zebra-9 launch"})
    assert thread["metadata"]["org_id"] == "acme"  # the auth handler stamped it
    said = await client.runs.wait(thread["thread_id"], "whoami", input=human("who?"))
    assert said["messages"][-1]["content"] == "alice@acme"
    await client.runs.wait(thread["thread_id"], "agent", input=human("/remember the zebra-9 launch is on Friday"))
    found = (await client.store.search_items(["memories"], query="when is the launch"))["items"]
    assert found[0]["value"]["text"] == "the zebra-9 launch is on Friday" and found[0]["score"] > 0
    # store.ttl and checkpointer.ttl: the item and the thread expire by default.
    assert server_query(server, "SELECT COUNT(*) FROM store WHERE expires_at IS NULL") == [(0,)]
    [(strategy, expires)] = server_query(
        server, f"SELECT ttl_strategy, expires_at FROM threads_threadmeta WHERE thread_id = '{thread['thread_id']}'"
    )
    assert strategy == "delete" and expires is not None
    # Another org sees nothing of it.
    bob = get_client(url=server.url, headers={"Authorization": "Bearer bob:other"})
    assert await bob.threads.search() == []
    # The project's routes, under the mount prefix as the API is.
    root = server.url.removesuffix("/api")
    async with httpx.AsyncClient(base_url=root, timeout=30) as http:
        assert (await http.get("/full/custom/hello")).json()["hello"] == "from the project"
    prefixed = get_client(url=f"{root}/full", headers=ALICE)
    assert (await prefixed.threads.get(thread["thread_id"]))["thread_id"] == thread["thread_id"]
    # Sealed at rest: the state reads back, the tables hold no word of it.
    state = await client.threads.get_state(thread["thread_id"])
    assert "zebra-9" in str(state["values"]["messages"])
    stored = sealed_tables(server)
    assert stored and all(type_.endswith("+custom") for type_, _ in stored)
    assert not any(b"zebra-9" in value for _, value in stored)
    [(metadata,)] = server_query(
        server, f"SELECT metadata FROM threads_threadmeta WHERE thread_id = '{thread['thread_id']}'"
    )
    assert "zebra-9" not in str(metadata) and "enc:" in str(metadata) and "acme" in str(metadata)
    assert (await client.threads.get(thread["thread_id"]))["metadata"]["purpose"] == "the zebra-9 launch"


def test_the_js_sdk_drives_it_too(server, js_sdks):
    env = {**os.environ, "DEERFLOW_URL": server.url, "DEERFLOW_AUTH": ALICE["Authorization"]}
    result = subprocess.run(
        ["node", "full_project_check.mjs"], cwd=js_sdks, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["org_id"] == "acme" and out["whoami"] == "alice@acme"
    assert out["top_memory"] == "the js-7 review is on Monday" and out["top_score"] > 0
    assert "js-7" in out["state_text"]
