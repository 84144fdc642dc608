"""langgraph.json's ``encryption.path`` (tests/fixtures/encrypted_project), through the official Python SDK.

The project's handlers seal checkpoint blobs and the Platform's JSON fields
(thread metadata, run metadata and kwargs, assistant context and metadata,
cron payload and metadata, Store values) and ours (run events, the protocol-v2
log, a run's first and last message) with a key per tenant; the tenant comes from
``X-Encryption-Context`` or, without it, from the caller's org (the
``@encryption.context`` handler). Every client reads plaintext; the
database holds ciphertext and the context each value was sealed with.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.server import LiveServer, project_server, server_query
from tests.live.support import human

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "encrypted_project"
ALICE = {"Authorization": "Bearer alice:acme"}
SECRET = "zebra-11"
# Run metadata: sealed on the run, and copied by LangGraph into checkpoint metadata, which stays
# readable as on the Platform (its saver keeps it as JSON for history filters).
TOPIC = "okapi-22"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with project_server(tmp_path_factory.mktemp("encrypted-project"), PROJECT / "langgraph.json") as live:
        yield live


def context_header(context: dict) -> dict[str, str]:
    return {"X-Encryption-Context": base64.b64encode(json.dumps(context).encode()).decode()}


def stored(server: LiveServer, table: str, columns: str, where: str) -> list[str]:
    """The columns of the rows ``where`` picks, as the database holds them (JSON as text)."""
    return [str(value) for row in server_query(server, f"SELECT {columns} FROM {table} WHERE {where}") for value in row]


def columns_holding(server: LiveServer, needle: str) -> list[str]:
    """Every ``table.column`` of the server's database with a value containing ``needle`` (bytes columns too)."""
    found = []
    if server.database_url is None:
        tables = [t for (t,) in server_query(server, "SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for column in [c[1] for c in server_query(server, f'PRAGMA table_info("{table}")')]:
                values = [v for (v,) in server_query(server, f'SELECT "{column}" FROM "{table}"')]
                encoded = [v if isinstance(v, bytes) else str(v).encode() for v in values if v is not None]
                if any(needle.encode() in v for v in encoded):
                    found.append(f"{table}.{column}")
        return found
    listing = "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'public'"
    for table, column, data_type in server_query(server, listing):
        if data_type == "bytea":
            match = f"position('\\x{needle.encode().hex()}'::bytea in \"{column}\") > 0"
        else:
            match = f"\"{column}\"::text LIKE '%{needle}%'"
        if server_query(server, f'SELECT COUNT(*) FROM "{table}" WHERE {match}') != [(0,)]:
            found.append(f"{table}.{column}")
    return found


def checkpoint_values(server: LiveServer, thread_id: str) -> list[tuple[str, bytes]]:
    if server.database_url is None:
        queries = [("checkpoints", "checkpoint"), ("writes", "value")]
    else:
        queries = [("checkpoint_blobs", "blob"), ("checkpoint_writes", "blob")]
    rows = []
    for table, column in queries:
        rows += server_query(server, f"SELECT type, {column} FROM {table} WHERE thread_id = '{thread_id}'")
    return [(type_, bytes(value)) for type_, value in rows if value is not None]


async def test_every_field_the_platform_encrypts_is_sealed_at_rest_and_read_in_the_clear(server):
    client = get_client(url=server.url, headers=ALICE)
    thread = await client.threads.create(metadata={"note": f"{SECRET} note"})
    thread_id = thread["thread_id"]
    assert thread["metadata"] == {"note": f"{SECRET} note", "org_id": "acme", "created_by": "alice"}
    said = await client.runs.wait(thread_id, "agent", input=human(f"{SECRET} plan"), metadata={"topic": TOPIC})
    assert SECRET in str(said["messages"])
    assistant = await client.assistants.create("agent", context={"api_key": f"{SECRET}-key"}, metadata={"m": SECRET})
    await client.store.put_item(["notes"], "launch", {"text": f"{SECRET} store", "kind": "memo"})
    cron = await client.crons.create_for_thread(
        thread_id, "agent", schedule="0 0 1 1 *", input=human(f"{SECRET} yearly"), metadata={"c": SECRET}
    )

    # Every reader gets plaintext: the thread, its state and history, its runs, the assistant, the cron.
    assert (await client.threads.get(thread_id))["metadata"]["note"] == f"{SECRET} note"
    assert SECRET in str((await client.threads.get_state(thread_id))["values"]["messages"])
    assert SECRET in str([h["values"] for h in await client.threads.get_history(thread_id)])
    [run] = await client.runs.list(thread_id)
    assert run["metadata"]["topic"] == TOPIC and SECRET in json.dumps(run["kwargs"])
    assert (await client.assistants.get(assistant["assistant_id"]))["context"] == {"api_key": f"{SECRET}-key"}
    [found] = await client.crons.search(thread_id=thread_id)
    assert found["metadata"]["c"] == SECRET and SECRET in json.dumps(found["payload"])
    assert (await client.store.get_item(["notes"], "launch"))["value"] == {"text": f"{SECRET} store", "kind": "memo"}
    [item] = (await client.store.search_items(["notes"], filter={"kind": "memo"}))["items"]
    assert item["value"]["text"] == f"{SECRET} store"
    # The keys the handler leaves plaintext still filter, in SQL; the auth handler's org scope still applies.
    assert [t["thread_id"] for t in await client.threads.search(metadata={"created_by": "alice"})] == [thread_id]
    bob = get_client(url=server.url, headers={"Authorization": "Bearer bob:other"})
    assert await bob.threads.search() == []

    # At rest: ciphertext and the context it was sealed with (the caller's org, from @encryption.context).
    rows = [
        *stored(server, "threads_threadmeta", "metadata", f"thread_id = '{thread_id}'"),
        *stored(server, "runs_run", "metadata, kwargs", f"thread_id = '{thread_id}'"),
        *stored(server, "runs_assistant", "context, metadata", f"assistant_id = '{assistant['assistant_id']}'"),
        *stored(server, "runs_cron", "payload, metadata", f"cron_id = '{cron['cron_id']}'"),
    ]
    assert len(rows) == 7 and all("enc:" in row and "acme" in row for row in rows), rows
    assert not any(SECRET in row or TOPIC in row for row in rows), rows
    blobs = checkpoint_values(server, thread_id)
    assert blobs and all(type_.endswith("+custom") for type_, _ in blobs)
    # Nor anywhere else: run events, the protocol-v2 log, the run's first and last message, the title
    # (on PostgreSQL too, where upstream's saver keeps a string channel inline in the checkpoint row),
    # the message search index (not kept under custom encryption).
    assert columns_holding(server, SECRET) == []
    assert columns_holding(server, TOPIC) == ["checkpoints.metadata"]
    assert "threads_threadmeta.metadata" in columns_holding(server, "enc:")  # the scan sees what is there


async def test_the_header_chooses_the_tenant_and_reads_need_no_header(server):
    client = get_client(url=server.url, headers=ALICE)
    thread = await client.threads.create(metadata={"note": SECRET}, headers=context_header({"tenant_id": "acme-eu"}))
    await client.runs.wait(
        thread["thread_id"],
        "agent",
        input=human(f"{SECRET} in the EU"),
        headers=context_header({"tenant_id": "acme-eu"}),
    )
    [row] = stored(server, "threads_threadmeta", "metadata", f"thread_id = '{thread['thread_id']}'")
    assert "acme-eu" in row and SECRET not in row
    # Read without the header: the stored context opens it (a run in the background sealed with it too).
    assert (await client.threads.get(thread["thread_id"]))["metadata"]["note"] == SECRET
    assert SECRET in str((await client.threads.get_state(thread["thread_id"]))["values"]["messages"])


async def test_a_malformed_context_header_is_a_400_and_a_refusing_handler_a_503_writing_nothing(server):
    async with httpx.AsyncClient(base_url=server.url, headers=ALICE, timeout=30) as http:
        before = server_query(server, "SELECT COUNT(*) FROM threads_threadmeta")
        for bad in ("not base64!", base64.b64encode(b"[1, 2]").decode(), base64.b64encode(b"{").decode()):
            response = await http.post("/threads", json={}, headers={"X-Encryption-Context": bad})
            assert response.status_code == 400 and "X-Encryption-Context" in response.json()["detail"]
        assert server_query(server, "SELECT COUNT(*) FROM threads_threadmeta") == before
        # A handler that refuses (its key service has no key for the context) is a 503 naming it, not a 500.
        revoked = context_header({"tenant_id": "revoked"})
        refused = await http.post("/threads", json={"metadata": {"note": "x"}}, headers=revoked)
        assert refused.status_code == 503, refused.text
        assert "@encryption.encrypt.json on thread.metadata failed: PermissionError" in refused.json()["detail"]
        assert server_query(server, "SELECT COUNT(*) FROM threads_threadmeta") == before
