"""The correct contract for each upstream defect this project depends on, on the pinned versions.

langgraph 1.2.24, langgraph-checkpoint 4.3.2, -sqlite 3.1.2, -postgres 3.2.0
(pyproject.toml pins them exactly). Each test drives LangGraph's own API on
the pass's database saver (SQLite or PostgreSQL) and, where the defect was
saver-specific, on its InMemorySaver too, and asserts what a correct
LangGraph does:

- fixed upstream by the pinned versions: the test passes, and fails on a
  version bump that brings the defect back;
- still present and worked around here: the test still asserts the correct
  contract and is skipped, naming the issue and the test of our workaround;
  a version bump runs it (drop the skip) to learn whether the workaround can go.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

import pytest
from asgiref.sync import async_to_sync
from langchain_core.messages import HumanMessage
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import Overwrite
from typing_extensions import TypedDict

from checkpoints.accessor import thread_config
from checkpoints.runtime import aclose_async_resources
from checkpoints.state_cache import state_cache
from tests.checkpoints.support import accessor, new_thread_id
from tests.helpers import run_turns
from tests.threads.test_state_modes import create_thread, process_in_mode
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


def append_all(state: list | None, writes: list) -> list:
    """A batch reducer that keeps write order (order-sensitive on purpose)."""
    out = list(state or [])
    for write in writes:
        out.extend(write if isinstance(write, list) else [write])
    return out


def add_all(state: int | None, writes: list) -> int:
    return (state or 0) + sum(writes)


class FullLog(TypedDict):
    log: Annotated[list, operator.add]
    count: Annotated[int, operator.add]


class DeltaLog(TypedDict):
    log: Annotated[list, DeltaChannel(append_all, snapshot_frequency=10_000)]
    count: Annotated[int, DeltaChannel(add_all, snapshot_frequency=10_000)]


def _out(state: dict) -> dict[str, Any]:
    return {"log": ["out"], "count": 1}


def one_node(schema: type, saver) -> Any:
    builder = StateGraph(schema)
    builder.add_node("node", _out)
    builder.add_edge(START, "node")
    return builder.compile(checkpointer=saver)


def _writer(name: str):
    def write(state: dict) -> dict[str, Any]:
        return {"log": [name]}

    return write


def fan_out(saver) -> Any:
    """Three parallel tasks writing the delta channel in one super-step."""
    builder = StateGraph(DeltaLog)
    for name in ("c", "a", "b"):
        builder.add_node(name, _writer(name))
        builder.add_edge(START, name)
    return builder.compile(checkpointer=saver)


def config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    return thread_config(thread_id, checkpoint_id)


# -- DeerFlow #4380 ------------------------------------------------------------


@pytest.mark.backend_free
@pytest.mark.skip(
    reason="still present in langgraph 1.2.24, DeerFlow #4380: BinaryOperatorAggregate stores an Overwrite first write as the wrapper; "
    "worked around by checkpoints.graphs.ReplaceableAggregate (tests/threads/test_state_values_roundtrip.py)",
)
def test_an_overwrite_into_an_empty_reducer_channel_stores_its_value():
    channel = BinaryOperatorAggregate(list[str] | None, operator.add)
    assert not channel.is_available(), "an Optional type has no default: the channel starts empty"
    channel.update([Overwrite([])])
    assert channel.get() == []


# -- langgraph #8526 (all savers) and #8535 (PostgreSQL) -------------------------


def test_the_first_write_after_a_full_to_delta_switch_is_kept(saver):
    """#8526: the seed checkpoint's own writes were taken as part of its plain value and dropped.

    #8535: PostgreSQL did not see an inline primitive (``count``) as a seed.
    """
    thread_id = new_thread_id("migrated")
    one_node(FullLog, saver).invoke({"log": ["in-1"], "count": 10}, config(thread_id))
    delta = one_node(DeltaLog, saver)
    delta.invoke({"log": ["in-2"], "count": 100}, config(thread_id))
    values = delta.get_state(config(thread_id)).values
    assert values == {"log": ["in-1", "out", "in-2", "out"], "count": 112}


# -- langgraph #8382 -----------------------------------------------------------------


def test_parallel_writes_replay_in_the_order_the_run_applied_them(saver):
    """#8382: a super-step's writes were replayed by task id, the run applied them by task path."""
    thread_id = new_thread_id("parallel")
    graph = fan_out(saver)
    live = graph.invoke({"log": ["in"]}, config(thread_id))["log"]
    assert sorted(live[1:]) == ["a", "b", "c"]
    assert fan_out(saver).get_state(config(thread_id)).values["log"] == live


# -- langgraph #8448 (PostgreSQL) ------------------------------------------------


DEEP_STEPS = 1_100  # past PostgresSaver's delta page of 1,024 checkpoints


def _count_on(state: dict) -> dict[str, Any]:
    return {"log": [len(state["log"])]}


def _again(state: dict) -> str:
    return "count" if len(state["log"]) < DEEP_STEPS else END


def counting(saver) -> Any:
    """One run of DEEP_STEPS super-steps, each appending the next number (one checkpoint each)."""
    builder = StateGraph(DeltaLog)
    builder.add_node("count", _count_on)
    builder.add_edge(START, "count")
    builder.add_conditional_edges("count", _again)
    return builder.compile(checkpointer=saver)


@pytest.mark.postgres_only
def test_a_delta_checkpoint_past_the_first_history_page_reads_its_writes(db_saver):
    """#8448: PostgreSQL's delta walk gave up on a target outside the newest 1,024 checkpoints."""
    thread_id = new_thread_id("deep")
    counting(db_saver).invoke({"log": [0]}, {**config(thread_id), "recursion_limit": DEEP_STEPS + 10})
    saved = list(db_saver.list(config(thread_id)))
    assert len(saved) > 1_024
    early = saved[-10]
    step = early.metadata["step"]
    values = counting(db_saver).get_state(early.config).values
    assert values["log"] == list(range(step + 1))


