"""The assistants API in-process: ownership, versions, system assistants, graph routes, runs of an assistant."""

from __future__ import annotations

import json
import logging
import uuid

import httpx
import pytest
from langgraph.graph import StateGraph
from typing_extensions import TypedDict

from checkpoints.graphs import NAMESPACE_GRAPH
from runs.api.assistants import graph_schemas
from runs.assistant_selectors import ResolvedAssistant
from runs.models import Assistant, AssistantVersion, Run
from runs.services.run_request import RunRequest
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db

LEAD = str(uuid.uuid5(NAMESPACE_GRAPH, "lead_agent"))


@pytest.fixture
def test_graphs(settings):
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": {
            **settings.DEERFLOW["GRAPHS"],
            "configured": "tests.runs.graphs:configured",
            "nested": "tests.runs.graphs:nested",
        },
    }


def _create(persona, **body):
    response = persona.client.post("/api/assistants", {"graph_id": "lead_agent", **body}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def test_every_user_sees_the_system_assistant_of_each_graph(owner, other):
    for persona in (owner, other):
        found = persona.client.post("/api/assistants/search", {"graph_id": "lead_agent"}, format="json").json()
        assert [a["assistant_id"] for a in found] == [LEAD]
        assert found[0]["metadata"] == {"created_by": "system"}
        assert (found[0]["name"], found[0]["version"]) == ("lead_agent", 1)
        assert persona.client.get("/api/assistants/lead_agent").json()["assistant_id"] == LEAD
        assert persona.client.get(f"/api/assistants/{LEAD}").json()["graph_id"] == "lead_agent"
        versions = persona.client.post(f"/api/assistants/{LEAD}/versions", {}, format="json").json()
        assert [v["version"] for v in versions] == [1]
    assert Assistant.objects.filter(owner__isnull=True).count() == 1


def test_system_assistants_are_read_only(owner):
    for response in (
        owner.client.patch(f"/api/assistants/{LEAD}", {"metadata": {"x": 1}}, format="json"),
        owner.client.delete(f"/api/assistants/{LEAD}"),
        owner.client.post(f"/api/assistants/{LEAD}/latest", {"version": 1}, format="json"),
    ):
        assert response.status_code == 404
        assert "system assistant of graph 'lead_agent'" in response.json()["detail"]
    system = Assistant.objects.get(pk=LEAD)
    assert (system.version, system.metadata) == (1, {"created_by": "system"})


def test_create_patch_versions_and_latest(owner):
    created = _create(
        owner,
        name="Helper",
        description="first",
        config={"configurable": {"model": "a"}, "tags": ["t1"]},
        context={"tone": "warm"},
        metadata={"team": "x"},
    )
    aid = created["assistant_id"]
    assert uuid.UUID(aid) and created["version"] == 1
    assert created["config"] == {"configurable": {"model": "a"}, "tags": ["t1"]}
    assert (created["context"], created["name"], created["description"]) == ({"tone": "warm"}, "Helper", "first")

    patched = owner.client.patch(
        f"/api/assistants/{aid}", {"config": {"configurable": {"model": "b"}}, "metadata": {"v": 2}}, format="json"
    ).json()
    assert patched["version"] == 2
    assert patched["config"] == {"configurable": {"model": "b"}}
    assert patched["metadata"] == {"team": "x", "v": 2}  # merged
    assert (patched["context"], patched["name"], patched["description"]) == ({"tone": "warm"}, "Helper", "first")

    versions = owner.client.post(f"/api/assistants/{aid}/versions", {}, format="json").json()
    assert [v["version"] for v in versions] == [2, 1]
    assert versions[1]["config"]["configurable"] == {"model": "a"}
    filtered = owner.client.post(f"/api/assistants/{aid}/versions", {"metadata": {"v": 2}}, format="json").json()
    assert [v["version"] for v in filtered] == [2]

    back = owner.client.post(f"/api/assistants/{aid}/latest", {"version": 1}, format="json").json()
    assert (back["version"], back["config"]["configurable"], back["metadata"]) == (1, {"model": "a"}, {"team": "x"})
    assert owner.client.get(f"/api/assistants/{aid}").json()["version"] == 1
    by_query = owner.client.post(f"/api/assistants/{aid}/latest?version=2")
    assert by_query.status_code == 200 and by_query.json()["version"] == 2
    # A patch after going back saves a new version past the highest, never over one.
    owner.client.post(f"/api/assistants/{aid}/latest", {"version": 1}, format="json")
    assert owner.client.patch(f"/api/assistants/{aid}", {"name": "Renamed"}, format="json").json()["version"] == 3
    missing = owner.client.post(f"/api/assistants/{aid}/latest", {"version": 9}, format="json")
    assert missing.status_code == 404 and "Version 9 not found" in missing.json()["detail"]
    assert owner.client.post(f"/api/assistants/{aid}/latest", {}, format="json").status_code == 422


def test_another_users_assistant_is_404_everywhere_and_never_listed(owner, other):
    aid = _create(owner, name="private", metadata={"k": "v"})["assistant_id"]
    for response in (
        other.client.get(f"/api/assistants/{aid}"),
        other.client.patch(f"/api/assistants/{aid}", {"name": "stolen"}, format="json"),
        other.client.delete(f"/api/assistants/{aid}"),
        other.client.post(f"/api/assistants/{aid}/versions", {}, format="json"),
        other.client.post(f"/api/assistants/{aid}/latest", {"version": 1}, format="json"),
        other.client.get(f"/api/assistants/{aid}/graph"),
        other.client.get(f"/api/assistants/{aid}/schemas"),
        other.client.get(f"/api/assistants/{aid}/subgraphs"),
    ):
        assert response.status_code == 404, response.content
    assert other.client.post("/api/assistants/search", {"metadata": {"k": "v"}}, format="json").json() == []
    assert other.client.post("/api/assistants/count", {"name": "private"}, format="json").json() == 0
    assert other.client.post("/api/assistants/count", {}, format="json").json() == 1  # the system one
    assert owner.client.post("/api/assistants/count", {}, format="json").json() == 2
    # The id is taken: the other user cannot create it, with either if_exists.
    for if_exists in ("raise", "do_nothing"):
        clash = other.client.post(
            "/api/assistants", {"graph_id": "lead_agent", "assistant_id": aid, "if_exists": if_exists}, format="json"
        )
        assert clash.status_code == 409
    assert Assistant.objects.get(pk=aid).name == "private"


def test_if_exists(owner):
    aid = str(uuid.uuid4())
    first = _create(owner, assistant_id=aid, name="one")
    assert first["assistant_id"] == aid
    again = owner.client.post("/api/assistants", {"graph_id": "lead_agent", "assistant_id": aid}, format="json")
    assert again.status_code == 409 and again.json() == {"detail": f"Assistant {aid} already exists"}
    same = _create(owner, assistant_id=aid, name="two", if_exists="do_nothing")
    assert same["name"] == "one"
    system = owner.client.post("/api/assistants", {"graph_id": "lead_agent", "assistant_id": LEAD}, format="json")
    assert system.status_code == 409
    assert AssistantVersion.objects.filter(assistant_id=aid).count() == 1


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"graph_id": "no-such-graph"}, 404, "Graph 'no-such-graph' not found. Expected one of: ['lead_agent']"),
        ({"graph_id": "lead_agent", "assistant_id": "not-a-uuid"}, 422, "assistant_id: Invalid assistant ID"),
        ({"graph_id": "lead_agent", "config": []}, 422, "config: must be an object"),
        ({"graph_id": "lead_agent", "config": {"configurable": {"api_key": "x"}}}, 422, "looks like a secret"),
        ({"graph_id": "lead_agent", "config": {"recursion_limit": 0}}, 422, "recursion_limit"),
        ({"graph_id": "lead_agent", "metadata": {"created_by": "system"}}, 422, "metadata.created_by"),
        ({"graph_id": "lead_agent", "name": 7}, 422, "name"),
        ({"graph_id": 3}, 422, "graph_id"),
        ({}, 422, "graph_id"),
    ],
)
def test_bad_create_is_4xx_and_writes_nothing(owner, body, status, needle):
    response = owner.client.post("/api/assistants", body, format="json")
    assert response.status_code == status, response.json()
    assert needle in response.json()["detail"]
    assert not Assistant.objects.filter(owner=owner.user).exists()


