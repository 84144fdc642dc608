"""The isolation matrix again, under custom auth: every /api route × persona, with a handler deciding access.

tests/fixtures/custom_auth scopes threads by ``org_id`` metadata. Personas:
the owner (alice of acme), a colleague of the same org (bob: the org's
threads are his too), a stranger of another org (eve of globex: every object
route answers as for a missing id, lists and counts never show the org's
rows) and no credentials (401 everywhere but the public routes). The routes
and bodies come from tests/test_isolation_matrix.py, so a new route is in
both. Then one test per known leak of other servers: the LangGraph
Platform's advisory GHSA-747p-c922-m55f and Aegra's #485, #488 and #490.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from rest_framework.test import APIClient

from deerflow_site.config import parse_config
from tests.test_isolation_matrix import (
    COLLECTION,
    CRON_BODY,
    ELSEWHERE,
    ENVELOPE,
    MATRIX,
    OBJECT,
    PUBLIC,
    RUN_BODY,
    STATE_UPDATE,
    Case,
    _shape,
    api_routes,
    body_of,
    call,
    fill,
    snapshot,
)

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT = Path(__file__).resolve().parent / "fixtures" / "custom_auth"


class Caller:
    """A persona of the fixture's auth: ``Authorization: Bearer <user>:<org>``."""

    def __init__(self, user: str, org: str) -> None:
        self.client = APIClient(HTTP_AUTHORIZATION=f"Bearer {user}:{org}")
        self.username = user

    @property
    def user(self):
        from django.contrib.auth import get_user_model

        return get_user_model().objects.get(username=self.username)


def serve(settings, tmp_path, name: str) -> None:
    found = parse_config({"langgraph_json": str(PROJECT / name)}, source=tmp_path / "c.yaml").graph_sources()
    settings.DEERFLOW = {**settings.DEERFLOW, "AUTH": found.auth}


@pytest.fixture
def custom(settings, tmp_path):
    serve(settings, tmp_path, "langgraph.json")


@pytest.fixture
def alice(custom) -> Caller:
    return Caller("alice", "acme")


@pytest.fixture
def world(alice):
    """Alice's thread (stamped acme) with a checkpoint and a run, her assistant, cron and store item."""
    from runs.services.admission import run_admit
    from threads.models import ThreadMeta

    client = alice.client
    thread = client.post("/api/threads", {"metadata": {"who": "owner"}}, format="json").json()["thread_id"]
    written = client.post(f"/api/threads/{thread}/state", STATE_UPDATE | {"values": {"title": "mine"}}, format="json")
    assert written.status_code == 200, written.content
    run, _ = run_admit(
        owner=alice.user,
        thread=ThreadMeta.objects.get(pk=thread),
        assistant_id="lead_agent",
        strategy="enqueue",
        metadata={},
        kwargs={},
    )
    feedback = client.put(f"/api/threads/{thread}/runs/{run.run_id}/feedback", {"rating": 1}, format="json")
    assert feedback.status_code == 200, feedback.content
    assistant = client.post("/api/assistants", {"graph_id": "lead_agent", "name": "mine"}, format="json").json()
    cron = client.post(f"/api/threads/{thread}/runs/crons", CRON_BODY, format="json").json()
    stored = client.put(
        "/api/store/items", {"namespace": ["private"], "key": "k", "value": {"who": "owner"}}, format="json"
    )
    assert stored.status_code in (200, 204), stored.content
    project = client.post("/api/projects", {"name": "mine"}, format="json")
    return {
        "thread": thread,
        "project": project.json()["project_id"] if project.status_code == 200 else str(uuid.uuid4()),
        "checkpoint": written.json()["checkpoint"]["checkpoint_id"],
        "run": run.run_id,
        "feedback": feedback.json()["feedback_id"],
        "assistant": assistant["assistant_id"],
        "cron": cron["cron_id"],
        "namespace": "matrix-namespace",
    }


