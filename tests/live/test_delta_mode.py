"""Delta mode in real server processes, driven by the official langgraph-sdk client.

One data folder (or one PostgreSQL database in the PostgreSQL pass) is served
in turn by a full-mode server, a delta-mode server (cadence 2), and a
full-mode server again: the delta process reads the full thread and continues
it without losing a message; afterwards the full process refuses that thread
with 409 and still serves the untouched full thread.
"""

from __future__ import annotations

import os

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError

from tests.live.server import LiveServer, fresh_postgres_database

pytestmark = pytest.mark.live

DELTA_CONFIG = {"database": {"checkpoint_channel_mode": "delta", "checkpoint_delta": {"snapshot_frequency": 2}}}
MISMATCH = "Thread requires delta mode; materialize and convert its checkpoints before using full mode."


def gate_refusal(thread_id: str) -> dict:
    """The gate's 409 body: DeerFlow's sentence naming the thread, then the command that converts it."""
    command = f"Run: manage.py convert_checkpoints --to full --thread {thread_id}"
    return {"detail": f"Thread {thread_id}: {MISMATCH} {command}"}


@pytest.fixture
def database_url():
    """This pass's database for the servers: a throwaway PostgreSQL database, or SQLite (None)."""
    base = os.environ.get("DATABASE_URL")
    if not base:
        yield None
        return
    with fresh_postgres_database(base) as url:
        yield url


async def run_turns(client, thread_id: str, texts: list[str]) -> None:
    """Run demo-agent turns through the server (its process, its channel mode), one run per text."""
    for text in texts:
        await client.runs.wait(thread_id, "lead_agent", input={"messages": [{"role": "user", "content": text}]})


def contents(state) -> list[str]:
    return [m["content"] for m in state["values"].get("messages", [])]


async def test_delta_process_reads_and_continues_full_threads(tmp_path, database_url):
    full = LiveServer(tmp_path, database_url=database_url).setup().start()
    try:
        key = full.api_key("alice")
        client = get_client(url=full.url, api_key=key)
        migrated = (await client.threads.create(graph_id="lead_agent"))["thread_id"]
        untouched = (await client.threads.create(graph_id="lead_agent"))["thread_id"]
        await run_turns(client, migrated, ["one", "two"])
        await run_turns(client, untouched, ["stay full"])
        await client.threads.update_state(migrated, {"title": "full era"})
        full_state = await client.threads.get_state(migrated)
        assert contents(full_state) == ["one", "echo: one", "two", "echo: two"]
        assert "deerflow_checkpoint_channel_mode" not in full_state["metadata"]
        full_history = await client.threads.get_history(migrated, limit=100)
    finally:
        full.stop()

    delta = LiveServer(tmp_path, config=DELTA_CONFIG, database_url=database_url).start()
    try:
        client = get_client(url=delta.url, api_key=key)
        # Full checkpoints read transparently, state and history alike.
        assert (await client.threads.get_state(migrated))["values"] == full_state["values"]
        assert await client.threads.get_history(migrated, limit=100) == full_history
        # Continue the thread in delta mode: a turn, then an update, through the server.
        await run_turns(client, migrated, ["three"])
        await client.threads.update_state(migrated, {"title": "delta era"})
        state = await client.threads.get_state(migrated)
        assert contents(state) == ["one", "echo: one", "two", "echo: two", "three", "echo: three"]
        assert state["values"]["title"] == "delta era"
        assert state["metadata"]["deerflow_checkpoint_channel_mode"] == "delta"
        history = await client.threads.get_history(migrated, limit=100)
        assert len(history) == len(full_history) + 4
        # The first delta write after the switch (the input of turn three) is there, on top of the full era.
        first_delta = next(e for e in reversed(history) if e["metadata"].get("deerflow_checkpoint_channel_mode"))
        assert contents(first_delta) == ["one", "echo: one", "two", "echo: two"]
        assert first_delta["metadata"]["source"] == "input"
        assert [contents(e) for e in history] == [
            contents(e) for e in await client.threads.get_history(migrated, limit=100)
        ]
        info = (await client.http.get("/info"))["checkpoints"]
        assert info["channel_mode"] == "delta" and info["snapshot_frequency"] == 2
        assert info["history_cache"]["enabled"] is True and info["history_cache"]["counters"]["composes"] > 0
        # The repeated history read is answered by the encoded-state cache, entry by entry.
        assert info["state_cache"]["enabled"] is True and info["state_cache"]["counters"]["hits"] >= len(history)
        # A thread born in delta mode works end to end too.
        fresh = (await client.threads.create(graph_id="lead_agent"))["thread_id"]
        await run_turns(client, fresh, ["a", "b", "c"])
        assert contents(await client.threads.get_state(fresh)) == ["a", "echo: a", "b", "echo: b", "c", "echo: c"]
    finally:
        delta.stop()

    full_again = LiveServer(tmp_path, database_url=database_url).start()
    try:
        client = get_client(url=full_again.url, api_key=key)
        with pytest.raises(ConflictError) as refused:
            await client.threads.get_state(migrated)
        assert refused.value.response.json() == gate_refusal(migrated)
        with pytest.raises(ConflictError):
            await client.threads.update_state(migrated, {"title": "back to full"})
        with pytest.raises(ConflictError):
            await client.threads.get_history(migrated)
        assert contents(await client.threads.get_state(untouched)) == ["stay full", "echo: stay full"]
    finally:
        full_again.stop()