def test_unknown_graph_on_patch_is_404_and_keeps_the_version(owner):
    aid = _create(owner)["assistant_id"]
    response = owner.client.patch(f"/api/assistants/{aid}", {"graph_id": "nope"}, format="json")
    assert response.status_code == 404
    assert AssistantVersion.objects.filter(assistant_id=aid).count() == 1


def test_search_filters_sorts_selects_and_pages(owner):
    for name in ("bravo", "Alpha", "charlie"):
        _create(owner, name=name, metadata={"suite": "s", "name": name})
    names = lambda body: [  # noqa: E731
        a["name"] for a in owner.client.post("/api/assistants/search", body, format="json").json()
    ]
    assert names({"metadata": {"suite": "s"}, "sort_by": "name", "sort_order": "asc"}) == ["Alpha", "bravo", "charlie"]
    assert names({"metadata": {"suite": "s"}, "sort_by": "name", "sort_order": "desc"}) == ["charlie", "bravo", "Alpha"]
    assert names({"name": "ALP"}) == ["Alpha"]
    assert names({"metadata": {"suite": "s"}})[0] == "charlie"  # newest first by default
    page = owner.client.post(
        "/api/assistants/search",
        {"metadata": {"suite": "s"}, "limit": 2, "sort_by": "name", "sort_order": "asc", "select": ["name"]},
        format="json",
    )
    assert page.json() == [{"name": "Alpha"}, {"name": "bravo"}]
    assert (page["X-Pagination-Total"], page["X-Pagination-Next"]) == ("3", "2")
    last = owner.client.post("/api/assistants/search", {"metadata": {"suite": "s"}, "offset": 2}, format="json")
    assert "X-Pagination-Next" not in last
    assert owner.client.post("/api/assistants/count", {"metadata": {"suite": "s"}}, format="json").json() == 3
    bad = owner.client.post("/api/assistants/search", {"select": ["nope"]}, format="json")
    assert bad.status_code == 422