def test_a_stranger_of_another_org_and_no_credentials_reach_nothing_of_the_orgs(alice, world):
    stranger, anonymous = Caller("eve", "globex").client, APIClient()
    before = snapshot(alice, world)
    owned = {v for k, v in world.items() if k != "namespace"}
    problems = []
    for route, methods in api_routes():
        # A route missing from the matrix fails tests/test_isolation_matrix.py; here it is left to that test.
        case = MATRIX.get(route)
        if case is None or case.kind == ELSEWHERE:
            continue
        path = fill(route, world)
        for method in methods:
            body = body_of(case, method, world)
            answer = call(anonymous, method, path, body)
            if (case.kind == PUBLIC) != (answer.status_code != 401):
                problems.append(f"no credentials: {method.upper()} {path} -> {answer.status_code}")
            if case.kind == PUBLIC or not case.other:
                continue
            answer = call(stranger, method, path, body)
            text = answer.content.decode(errors="replace") if not answer.streaming else ""
            if case.kind == OBJECT and answer.status_code != 404:
                problems.append(f"stranger: {method.upper()} {path} -> {answer.status_code} {text[:200]}")
            elif case.kind == ENVELOPE and answer.json().get("error") != "no_such_thread":
                problems.append(f"stranger: {method.upper()} {path} -> {text[:200]}")
            elif case.kind == COLLECTION and answer.status_code >= 500:
                problems.append(f"stranger: {method.upper()} {path} -> {answer.status_code}")
            sent = path + json.dumps(body)
            if leaked := [i for i in owned if i in text and i not in sent]:
                problems.append(f"stranger: {method.upper()} {path} shows the org's {leaked}: {text[:200]}")
            if case.kind == OBJECT and answer.status_code == 404:
                absent = {k: str(uuid.uuid4()) for k in world}
                missing = call(stranger, method, fill(route, absent), body_of(case, method, absent))
                if missing.status_code != 404 or _shape(missing.content, absent) != _shape(answer.content, world):
                    problems.append(f"stranger: {method.upper()} {path}: its 404 differs from a missing id's")
    assert problems == [], "\n".join(problems)
    assert snapshot(alice, world) == before


# Thread routes a colleague reads (streams and joins left out: they wait for a run no worker runs here).
COLLEAGUE_READS = [
    ("get", "api/threads/<str:thread_id>"),
    ("get", "api/threads/<str:thread_id>/state"),
    ("get", "api/threads/<str:thread_id>/state/<str:checkpoint_id>"),
    ("post", "api/threads/<str:thread_id>/history"),
    ("get", "api/threads/<str:thread_id>/storage"),
    ("get", "api/threads/<str:thread_id>/runs"),
    ("get", "api/threads/<str:thread_id>/runs/<str:run_id>"),
    ("get", "api/threads/<str:thread_id>/messages"),
    ("get", "api/threads/<str:thread_id>/token-usage"),
    ("get", "api/threads/<str:thread_id>/runs/<str:run_id>/feedback"),
    ("get", "api/runs/<str:run_id>/feedback"),
]


def test_a_colleague_of_the_same_org_reads_the_orgs_threads(alice, world):
    bob = Caller("bob", "acme").client
    for method, route in COLLEAGUE_READS:
        answer = call(bob, method, fill(route, world), body_of(MATRIX[route], method, world))
        assert answer.status_code == 200, (method, route, answer.content[:200])
    # Her assistant, cron and Store item stay hers: those resources are keyed by identity.
    assert bob.get(f"/api/assistants/{world['assistant']}").status_code == 404


def test_searches_and_counts_show_each_persona_exactly_its_scope(alice, world):
    mine = {world["thread"]}
    for caller, expected in ((alice, mine), (Caller("bob", "acme"), mine), (Caller("eve", "globex"), set())):
        found = caller.client.post("/api/threads/search", {"limit": 100}, format="json")
        assert {t["thread_id"] for t in found.json()} == expected
        assert found["X-Pagination-Total"] == str(len(expected))
        assert caller.client.post("/api/threads/count", {}, format="json").json() == len(expected)


