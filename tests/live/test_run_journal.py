"""The persisted feed and token usage, read back after real runs."""

from __future__ import annotations

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

from tests.live.support import human

pytestmark = pytest.mark.live


@pytest.fixture
def client(api_server):
    return get_client(url=api_server.url, api_key=api_server.api_key("alice"))


async def test_run_events_follow_the_deerflow_catalog(client):
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "lead_agent", input=human("one two"))
    [run] = await client.runs.list(thread_id)
    events = await client.http.get(f"/threads/{thread_id}/runs/{run['run_id']}/events")
    types = [e["event_type"] for e in events]
    assert types == ["run.start", "llm.human.input", "llm.ai.response", "run.end"]
    assert [e["category"] for e in events] == ["trace", "message", "message", "outputs"]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    ai = events[2]
    assert ai["content"]["content"] == "echo: one two"
    assert ai["metadata"]["caller"] == "lead_agent"
    assert ai["metadata"]["usage"] == {"input_tokens": 2, "output_tokens": 3, "total_tokens": 5}
    only_ai = await client.http.get(
        f"/threads/{thread_id}/runs/{run['run_id']}/events", params={"event_types": "llm.ai.response"}
    )
    assert [e["event_type"] for e in only_ai] == ["llm.ai.response"]
    after = await client.http.get(f"/threads/{thread_id}/runs/{run['run_id']}/events", params={"after_seq": seqs[1]})
    assert [e["seq"] for e in after] == seqs[2:]


async def test_thread_messages_span_runs_and_page_backwards(client):
    thread_id = (await client.threads.create())["thread_id"]
    for text in ("a", "b", "c"):
        await client.runs.wait(thread_id, "lead_agent", input=human(text))
    messages = await client.http.get(f"/threads/{thread_id}/messages")
    assert [m["content"]["content"] for m in messages] == ["a", "echo: a", "b", "echo: b", "c", "echo: c"]
    seqs = [m["seq"] for m in messages]
    assert seqs == sorted(seqs)
    first = await client.http.get(f"/threads/{thread_id}/messages/page", params={"limit": 4})
    assert [m["content"]["content"] for m in first["data"]] == ["b", "echo: b", "c", "echo: c"]
    assert first["has_more"] is True
    second = await client.http.get(
        f"/threads/{thread_id}/messages/page", params={"limit": 4, "before_seq": first["next_before_seq"]}
    )
    assert [m["content"]["content"] for m in second["data"]] == ["a", "echo: a"]
    assert second["has_more"] is False and second["next_before_seq"] is None
    with pytest.raises(UnprocessableEntityError, match="after_seq"):
        await client.http.get(f"/threads/{thread_id}/messages/page", params={"after_seq": 1})
    runs = await client.runs.list(thread_id)
    per_run = await client.http.get(f"/threads/{thread_id}/runs/{runs[-1]['run_id']}/messages")
    assert [m["content"]["content"] for m in per_run["data"]] == ["a", "echo: a"]


async def test_token_usage_sums_runs_by_model_and_caller(client):
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "lead_agent", input=human("one"))
    await client.runs.wait(thread_id, "lead_agent", input=human("two three"))
    usage = await client.http.get(f"/threads/{thread_id}/token-usage")
    assert usage["total_runs"] == 2
    assert usage["total_input_tokens"] == 1 + 2
    assert usage["total_output_tokens"] == 2 + 3
    assert usage["total_tokens"] == 8
    assert usage["by_model"] == {"demo-echo": {"tokens": 8, "runs": 2}}
    assert usage["by_caller"]["lead_agent"] == 8


async def test_title_is_mirrored_into_the_thread(client):
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "lead_agent", input=human("Plan a trip to Lisbon"))
    found = await client.threads.search(ids=[thread_id], select=["thread_id", "values"])
    thread = await client.threads.get(thread_id)
    assert thread["values"]["title"] == "Plan a trip to Lisbon"
    assert found[0]["thread_id"] == thread_id


async def test_values_frames_strip_hidden_data_images(client):
    thread_id = (await client.threads.create())["thread_id"]
    parts = [p async for p in client.runs.stream(thread_id, "lead_agent", input=human("/image"), stream_mode="values")]
    final = [p.data for p in parts if p.event == "values"][-1]
    hidden = [m for m in final["messages"] if m["additional_kwargs"].get("hide_from_ui")]
    assert hidden and all(b["type"] != "image_url" for b in hidden[0]["content"])
    assert len(final["messages"]) == 3


async def test_feed_routes_are_owner_only(client, api_server):
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "lead_agent", input=human("x"))
    [run] = await client.runs.list(thread_id)
    bob = get_client(url=api_server.url, api_key=api_server.api_key("bob"))
    for path in (
        f"/threads/{thread_id}/messages",
        f"/threads/{thread_id}/messages/page",
        f"/threads/{thread_id}/token-usage",
        f"/threads/{thread_id}/runs/{run['run_id']}/events",
        f"/threads/{thread_id}/runs/{run['run_id']}/messages",
        f"/threads/{thread_id}/runs/{run['run_id']}",
    ):
        with pytest.raises(NotFoundError):
            await bob.http.get(path)