@pytest.mark.django_db(transaction=True)  # thread deletes reach the saver's own connection
def test_delete_cascades_versions_and_deletes_threads_only_when_asked(owner, other):
    kept = _create(owner)["assistant_id"]
    gone = _create(owner)["assistant_id"]
    t_kept, t_gone, t_meta = (
        ThreadMeta.objects.create(thread_id=f"as-{uuid.uuid4().hex[:12]}", owner=owner.user) for _ in range(3)
    )
    ThreadMeta.objects.filter(pk=t_meta.pk).update(metadata={"assistant_id": gone})
    foreign = ThreadMeta.objects.create(
        thread_id=f"as-{uuid.uuid4().hex[:12]}", owner=other.user, metadata={"assistant_id": gone}
    )
    for thread, aid in ((t_kept, kept), (t_gone, gone)):
        Run.objects.create(
            run_id=uuid.uuid4().hex,
            thread=thread,
            owner=owner.user,
            assistant_id="lead_agent",
            status="success",
            kwargs={"assistant_id": aid},
        )

    assert owner.client.delete(f"/api/assistants/{kept}").status_code == 204
    assert ThreadMeta.objects.filter(pk=t_kept.pk).exists()
    assert not AssistantVersion.objects.filter(assistant_id=kept).exists()
    assert owner.client.get(f"/api/assistants/{kept}").status_code == 404

    assert owner.client.delete(f"/api/assistants/{gone}?delete_threads=true").status_code == 204
    assert not ThreadMeta.objects.filter(pk__in=[t_gone.pk, t_meta.pk]).exists()
    assert ThreadMeta.objects.filter(pk=foreign.pk).exists()  # another user's thread is never touched


@pytest.mark.django_db(transaction=True)
def test_delete_threads_cancels_their_unfinished_runs_then_deletes_them(owner):
    aid = _create(owner)["assistant_id"]
    idle, busy = (ThreadMeta.objects.create(thread_id=f"as-{uuid.uuid4().hex[:12]}", owner=owner.user) for _ in "ab")
    for thread, state in ((idle, "success"), (busy, "queued")):
        Run.objects.create(
            run_id=uuid.uuid4().hex,
            thread=thread,
            owner=owner.user,
            assistant_id="lead_agent",
            status=state,
            kwargs={"assistant_id": aid},
        )
    assert owner.client.delete(f"/api/assistants/{aid}?delete_threads=true").status_code == 204
    assert not ThreadMeta.objects.filter(pk__in=[idle.pk, busy.pk]).exists()
    assert not Run.objects.filter(owner=owner.user).exists()
    assert not Assistant.objects.filter(pk=aid).exists()