async def post(client: APIClient, path: str, body: dict):
    """A request from an async test, which runs the run worker on its loop (``runtime``)."""
    from channels.db import database_sync_to_async

    return await database_sync_to_async(client.post)(path, body, format="json")


async def test_a_colleague_runs_on_the_orgs_thread_and_the_handler_stamps_the_run(alice, closing_savers, runtime):
    thread_id = (await post(alice.client, "/api/threads", {})).json()["thread_id"]
    bob = Caller("bob", "acme").client
    started = await post(bob, f"/api/threads/{thread_id}/runs/wait", RUN_BODY | {"metadata": {"org_id": "x"}})
    assert started.status_code == 200, started.content
    runs = (await database_sync_to_async(bob.get)(f"/api/threads/{thread_id}/runs")).json()
    assert [r["metadata"]["org_id"] for r in runs] == ["acme"]


async def test_a_thread_a_run_creates_lands_in_the_callers_scope(alice, closing_savers, runtime):
    thread_id = str(uuid.uuid4())
    started = await post(alice.client, f"/api/threads/{thread_id}/runs/wait", RUN_BODY | {"if_not_exists": "create"})
    assert started.status_code == 200, started.content
    bob, eve = Caller("bob", "acme").client, Caller("eve", "globex").client
    assert (await database_sync_to_async(bob.get)(f"/api/threads/{thread_id}")).json()["metadata"]["org_id"] == "acme"
    assert (await database_sync_to_async(eve.get)(f"/api/threads/{thread_id}")).status_code == 404


async def test_graphs_get_the_authenticated_user_in_configurable(alice, closing_savers, runtime):
    from runs.models import Run

    thread_id = (await post(alice.client, "/api/threads", {})).json()["thread_id"]
    started = await post(alice.client, f"/api/threads/{thread_id}/runs/wait", RUN_BODY)
    assert started.status_code == 200, started.content
    configurable = (await Run.objects.aget(thread_id=thread_id)).kwargs["config"]["configurable"]
    assert configurable["langgraph_auth_user"]["identity"] == "alice"
    assert configurable["langgraph_auth_user"]["org_id"] == "acme"
    assert configurable["langgraph_auth_permissions"] == ["org:acme"]


# -- the known leaks of other servers, one test each -------------------------------------------


def test_ghsa_747p_c922_m55f_the_filter_bounds_every_probe_a_search_can_make(alice, world):
    """A stranger's search cannot reach the org's rows through its own filters: not by metadata the
    handler wrote, not by state values (whose mirror refresh reads heads), not in the total."""
    eve = Caller("eve", "globex").client
    for body in (
        {"metadata": {"created_by": "alice"}},
        {"metadata": {"org_id": "acme"}},
        {"values": {"title": "mine"}},
        {"ids": [world["thread"]]},
        {"status": "idle"},
    ):
        found = eve.post("/api/threads/search", body, format="json")
        assert (found.json(), found["X-Pagination-Total"]) == ([], "0"), body
        assert eve.post("/api/threads/count", body, format="json").json() == 0, body
    assert alice.client.post("/api/threads/count", {"values": {"title": "mine"}}, format="json").json() == 1


def test_aegra_485_the_filter_applies_to_by_id_reads_and_deletes(alice, world):
    eve = Caller("eve", "globex").client
    assert eve.get(f"/api/threads/{world['thread']}").status_code == 404
    assert eve.delete(f"/api/threads/{world['thread']}").status_code == 404
    assert (
        eve.patch(f"/api/threads/{world['thread']}", {"metadata": {"org_id": "globex"}}, format="json").status_code
        == 404
    )
    assert alice.client.get(f"/api/threads/{world['thread']}").json()["metadata"]["org_id"] == "acme"


