"""Races a hostile client provokes: a cancel landing as a run finishes, delete against admission.

Each test repeats its race enough times to have caught the rate measured
before the fix (a cancel at the finish line stranded 24 of 100 runs
``running`` on PostgreSQL: 30 trials miss that with odds of 3 in 10,000, 40
with 2 in 100,000; a refused delete had already erased the history in 2 of
20 trials). The single-process variants run on the pass's backend;
the cluster variants on two processes sharing PostgreSQL and Redis.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from langgraph_sdk import get_client

from tests.live.support import human

pytestmark = [pytest.mark.live]

TERMINAL = {"success", "error", "interrupted"}


async def _cancel_at_the_finish(http: httpx.AsyncClient, start_url: str, cancel_url: str, action: str) -> dict:
    """Start a fast run, cancel it the moment it is seen running; return what followed."""
    thread_id = (await http.post(f"{start_url}/threads", json={})).json()["thread_id"]
    run = (
        await http.post(
            f"{start_url}/threads/{thread_id}/runs", json={"assistant_id": "lead_agent", "input": human("x")}
        )
    ).json()
    run_id = run["run_id"]
    for _ in range(400):
        status = (await http.get(f"{cancel_url}/threads/{thread_id}/runs/{run_id}")).json()["status"]
        if status != "pending":
            break
    cancel = await http.post(f"{cancel_url}/threads/{thread_id}/runs/{run_id}/cancel", params={"action": action})
    # /join streams whitespace while it waits, so a read timeout never fires: bound it whole.
    try:
        joined = (
            await asyncio.wait_for(http.get(f"{cancel_url}/threads/{thread_id}/runs/{run_id}/join"), 20)
        ).status_code
    except TimeoutError:
        joined = "no answer in 20 s"
    final = (await http.get(f"{start_url}/threads/{thread_id}/runs/{run_id}")).json()
    thread = (await http.get(f"{start_url}/threads/{thread_id}")).json()
    storage = (await http.get(f"{start_url}/threads/{thread_id}/storage")).json()
    return {
        "seen": status,
        "cancel": cancel.status_code,
        "joined": joined,
        "final": final,
        "thread": thread,
        "orphans": storage.get("orphans"),
    }


def _assert_one_consistent_outcome(trial: dict) -> None:
    run, thread = trial["final"], trial["thread"]
    contents = [m["content"] for m in (thread.get("values") or {}).get("messages", [])]
    assert run["status"] in TERMINAL, trial
    assert thread["status"] != "busy", trial
    assert trial["joined"] == 200, trial
    if run["status"] == "error":
        # Rolled back means rolled back: the thread had no earlier turn, so nothing is left.
        assert run["error"] == "Rolled back by user", trial
        assert contents == [], trial
    elif run["status"] == "success":
        assert contents == ["x", "echo: x"], trial
    if trial["orphans"] is not None:
        assert trial["orphans"].get("parents", 0) == 0, trial


async def _race_cancels(start_url: str, cancel_url: str, key: str, trials: int) -> list[dict]:
    actions = ["rollback", "interrupt", "rollback", "rollback"]
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=30) as http:
        results: list[dict] = []
        for batch in range(0, trials, 10):
            results += await asyncio.gather(
                *(
                    _cancel_at_the_finish(http, start_url, cancel_url, actions[i % len(actions)])
                    for i in range(batch, min(trials, batch + 10))
                )
            )
    return results


async def test_a_cancel_at_the_finish_line_ends_the_run_exactly_once(api_server):
    results = await _race_cancels(api_server.url, api_server.url, api_server.api_key("racer"), 30)
    for trial in results:
        _assert_one_consistent_outcome(trial)
    assert any(t["seen"] == "running" for t in results), "no trial saw the run running: the race was not run"


@pytest.mark.postgres_only
async def test_a_cross_process_cancel_at_the_finish_line_ends_the_run_exactly_once(cluster):
    a, b = cluster
    results = await _race_cancels(a.url, b.url, a.api_key("racer"), 40)
    for trial in results:
        _assert_one_consistent_outcome(trial)
    assert any(t["seen"] == "running" for t in results), "no trial saw the run running: the race was not run"


async def _delete_against_admission(http: httpx.AsyncClient, url: str, delay: float) -> dict:
    client_thread = (await http.post(f"{url}/threads", json={})).json()["thread_id"]
    for turn in range(3):
        wait = await http.post(
            f"{url}/threads/{client_thread}/runs/wait", json={"assistant_id": "lead_agent", "input": human(f"t{turn}")}
        )
        assert wait.status_code == 200, wait.text

    async def delete():
        await asyncio.sleep(delay)
        return await http.delete(f"{url}/threads/{client_thread}")

    run, deleted = await asyncio.gather(
        http.post(f"{url}/threads/{client_thread}/runs", json={"assistant_id": "lead_agent", "input": human("racer")}),
        delete(),
    )
    if run.status_code == 200:
        join = http.get(f"{url}/threads/{client_thread}/runs/{run.json()['run_id']}/join")
        await asyncio.wait_for(join, 20)
    state = await http.get(f"{url}/threads/{client_thread}/state")
    return {"run": run.status_code, "delete": deleted.status_code, "state": state}


@pytest.mark.parametrize("server", ["single", pytest.param("cluster", marks=pytest.mark.postgres_only)])
async def test_a_refused_delete_keeps_the_whole_history(request, server):
    if server == "cluster":
        a, _b = request.getfixturevalue("cluster")
    else:
        a = request.getfixturevalue("api_server")
    outcomes = []
    async with httpx.AsyncClient(headers={"x-api-key": a.api_key("deleter")}, timeout=30) as http:
        for trial in range(24):
            outcomes.append(await _delete_against_admission(http, a.url, delay=(trial % 6) * 0.002))
    for outcome in outcomes:
        assert outcome["delete"] in (204, 409), outcome
        if outcome["delete"] == 409:
            assert outcome["run"] == 200, outcome
            contents = [m["content"] for m in outcome["state"].json()["values"]["messages"]]
            assert contents == ["t0", "echo: t0", "t1", "echo: t1", "t2", "echo: t2", "racer", "echo: racer"]
        else:
            assert outcome["state"].status_code == 404, outcome
            assert outcome["run"] in (200, 404, 409), outcome


@pytest.mark.postgres_only
async def test_mixed_strategies_on_two_processes_never_deadlock_into_a_500(cluster):
    """Enqueue, interrupt and rollback admissions against claims and finalizes on few threads."""
    a, b = cluster
    key = a.api_key("mixer")
    strategies = ["enqueue", "interrupt", "rollback", "enqueue"]
    async with httpx.AsyncClient(headers={"x-api-key": key}, timeout=60) as http:
        threads = [(await http.post(f"{a.url}/threads", json={})).json()["thread_id"] for _ in range(3)]

        async def admit(i: int):
            base = (a, b)[i % 2].url
            route = ("runs", "runs/wait", "runs/stream")[i % 3]
            body = {"assistant_id": "lead_agent", "input": human(f"m{i}"), "multitask_strategy": strategies[i % 4]}
            return await http.post(f"{base}/threads/{threads[i % 3]}/{route}", json=body)

        responses = await asyncio.gather(*(admit(i) for i in range(24)))
        assert [r.text for r in responses if r.status_code >= 500] == []
        client = get_client(url=b.url, api_key=key)
        for thread_id in threads:
            for run in await client.runs.list(thread_id, limit=100):
                await client.runs.join(thread_id, run["run_id"])
            statuses = {r["status"] for r in await client.runs.list(thread_id, limit=100)}
            assert statuses <= TERMINAL, statuses