def test_graph_schemas_and_subgraphs_use_the_assistants_graph(owner, test_graphs):
    aid = _create(owner, graph_id="nested")["assistant_id"]
    flat = owner.client.get(f"/api/assistants/{aid}/graph").json()
    assert {n["id"] for n in flat["nodes"]} == {"__start__", "child", "__end__"}
    deep = owner.client.get(f"/api/assistants/{aid}/graph?xray=true").json()
    assert "child:grandchild:leaf" in {n["id"] for n in deep["nodes"]}
    one_level = owner.client.get(f"/api/assistants/{aid}/graph?xray=1").json()
    assert "child:grandchild" in {n["id"] for n in one_level["nodes"]}
    assert owner.client.get(f"/api/assistants/{aid}/graph?xray=maybe").status_code == 422

    assert set(owner.client.get(f"/api/assistants/{aid}/subgraphs").json()) == {"child"}
    every = owner.client.get(f"/api/assistants/{aid}/subgraphs?recurse=true").json()
    assert set(every) == {"child", "child|grandchild"}
    assert "input_schema" in every["child|grandchild"]
    assert set(owner.client.get(f"/api/assistants/{aid}/subgraphs/child").json()) == {"child"}
    deeper = owner.client.get(f"/api/assistants/{aid}/subgraphs/child|grandchild?recurse=true").json()
    assert set(deeper) == {"child|grandchild"}
    assert owner.client.get("/api/assistants/lead_agent/subgraphs").json() == {}
    schemas = owner.client.get(f"/api/assistants/{aid}/schemas").json()
    assert schemas["graph_id"] == "nested" and "state_schema" in schemas


class Opaque:
    """A state value pydantic has no schema for."""


def test_a_schema_pydantic_cannot_express_is_null_and_logged_once_a_graph(caplog):
    """The SDK asks for a graph's schemas on every assistant it lists: a traceback each time flooded the log."""

    class State(TypedDict):
        value: Opaque

    builder = StateGraph(State)
    builder.add_node("step", lambda state: {})
    builder.set_entry_point("step")
    graph = builder.compile(name=f"opaque-{uuid.uuid4().hex[:6]}")
    with caplog.at_level(logging.WARNING, logger="runs.api.assistants"):
        first, again = graph_schemas(graph), graph_schemas(graph)
    assert first == again
    assert first["input_schema"] is first["output_schema"] is first["state_schema"] is None
    assert first["context_schema"] is None and first["config_schema"] is not None  # those two have nothing opaque
    logged = [record.getMessage() for record in caplog.records]
    assert len(logged) == 3, logged  # input, output and state once each, not again on the second call
    assert all(message.startswith(f"graph {graph.name}: its ") for message in logged)
    assert "Unable to generate pydantic-core schema" in logged[0]


def test_the_assistants_settings_go_under_the_runs_own():
    assistant = ResolvedAssistant(
        "a", "configured", 3, {"configurable": {"model": "m1", "temperature": 1}, "tags": ["a"]}, {"tone": "warm"}
    )
    merged = RunRequest("a", config={"configurable": {"model": "m2"}}, context={"lang": "fr"}).with_assistant(assistant)
    assert merged.assistant_id == "configured"
    assert merged.config == {"configurable": {"model": "m2", "temperature": 1}, "tags": ["a"]}
    assert merged.context == {"tone": "warm", "lang": "fr"}
    bare = RunRequest("a").with_assistant(ResolvedAssistant("a", "g", 1, {}, {}))
    assert (bare.config, bare.context) == ({}, None)


@pytest.mark.django_db(transaction=True)
async def test_a_run_of_a_users_assistant_runs_its_graph_with_its_settings(owner, other, test_graphs):
    from channels.db import database_sync_to_async as db

    from deerflow_site import lifecycle
    from deerflow_site.asgi import application

    created = await db(_create)(
        owner,
        graph_id="configured",
        config={"configurable": {"model": "m1", "temperature": 1}, "tags": ["from-assistant"]},
        context={"tone": "warm"},
    )
    aid = created["assistant_id"]
    body = {
        "assistant_id": aid,
        "input": {"messages": [{"role": "user", "content": "hi"}]},
        "config": {"configurable": {"model": "m2"}},
        "context": {"lang": "fr"},
    }
    transport = httpx.ASGITransport(app=application)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver/api") as client:
            headers = {"x-api-key": owner.key}
            values = (await client.post("/runs/wait", json={**body, "on_completion": "keep"}, headers=headers)).json()
            seen = json.loads(values["messages"][-1]["content"])
            assert seen == {"lang": "fr", "model": "m2", "temperature": 1, "tags": ["from-assistant"], "tone": "warm"}
            run = await db(Run.objects.get)(owner=owner.user)
            assert (run.assistant_id, run.kwargs["assistant_id"], run.kwargs["assistant_version"]) == (
                "configured",
                aid,
                1,
            )
            listed = (await client.get(f"/threads/{run.thread_id}/runs/{run.run_id}", headers=headers)).json()
            assert listed["assistant_id"] == aid
            foreign = await client.post("/runs", json=body, headers={"x-api-key": other.key})
            assert foreign.status_code == 404 and foreign.json() == {"detail": f"Assistant {aid} not found"}
    finally:
        await lifecycle.shutdown()
    assert not await db(Run.objects.filter(owner=other.user).exists)()