def test_aegra_488_a_deny_all_handler_is_dispatched_on_every_route(settings, tmp_path):
    """State, history, run, stream and stateless-run routes included: each asks a handler, none is open."""
    (tmp_path / "auth.py").write_text(
        "from langgraph_sdk import Auth\nauth = Auth()\n"
        "@auth.authenticate\nasync def who(authorization):\n    return 'someone'\n"
        "@auth.on\nasync def deny(ctx, value):\n    return False\n"
    )
    (tmp_path / "langgraph.json").write_text(json.dumps({"graphs": {}, "auth": {"path": "./auth.py:auth"}}))
    found = parse_config({"langgraph_json": str(tmp_path / "langgraph.json")}, source=tmp_path / "c.yaml")
    settings.DEERFLOW = {**settings.DEERFLOW, "AUTH": found.graph_sources().auth}
    client = APIClient(HTTP_AUTHORIZATION="Bearer anything")
    kinds = ("thread", "checkpoint", "run", "assistant", "cron", "project", "feedback")
    ids = {k: str(uuid.uuid4()) for k in kinds} | {"namespace": "n"}
    open_routes = []
    for route, methods in api_routes():
        case = MATRIX.get(route, Case(OBJECT))  # a route new to the matrix is asked too
        if case.kind == PUBLIC or route in ("api/info", "api/metrics"):  # an identity's, about no resource
            continue
        for method in methods:
            answer = call(client, method, fill(route, ids), body_of(case, method, ids))
            if answer.status_code != 403:
                open_routes.append(f"{method.upper()} {route} -> {answer.status_code}")
    assert open_routes == []


def test_aegra_490_search_count_and_get_apply_every_operator_of_the_filter(settings, tmp_path):
    serve(settings, tmp_path, "langgraph.shared.json")
    ann = Caller("ann", "acme").client
    shared = ann.post("/api/threads", {"metadata": {"shared_with": ["carol", "x"]}}, format="json").json()["thread_id"]
    private = ann.post("/api/threads", {"metadata": {"shared_with": "carol"}}, format="json").json()["thread_id"]
    # carol (another org) is named in one thread's list; a bare string is not a list holding her.
    for caller, expected in (
        (Caller("carol", "globex").client, {shared}),
        (Caller("dave", "globex").client, set()),
        (Caller("ben", "acme").client, {shared, private}),
    ):
        found = caller.post("/api/threads/search", {"limit": 100}, format="json")
        assert {t["thread_id"] for t in found.json()} == expected
        assert caller.post("/api/threads/count", {}, format="json").json() == len(expected)
        for thread_id in (shared, private):
            assert (caller.get(f"/api/threads/{thread_id}").status_code == 200) == (thread_id in expected)


# -- assistants and crons under their own handlers -------------------------------------------


def test_assistant_and_cron_handlers_share_them_within_the_org_and_nowhere_else(settings, tmp_path):
    serve(settings, tmp_path, "langgraph.org_shared.json")
    alice, bob, eve = (Caller(u, o).client for u, o in (("alice", "acme"), ("bob", "acme"), ("eve", "globex")))
    thread = alice.post("/api/threads", {}, format="json").json()["thread_id"]
    created = alice.post("/api/assistants", {"graph_id": "lead_agent", "metadata": {"org_id": "forged"}}, format="json")
    assert created.status_code == 200, created.content
    assistant = created.json()
    assert assistant["metadata"]["org_id"] == "acme"  # the create handler's stamp wins over the body's
    cron = alice.post(f"/api/threads/{thread}/runs/crons", CRON_BODY, format="json").json()
    assert cron["metadata"]["org_id"] == "acme"

    assert bob.get(f"/api/assistants/{assistant['assistant_id']}").status_code == 200
    assert eve.get(f"/api/assistants/{assistant['assistant_id']}").status_code == 404
    users = {"metadata": {"org_id": "acme"}}
    assert [a["assistant_id"] for a in bob.post("/api/assistants/search", users, format="json").json()] == [
        assistant["assistant_id"]
    ]
    assert eve.post("/api/assistants/search", users, format="json").json() == []
    assert eve.post("/api/assistants/count", users, format="json").json() == 0
    assert [c["cron_id"] for c in bob.post("/api/runs/crons/search", {}, format="json").json()] == [cron["cron_id"]]
    assert eve.post("/api/runs/crons/search", {}, format="json").json() == []
    assert eve.post("/api/runs/crons/count", {}, format="json").json() == 0
    # The graphs served stay everyone's: a stranger still finds and reads the system assistant.
    assert eve.get("/api/assistants/lead_agent").status_code == 200
    # A stranger's delete finds nothing; the org's colleague's does.
    assert eve.delete(f"/api/assistants/{assistant['assistant_id']}").status_code == 404
    assert bob.delete(f"/api/runs/crons/{cron['cron_id']}").status_code in (200, 204)
    assert alice.post("/api/runs/crons/count", {}, format="json").json() == 0