# -- langgraph #8443 (open PR #8548) and its update_state mirror #8551 ----------------
# Neither reproduces on the pinned versions with the issues' own scenarios (an
# abandoned turn, then a run or a state update addressed to the checkpoint it
# started from): these pin that. checkpoints.resume still linearizes delta
# resumes, which stays correct whether or not a fork replays.


def test_a_delta_fork_does_not_replay_the_abandoned_branch(saver):
    thread_id = new_thread_id("fork")
    graph = one_node(DeltaLog, saver)
    graph.invoke({"log": ["in-1"]}, config(thread_id))
    end_of_first = graph.get_state(config(thread_id)).config
    graph.invoke({"log": ["abandoned"]}, config(thread_id))
    assert graph.invoke({"log": ["in-2"]}, end_of_first)["log"] == ["in-1", "out", "in-2", "out"]
    reloaded = one_node(DeltaLog, saver).get_state(config(thread_id)).values["log"]
    assert reloaded == ["in-1", "out", "in-2", "out"]


def test_a_state_update_at_an_older_checkpoint_stays_out_of_the_sibling_branch(saver):
    thread_id = new_thread_id("sibling")
    graph = one_node(DeltaLog, saver)
    graph.invoke({"log": ["in-1"]}, config(thread_id))
    end_of_first = graph.get_state(config(thread_id)).config
    graph.invoke({"log": ["in-2"]}, config(thread_id))
    sibling = graph.get_state(config(thread_id)).config
    fork = graph.update_state(end_of_first, {"log": ["edited"]}, as_node="node")
    reader = one_node(DeltaLog, saver)
    assert reader.get_state(fork).values["log"] == ["in-1", "out", "edited"]
    assert reader.get_state(sibling).values["log"] == ["in-1", "out", "in-2", "out"]


# -- DeerFlow #4458 ------------------------------------------------------------------


def test_regenerating_in_a_branched_delta_thread_never_brings_back_the_old_answer(owner, settings):
    """#4458: a regenerate run forks below the answer it replaces, and a delta fork replays that answer."""
    with process_in_mode(settings, "delta"):
        thread_id = create_thread(owner)
        run_turns(thread_id, ["h1", "h2"])
        answer = owner.client.get(f"/api/threads/{thread_id}/state").json()["values"]["messages"][-1]
        branch = owner.client.post(f"/api/threads/{thread_id}/branches", {"message_id": answer["id"]}, format="json")
        assert branch.status_code == 200, branch.content
        branch_id = branch.json()["thread_id"]
        prepared = owner.client.post(
            f"/api/threads/{branch_id}/runs/regenerate/prepare", {"message_id": answer["id"]}, format="json"
        )
        assert prepared.status_code == 200, prepared.content
        async_to_sync(_run_prepared)(owner, ThreadMeta.objects.get(pk=branch_id), prepared.json())
        state_cache.clear()
        messages = owner.client.get(f"/api/threads/{branch_id}/state").json()["values"]["messages"]
        assert [m["content"] for m in messages] == ["h1", "echo: h1", "h2", "echo: h2"]
        assert answer["id"] not in [m["id"] for m in messages], "the replaced answer came back"


async def _run_prepared(owner, thread: ThreadMeta, prepared: dict[str, Any]) -> None:
    """Execute what regenerate/prepare told the client to post, as a worker would."""
    from channels.db import database_sync_to_async as db

    from core.bridge import MemoryStreamBridge
    from runs.execution.executor import RunExecution
    from runs.services.admission import run_admit
    from runs.services.lifecycle import run_claim
    from runs.services.run_request import RunRequest

    request = RunRequest("lead_agent", input=prepared["input"], metadata=prepared["metadata"])
    kwargs = request.run_kwargs(prepared["checkpoint"]["checkpoint_id"])
    try:
        run, _ = await db(run_admit)(
            owner=owner.user, thread=thread, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs=kwargs
        )
        run = await db(run_claim)(run_id=run.run_id, worker_id="w", lease_seconds=30)
        outcome = await RunExecution(run, bridge=MemoryStreamBridge(max_events=100), worker_id="w").execute()
        assert outcome.status == "success", outcome.error
    finally:
        await aclose_async_resources()


# -- DeerFlow #3859: the title-version shape --------------------------------------------


def test_a_title_only_update_bumps_the_title_version_the_savers_way_and_keeps_the_others(db_saver):
    """#3859: a title written beside the graph needs a strictly newer version of the saver's own type.

    SQLite and PostgreSQL persist only the blobs a ``put`` declares new, so a
    title kept at its old version read back as the old title.
    """
    thread_id = new_thread_id("title")
    acc = accessor("full", saver=db_saver)
    acc.graph.invoke({"messages": [HumanMessage("first", id="h1")]}, acc.config(thread_id))
    before = db_saver.get_tuple(config(thread_id)).checkpoint["channel_versions"]
    acc.update(thread_id, {"title": "renamed"})
    after = db_saver.get_tuple(config(thread_id)).checkpoint["channel_versions"]
    assert type(after["title"]) is type(before["title"])
    assert after["title"] > before["title"]
    assert after["messages"] == before["messages"]
    reread = accessor("full", saver=db_saver).get(thread_id).values
    assert reread["title"] == "renamed"
    assert [m.content for m in reread["messages"]] == ["first", "echo: first"]
