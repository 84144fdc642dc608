"""A thread's graph is the graph of its runs: bound on the first, moved by each later one."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async as db

from tests.checkpoints.conftest import configure
from tests.helpers import aexecute_run, anew_thread


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_a_thread_follows_the_graph_of_its_runs_and_reads_with_its_schema(
    byo_graphs, owner, mode, settings, unfrozen_mode, closing_savers
):
    configure(settings, checkpoint_channel_mode=mode)
    thread = await anew_thread(owner)
    assert thread.assistant_id == "lead_agent"

    _, thread = await aexecute_run(
        owner, thread, "compiled_agent", {"input": {"messages": [{"role": "user", "content": "hi"}]}}
    )

    assert (thread.assistant_id, thread.metadata["graph_id"], thread.status) == (
        "compiled_agent",
        "compiled_agent",
        "interrupted",
    )
    answer = (await db(owner.client.get)(f"/api/threads/{thread.thread_id}")).json()
    assert answer["status"] == "interrupted"
    assert answer["values"]["limit"] == 7  # the graph's own recursion_limit default
    state = (await db(owner.client.get)(f"/api/threads/{thread.thread_id}/state")).json()
    assert state["next"] == ["review"]
    assert [m["content"] for m in state["values"]["messages"]] == ["hi", "draft: hi"]
    history = (await db(owner.client.post)(f"/api/threads/{thread.thread_id}/history", {}, format="json")).json()
    assert history[0]["next"] == ["review"]

    # Resume: the interrupted graph goes on; a client recursion_limit beats the graph's default.
    _, thread = await aexecute_run(owner, thread, "compiled_agent", {"input": None, "config": {"recursion_limit": 9}})
    state = (await db(owner.client.get)(f"/api/threads/{thread.thread_id}/state")).json()
    assert (state["next"], state["values"]["reviewed"], thread.status) == ([], True, "idle")

    # A later run of another graph rebinds the thread.
    _, thread = await aexecute_run(
        owner, thread, "builder_agent", {"input": {"messages": [{"role": "user", "content": "x"}]}}
    )
    assert thread.assistant_id == "builder_agent"
    state = (await db(owner.client.get)(f"/api/threads/{thread.thread_id}/state")).json()
    assert state["values"]["messages"][-1]["content"] == "builder: x"
    assert "limit" not in state["values"]  # builder_agent's schema has no such channel