def test_a_store_handler_rewrites_namespaces_and_refuses_what_it_refuses(settings, tmp_path):
    serve(settings, tmp_path, "langgraph.store_scoped.json")
    alice, eve = Caller("alice", "acme").client, Caller("eve", "globex").client
    put = alice.put("/api/store/items", {"namespace": ["notes"], "key": "k", "value": {"v": 1}}, format="json")
    assert put.status_code == 204, put.content
    # The handler prefixed the org: the item is at ("acme", "notes"), read back through either spelling.
    for spelling in ("notes", "acme.notes"):
        item = alice.get("/api/store/items", {"namespace": spelling, "key": "k"}).json()
        assert (item["namespace"], item["value"]) == (["acme", "notes"], {"v": 1}), spelling
    found = alice.post("/api/store/items/search", {"namespace_prefix": []}, format="json").json()["items"]
    assert [(i["namespace"], i["key"]) for i in found] == [(["acme", "notes"], "k")]
    listed = alice.post("/api/store/namespaces", {}, format="json").json()["namespaces"]
    assert listed == [["acme", "notes"]]
    # Another org's caller, asking for the same spelling, reads under its own org (and its own root).
    assert eve.get("/api/store/items", {"namespace": "acme.notes", "key": "k"}).json() is None
    # The delete handler's refusal is a 403, and the item stays.
    archived = {"namespace": ["archive"], "key": "a", "value": {"v": 2}}
    assert alice.put("/api/store/items", archived, format="json").status_code == 204
    refused = alice.delete("/api/store/items", {"namespace": ["archive"], "key": "a"}, format="json")
    assert refused.status_code == 403 and refused.json()["detail"]
    assert alice.get("/api/store/items", {"namespace": "archive", "key": "a"}).json()["value"] == {"v": 2}
    assert alice.delete("/api/store/items", {"namespace": ["notes"], "key": "k"}, format="json").status_code == 204
    assert alice.get("/api/store/items", {"namespace": "notes", "key": "k"}).json() is None


async def test_the_orgs_colleague_cancels_and_prunes_its_thread_and_a_stranger_reaches_neither(
    alice, world, closing_savers, runtime
):
    from runs.models import Run

    bob, eve = Caller("bob", "acme").client, Caller("eve", "globex").client
    cancel = {"thread_id": world["thread"]}
    prune = {"thread_ids": [world["thread"]], "strategy": "delete"}
    assert (await database_sync_to_async(eve.post)("/api/runs/cancel", cancel, format="json")).status_code == 404
    assert (await database_sync_to_async(eve.post)("/api/threads/prune", prune, format="json")).status_code == 404
    assert (await Run.objects.aget(pk=world["run"])).status == "pending"

    assert (await database_sync_to_async(bob.post)("/api/runs/cancel", cancel, format="json")).status_code == 204
    assert (await Run.objects.aget(pk=world["run"])).status == "interrupted"
    pruned = await database_sync_to_async(bob.post)("/api/threads/prune", prune, format="json")
    assert pruned.status_code == 200, pruned.content
    assert (await database_sync_to_async(alice.client.get)(f"/api/threads/{world['thread']}")).status_code == 404
