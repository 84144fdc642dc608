"""The official langgraph-sdk client against a real server: the assistants API and crons, firing included."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

pytestmark = pytest.mark.live

LEAD = "bee7d354-5df5-5f26-a978-10ea053f620d"


@pytest.fixture
def alice(api_server):
    return get_client(url=api_server.url, api_key=api_server.api_key("alice"))


@pytest.fixture
def bob(api_server):
    return get_client(url=api_server.url, api_key=api_server.api_key("bob"))


async def test_sdk_assistants_crud_versions_and_introspection(alice, bob):
    created = await alice.assistants.create(
        "lead_agent", config={"configurable": {"model": "a"}}, metadata={"suite": "live"}, name="live-helper"
    )
    aid = created["assistant_id"]
    assert (created["graph_id"], created["version"], created["name"]) == ("lead_agent", 1, "live-helper")
    same = await alice.assistants.create("lead_agent", assistant_id=aid, if_exists="do_nothing", name="other")
    assert same["name"] == "live-helper"
    with pytest.raises(ConflictError):
        await alice.assistants.create("lead_agent", assistant_id=aid)
    with pytest.raises(NotFoundError):
        await alice.assistants.create("no-such-graph")

    updated = await alice.assistants.update(aid, metadata={"stage": 2}, config={"configurable": {"model": "b"}})
    assert updated["version"] == 2 and updated["metadata"] == {"suite": "live", "stage": 2}
    versions = await alice.assistants.get_versions(aid)
    assert [v["version"] for v in versions] == [2, 1]
    back = await alice.assistants.set_latest(aid, 1)
    assert (back["version"], back["config"]["configurable"]["model"]) == (1, "a")

    found = await alice.assistants.search(metadata={"suite": "live"})
    assert [a["assistant_id"] for a in found] == [aid]
    assert await alice.assistants.count(graph_id="lead_agent") >= 2
    assert aid not in [a["assistant_id"] for a in await bob.assistants.search(limit=100)]
    with pytest.raises(NotFoundError):
        await bob.assistants.get(aid)
    [system] = await bob.assistants.search(graph_id="lead_agent")
    assert system["assistant_id"] == LEAD and system["metadata"] == {"created_by": "system"}
    with pytest.raises(NotFoundError):
        await bob.assistants.delete(LEAD)

    graph = await alice.assistants.get_graph(aid, xray=True)
    assert {"__start__", "agent", "__end__"} <= {n["id"] for n in graph["nodes"]}
    assert await alice.assistants.get_subgraphs(aid, recurse=True) == {}
    assert "input_schema" in await alice.assistants.get_schemas(aid)

    thread = await alice.threads.create()
    result = await alice.runs.wait(thread["thread_id"], aid, input={"messages": [{"role": "user", "content": "hi"}]})
    assert result["messages"][-1]["content"] == "echo: hi"
    [run] = await alice.runs.list(thread["thread_id"])
    assert run["assistant_id"] == aid
    await alice.assistants.delete(aid, delete_threads=True)
    with pytest.raises(NotFoundError):
        await alice.assistants.get(aid)
    with pytest.raises(NotFoundError):
        await alice.threads.get(thread["thread_id"])


def _once_at(moment: datetime) -> str:
    """A schedule (croniter's optional sixth field: seconds) whose only slot this year is ``moment`` (UTC)."""
    return f"{moment.minute} {moment.hour} {moment.day} {moment.month} * {moment.second}"


async def test_sdk_crons_and_a_firing(alice, bob):
    thread = await alice.threads.create()
    tid = thread["thread_id"]
    on_thread = await alice.crons.create_for_thread(
        tid,
        "lead_agent",
        schedule="0 0 1 1 *",
        input={"messages": [{"role": "user", "content": "tick"}]},
        metadata={"suite": "live"},
        timezone="Europe/Paris",
        end_time=datetime.now(UTC) + timedelta(days=400),
    )
    stateless = await alice.crons.create("lead_agent", schedule="*/10 * * * *", enabled=False, on_run_completed="keep")
    assert on_thread["thread_id"] == tid and on_thread["timezone"] == "Europe/Paris"
    assert stateless["thread_id"] is None and stateless["on_run_completed"] == "keep"
    with pytest.raises(UnprocessableEntityError):
        await alice.crons.create("lead_agent", schedule="not a schedule")

    found = await alice.crons.search(thread_id=tid)
    assert [c["cron_id"] for c in found] == [on_thread["cron_id"]]
    assert await alice.crons.count() == 2 and await bob.crons.count() == 0
    assert await bob.crons.search() == []
    updated = await alice.crons.update(stateless["cron_id"], enabled=True, metadata={"x": 1})
    assert updated["enabled"] is True and updated["metadata"] == {"x": 1}
    await alice.crons.delete(stateless["cron_id"])
    with pytest.raises(NotFoundError):
        await bob.crons.delete(on_thread["cron_id"])

    # Its slot comes in two seconds (the catch-up after downtime is the in-process suite's);
    # a patch slower than that (a loaded machine) got next year's slot: try again.
    for _ in range(5):
        due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
        patched = await alice.crons.update(on_thread["cron_id"], schedule=_once_at(due), timezone="UTC")
        if datetime.fromisoformat(patched["next_run_date"]) == due:
            break
    else:
        pytest.fail("could not schedule a slot two seconds ahead")
    deadline = time.monotonic() + 30
    while not (runs := await alice.runs.list(tid)) or runs[0]["status"] != "success":
        assert time.monotonic() < deadline, runs
        await asyncio.sleep(0.1)
    assert len(runs) == 1 and runs[0]["metadata"] == {"suite": "live"}
    state = await alice.threads.get_state(tid)
    assert state["values"]["messages"][-1]["content"] == "echo: tick"
    fired = await alice.http.get(f"/runs/crons/{on_thread['cron_id']}")  # the SDK has no crons.get
    assert datetime.fromisoformat(fired["next_run_date"]) > datetime.now(UTC)  # the slot is used up
    assert fired["last_run_date"] is not None
    await alice.crons.delete(on_thread["cron_id"])
