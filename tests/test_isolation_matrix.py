"""Every /api route and both WebSockets × personas, generated from the URL confs: a new route fails here until it is in the matrix.

Personas: the owner of every object, another user, no credentials, and the
owner's own revoked key. Object routes answer another user exactly as they
answer an id that does not exist (404, or a protocol-v2 ``no_such_thread``
envelope); collection routes never show the owner's objects; no credentials
and a revoked key are a 401 everywhere but the public routes. Afterwards
the owner's objects are exactly as they were: another user's writes changed
nothing. The owner's GET of each object kind proves the ids are real, so a
404 cannot come from a badly filled path.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from deerflow_site.models import ApiKey
from deerflow_site.services import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)

PUBLIC = "public"  # answers without credentials (a revoked key is still refused)
OBJECT = "object"  # another user's object: 404 like a missing one
ENVELOPE = "envelope"  # protocol-v2 commands: HTTP 200, error no_such_thread
COLLECTION = "collection"  # lists, searches, counts and creations of one's own: never the owner's objects
ELSEWHERE = "elsewhere"  # an endless stream: covered by the live test named in the reason


@dataclass(frozen=True)
class Case:
    kind: str
    bodies: dict[str, Any] = field(default_factory=dict)  # method -> JSON body (or query for GET/DELETE)
    reason: str = ""
    other: bool = True  # False: another user's call only starts and waits on a run of their own


STATE_UPDATE = {"values": {"title": "written by someone else"}, "as_node": "agent"}
RUN_BODY = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}
CRON_BODY = {"assistant_id": "lead_agent", "schedule": "0 0 * * *"}

# Keyed by the URL conf's route; the methods are the view's. Bodies are valid for the owner.
MATRIX: dict[str, Case] = {
    "api/ok": Case(PUBLIC),
    "api/info": Case(COLLECTION),
    "api/metrics": Case(COLLECTION),  # counts of the whole deployment: no object of anyone's
    "api/openapi.json": Case(PUBLIC),
    "api/docs": Case(PUBLIC),
    "api/threads": Case(COLLECTION, {"post": {}}),
    "api/threads/search": Case(COLLECTION, {"post": {"limit": 100}}),
    "api/threads/count": Case(COLLECTION, {"post": {}}),
    "api/threads/prune": Case(COLLECTION, {"post": {"thread_ids": ["{thread}"], "strategy": "delete"}}),
    "api/threads/<str:thread_id>": Case(OBJECT, {"patch": {"metadata": {"who": "other"}}}),
    "api/threads/<str:thread_id>/copy": Case(OBJECT, {"post": {}}),
    "api/threads/<str:thread_id>/state": Case(OBJECT, {"post": STATE_UPDATE}),
    "api/threads/<str:thread_id>/state/checkpoint": Case(
        OBJECT, {"post": {"checkpoint": {"checkpoint_id": "{checkpoint}"}}}
    ),
    "api/threads/<str:thread_id>/state/<str:checkpoint_id>": Case(OBJECT, {"post": STATE_UPDATE}),
    "api/threads/<str:thread_id>/history": Case(OBJECT, {"post": {"limit": 5}}),
    "api/threads/<str:thread_id>/storage": Case(OBJECT),
    "api/threads/<str:thread_id>/goal": Case(
        COLLECTION,
        {"put": {"objective": "theirs"}},
        reason="PUT creates the thread when the id is free (DeerFlow's T8); another user's is 404 to every method",
    ),
    "api/threads/<str:thread_id>/compact": Case(OBJECT, {"post": {"keep": {"type": "messages", "value": 0}}}),
    "api/threads/<str:thread_id>/move": Case(OBJECT, {"post": {"project_id": None}}),
    "api/threads/<str:thread_id>/runs/edit-regenerate/prepare": Case(
        OBJECT, {"post": {"human_message_id": "m1", "replacement_text": "x"}}
    ),
    "api/projects": Case(COLLECTION, {"post": {"name": "theirs"}}),
    "api/projects/<str:project_id>": Case(OBJECT, {"patch": {"name": "theirs", "archived": True}}),
    "api/assistants": Case(COLLECTION, {"post": {"graph_id": "lead_agent"}}),
    "api/assistants/search": Case(COLLECTION, {"post": {"limit": 100}}),
    "api/assistants/count": Case(COLLECTION, {"post": {}}),
    "api/assistants/<str:assistant_id>": Case(OBJECT, {"patch": {"metadata": {"who": "other"}}}),
    "api/assistants/<str:assistant_id>/graph": Case(OBJECT),
    "api/assistants/<str:assistant_id>/schemas": Case(OBJECT),
    "api/assistants/<str:assistant_id>/subgraphs": Case(OBJECT),
    "api/assistants/<str:assistant_id>/subgraphs/<path:namespace>": Case(OBJECT),
    "api/assistants/<str:assistant_id>/versions": Case(OBJECT, {"post": {}}),
    "api/assistants/<str:assistant_id>/latest": Case(OBJECT, {"post": {"version": 1}}),
    "api/threads/<str:thread_id>/commands": Case(ENVELOPE, {"post": {"id": 1, "method": "state.get", "params": {}}}),
    "api/threads/<str:thread_id>/stream/events": Case(
        ELSEWHERE,
        reason="tests/live/test_thread_stream_sdk.py::test_a_stream_opened_before_its_thread_exists_gets_the_"
        "first_run_and_nobody_else_does (another user: 200 and heartbeats only, as for a missing id)",
    ),
    "api/threads/<str:thread_id>/stream": Case(OBJECT),
    "api/threads/<str:thread_id>/runs": Case(OBJECT, {"post": RUN_BODY}),
    "api/threads/<str:thread_id>/runs/crons": Case(OBJECT, {"post": CRON_BODY}),
    "api/threads/<str:thread_id>/runs/stream": Case(OBJECT, {"post": RUN_BODY}),
    "api/threads/<str:thread_id>/runs/wait": Case(OBJECT, {"post": RUN_BODY}),
    "api/threads/<str:thread_id>/runs/regenerate/prepare": Case(OBJECT, {"post": {}}),
    "api/threads/<str:thread_id>/branches": Case(OBJECT, {"post": {"message_id": "m1"}}),
    "api/threads/<str:thread_id>/runs/<str:run_id>": Case(OBJECT),
    "api/threads/<str:thread_id>/runs/<str:run_id>/cancel": Case(OBJECT, {"post": {}}),
    "api/threads/<str:thread_id>/runs/<str:run_id>/join": Case(OBJECT),
    "api/threads/<str:thread_id>/runs/<str:run_id>/stream": Case(OBJECT),
    "api/threads/<str:thread_id>/runs/<str:run_id>/messages": Case(OBJECT),
    "api/threads/<str:thread_id>/runs/<str:run_id>/events": Case(OBJECT),
    "api/threads/<str:thread_id>/runs/<str:run_id>/feedback": Case(
        OBJECT, {"put": {"rating": -1, "comment": "theirs"}, "post": {"rating": -1}}
    ),
    "api/threads/<str:thread_id>/runs/<str:run_id>/feedback/stats": Case(OBJECT),
    "api/threads/<str:thread_id>/runs/<str:run_id>/feedback/<str:feedback_id>": Case(OBJECT),
    "api/runs/<str:run_id>/feedback": Case(OBJECT),
    "api/threads/<str:thread_id>/messages": Case(OBJECT),
    "api/threads/<str:thread_id>/messages/page": Case(OBJECT),
    "api/threads/<str:thread_id>/token-usage": Case(OBJECT),
    "api/runs": Case(COLLECTION, {"post": RUN_BODY}, other=False),
    # Stateless runs of the caller's own (started, streamed, awaited): nothing of the owner's is reachable,
    # and they need a running worker, which this in-process test has not.
    "api/runs/stream": Case(COLLECTION, {"post": RUN_BODY}, other=False),
    "api/runs/wait": Case(COLLECTION, {"post": RUN_BODY}, other=False),
    "api/runs/batch": Case(COLLECTION, {"post": [RUN_BODY]}, other=False),
    "api/runs/cancel": Case(COLLECTION, {"post": {"thread_id": "{thread}", "run_ids": ["{run}"]}}),
    "api/runs/crons": Case(COLLECTION, {"post": CRON_BODY}),
    "api/runs/crons/search": Case(COLLECTION, {"post": {"limit": 100}}),
    "api/runs/crons/count": Case(COLLECTION, {"post": {}}),
    "api/runs/crons/<str:cron_id>": Case(OBJECT, {"patch": {"enabled": False}}),
    "api/store/items": Case(
        COLLECTION,
        {
            "get": {"namespace": "private", "key": "k"},
            "put": {"namespace": ["private"], "key": "k", "value": {"who": "other"}},
            "delete": {"namespace": ["private"], "key": "k"},
        },
    ),
    "api/store/items/search": Case(COLLECTION, {"post": {"namespace_prefix": ["private"]}}),
    "api/store/namespaces": Case(COLLECTION, {"post": {}}),
    # A2A: another user's assistant is a 404 like a missing one; another user's task on a shared
    # assistant is JSON-RPC's -32001 like a missing one (tests/live/test_a2a.py).
    "api/a2a/<str:assistant_id>": Case(
        OBJECT, {"post": {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "{run}"}}}
    ),
    "api/.well-known/agent-card.json": Case(OBJECT, {"get": {"assistant_id": "{assistant}"}}),
    # MCP: another user's tools/list never names the owner's assistant; sessions and resumed streams
    # of another user are the 404 of an unknown one (tests/live/test_mcp.py).
    "api/mcp": Case(COLLECTION, {"post": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}}),
}


def api_routes() -> list[tuple[str, list[str]]]:
    """Every route under api/ with the HTTP methods its view implements."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern), pattern.callback

    routes = []
    for route, callback in walk(get_resolver().url_patterns):
        if route.startswith("api/"):
            view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
            allowed = getattr(callback, "view_initkwargs", {}).get("http_method_names", view.http_method_names)
            methods = [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m) and m in allowed]
            routes.append((route, methods))
    return routes


def test_every_api_route_is_in_the_matrix():
    routes = {route for route, _ in api_routes()}
    assert routes - set(MATRIX) == set(), "add these routes to the isolation matrix"
    assert set(MATRIX) - routes == set(), "these matrix entries name no route any more"


@pytest.fixture
def world(owner):
    """The owner's thread with a checkpoint, a run (with the owner's feedback), an assistant, a cron and a store item; their ids."""
    client = owner.client
    thread = client.post("/api/threads", {"metadata": {"who": "owner"}}, format="json").json()["thread_id"]
    written = client.post(f"/api/threads/{thread}/state", STATE_UPDATE | {"values": {"title": "mine"}}, format="json")
    assert written.status_code == 200, written.content
    checkpoint = written.json()["checkpoint"]["checkpoint_id"]
    run = _admit_run(owner, thread)
    feedback = client.put(f"/api/threads/{thread}/runs/{run.run_id}/feedback", {"rating": 1}, format="json")
    assert feedback.status_code == 200, feedback.content
    assistant = client.post("/api/assistants", {"graph_id": "lead_agent", "name": "mine"}, format="json").json()
    cron = client.post(f"/api/threads/{thread}/runs/crons", CRON_BODY, format="json").json()
    stored = client.put(
        "/api/store/items", {"namespace": ["private"], "key": "k", "value": {"who": "owner"}}, format="json"
    )
    assert stored.status_code in (200, 204), stored.content
    return {
        "thread": thread,
        "checkpoint": checkpoint,
        "run": run.run_id,
        "feedback": feedback.json()["feedback_id"],
        "assistant": assistant["assistant_id"],
        "cron": cron["cron_id"],
        "project": client.post("/api/projects", {"name": "mine"}, format="json").json()["project_id"],
    }


def _admit_run(owner, thread_id: str):
    """A pending run of the owner's thread, admitted by the real admission service (no worker runs it here)."""
    from runs.services.admission import run_admit
    from threads.models import ThreadMeta

    run, _ = run_admit(
        owner=owner.user,
        thread=ThreadMeta.objects.get(pk=thread_id),
        assistant_id="lead_agent",
        strategy="enqueue",
        metadata={},
        kwargs={},
    )
    return run


def fill(route: str, ids: dict[str, str]) -> str:
    path = "/" + route
    for param, key in (
        ("<str:thread_id>", "thread"),
        ("<str:checkpoint_id>", "checkpoint"),
        ("<str:run_id>", "run"),
        ("<str:assistant_id>", "assistant"),
        ("<path:namespace>", "namespace"),
        ("<str:cron_id>", "cron"),
        ("<str:project_id>", "project"),
        ("<str:feedback_id>", "feedback"),
    ):
        if param in path:
            path = path.replace(param, ids[key])
    return path


def body_of(case: Case, method: str, ids: dict[str, str]):
    def sub(value):
        if isinstance(value, str) and value.startswith("{") and value.endswith("}") and value[1:-1] in ids:
            return ids[value[1:-1]]
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return value

    return sub(case.bodies.get(method, {}))


def call(client: APIClient, method: str, path: str, body):
    if method == "get" and isinstance(body, dict):
        return client.get(path, body)
    return getattr(client, method)(path, body, format="json")  # a DELETE's body too, as the SDKs send it


def snapshot(owner, ids) -> dict[str, Any]:
    """What the owner sees of each object: must not change under another user's requests."""
    client = owner.client
    thread = client.get(f"/api/threads/{ids['thread']}").json()
    history = client.post(f"/api/threads/{ids['thread']}/history", {"limit": 1000}, format="json").json()
    return {
        "thread": (thread["metadata"], thread["status"]),
        "state": client.get(f"/api/threads/{ids['thread']}/state").json()["values"],
        "checkpoints": [h["checkpoint"]["checkpoint_id"] for h in history],
        "run": client.get(f"/api/threads/{ids['thread']}/runs/{ids['run']}").json()["status"],
        "feedback": client.get(f"/api/threads/{ids['thread']}/runs/{ids['run']}/feedback").json(),
        "assistant": client.get(f"/api/assistants/{ids['assistant']}").json()["metadata"],
        "cron": client.post("/api/runs/crons/search", {"limit": 100}, format="json").json(),
        "item": client.get("/api/store/items", {"namespace": "private", "key": "k"}).json()["value"],
    }


def test_another_user_no_credentials_and_a_revoked_key_reach_nothing_of_the_owners(owner, world):
    other = APIClient(HTTP_X_API_KEY=api_key_create(username=f"other-{uuid.uuid4().hex[:8]}")[1])
    anonymous = APIClient()
    _, revoked_key = api_key_create(username=owner.user.username, name="revoked")
    ApiKey.objects.filter(user=owner.user, name="revoked").update(revoked_at=timezone.now())
    revoked = APIClient(HTTP_X_API_KEY=revoked_key)
    ids = {**world, "namespace": "matrix-namespace"}
    before = snapshot(owner, ids)
    owned = set(world.values())

    problems = []
    for route, methods in api_routes():
        case = MATRIX[route]
        if case.kind == ELSEWHERE:
            continue
        path = fill(route, ids)
        for method in methods:
            body = body_of(case, method, ids)
            for name, client in (("no credentials", anonymous), ("revoked key", revoked)):
                answer = call(client, method, path, body)
                if case.kind != PUBLIC:
                    expected = answer.status_code == 401
                else:  # open to all; a bad credential may still be refused
                    expected = answer.status_code < 400 or (client is revoked and answer.status_code == 401)
                if not expected:
                    problems.append(f"{name}: {method.upper()} {path} -> {answer.status_code}")
            if case.kind == PUBLIC or not case.other:
                continue
            answer = call(other, method, path, body)
            text = answer.content.decode(errors="replace") if not answer.streaming else ""
            if case.kind == OBJECT and answer.status_code != 404:
                problems.append(f"other user: {method.upper()} {path} -> {answer.status_code} {text[:200]}")
            elif case.kind == ENVELOPE and answer.json().get("error") != "no_such_thread":
                problems.append(f"other user: {method.upper()} {path} -> {text[:200]}")
            elif case.kind == COLLECTION and answer.status_code >= 500:
                problems.append(f"other user: {method.upper()} {path} -> {answer.status_code}")
            sent = path + json.dumps(body)
            leaked = [i for i in owned if i in text and i not in sent]  # an answer may repeat what was asked
            if leaked:
                problems.append(f"other user: {method.upper()} {path} shows the owner's {leaked}: {text[:200]}")
            if case.kind == OBJECT and answer.status_code == 404:
                absent = {k: str(uuid.uuid4()) for k in ids}
                missing = call(other, method, fill(route, absent), body_of(case, method, absent))
                if missing.status_code != 404 or _shape(missing.content, absent) != _shape(answer.content, ids):
                    problems.append(f"other user: {method.upper()} {path}: its 404 differs from a missing id's")
    assert problems == [], "\n".join(problems)
    assert snapshot(owner, ids) == before


def _shape(content: bytes, ids: dict[str, str]) -> str:
    """A 404's text with the ids it names replaced by their kind: a missing id's 404 must read the same."""
    text = content.decode(errors="replace")
    for kind, value in ids.items():
        text = text.replace(value, f"<{kind}>")
    return text


def test_the_owner_reaches_every_object_kind_the_matrix_fills_in(owner, world):
    client, ids = owner.client, world
    for path in (
        f"/api/threads/{ids['thread']}",
        f"/api/threads/{ids['thread']}/state/{ids['checkpoint']}",
        f"/api/threads/{ids['thread']}/runs/{ids['run']}",
        f"/api/threads/{ids['thread']}/runs/{ids['run']}/feedback",
        f"/api/runs/{ids['run']}/feedback",
        f"/api/assistants/{ids['assistant']}",
        f"/api/runs/crons/{ids['cron']}",
    ):
        assert client.get(path).status_code == 200, path
    assert client.get("/api/store/items", {"namespace": "private", "key": "k"}).json()["value"] == {"who": "owner"}


# -- the WebSockets ------------------------------------------------------------------

RUN_SOCKET = "ws/threads/<str:thread_id>/runs/<str:run_id>"
PROTOCOL_SOCKET = "api/threads/<str:thread_id>/stream/events"
WS_MATRIX = {RUN_SOCKET, PROTOCOL_SOCKET}
TIMEOUT = 10


def test_every_websocket_route_is_in_the_matrix():
    from runs.routing import websocket_urlpatterns

    assert {str(p.pattern) for p in websocket_urlpatterns} == WS_MATRIX


async def test_both_websockets_refuse_strangers_and_answer_another_user_as_for_a_missing_id(owner, runtime):
    from channels.db import database_sync_to_async as db
    from channels.testing import WebsocketCommunicator

    from deerflow_site.asgi import application
    from runs.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED

    ids = await db(_seed_thread_and_run)(owner)
    _, other_key = await db(api_key_create)(username=f"other-{uuid.uuid4().hex[:8]}")
    _, revoked_key = await db(api_key_create)(username=owner.user.username, name="revoked-ws")
    await db(ApiKey.objects.filter(user=owner.user, name="revoked-ws").update)(revoked_at=timezone.now())

    def socket(route: str, key: str | None, values: dict[str, str]) -> WebsocketCommunicator:
        headers = [(b"x-api-key", key.encode())] if key else []
        return WebsocketCommunicator(application, fill(route, values), headers=headers)

    async def close_code(s: WebsocketCommunicator) -> int:
        message = await s.receive_output(TIMEOUT)
        assert message["type"] == "websocket.close", message
        return message.get("code", 1000)

    absent = {k: str(uuid.uuid4()) for k in ids}
    for route in sorted(WS_MATRIX):
        for key in (None, revoked_key):
            s = socket(route, key, ids)
            await s.connect(TIMEOUT)
            assert await close_code(s) == CLOSE_UNAUTHENTICATED, (route, key)
            await s.disconnect()
    for values in (ids, absent):  # another user's run, and a run that does not exist
        s = socket(RUN_SOCKET, other_key, values)
        await s.connect(TIMEOUT)
        assert await close_code(s) == CLOSE_NOT_FOUND
        await s.disconnect()
    answers = []
    for values in (ids, absent):  # another user's thread, and a thread that does not exist
        s = socket(PROTOCOL_SOCKET, other_key, values)
        await s.connect(TIMEOUT)
        await s.send_json_to({"id": 1, "method": "state.get", "params": {}})
        answer = await s.receive_json_from(TIMEOUT)
        answers.append(_shape(json.dumps(answer).encode(), values))
        await s.send_json_to({"id": 2, "method": "subscription.subscribe", "params": {"channels": ["values"]}})
        assert (await s.receive_json_from(TIMEOUT))["type"] == "success"
        assert await s.receive_nothing(0.5)  # the owner's log is not replayed to another user
        await s.disconnect()
    assert answers[0] == answers[1] and '"no_such_thread"' in answers[0]


def _seed_thread_and_run(owner) -> dict[str, str]:
    """The owner's thread, with a logged run: a replay to another user would show its events."""
    from threads.stream_log import PendingEvent, thread_stream_append

    thread = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]
    run = _admit_run(owner, thread)
    thread_stream_append(
        thread_id=thread, run_id=run.run_id, events=[PendingEvent(f"{run.run_id}:0", "values", [], {"secret": 1})]
    )
    return {"thread": thread, "run": run.run_id}


# -- protocol-v2 commands, on both transports ---------------------------------------

# Every command, with params the owner could send. ``run.start`` creates a missing thread, so only
# another user's thread is asked it (the answer must still be ``no_such_thread``).
COMMANDS: dict[str, dict[str, Any]] = {
    "run.start": {"assistant_id": "lead_agent", "input": None},
    "input.respond": {"interrupt_id": "i", "response": 1},
    "subscription.subscribe": {"channels": ["values"]},
    "subscription.unsubscribe": {"subscription_id": "s"},
    "subscription.reconnect": {"channels": ["values"], "since": 0},
    "agent.getTree": {},
    "state.get": {},
    "state.listCheckpoints": {},
    "state.fork": {"checkpoint_id": "{checkpoint}"},
}
CREATES_THE_THREAD = {"run.start"}


def test_every_protocol_command_is_in_the_matrix():
    from runs.api.commands import HANDLERS

    assert set(HANDLERS) == set(COMMANDS)


def _seed_protocol_thread(owner) -> dict[str, str]:
    """The owner's thread with a checkpoint, a run and a logged event: a leak would show its seq or ids."""
    from threads.stream_log import PendingEvent, thread_stream_append

    thread = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]
    written = owner.client.post(f"/api/threads/{thread}/state", STATE_UPDATE, format="json")
    assert written.status_code == 200, written.content
    run = _admit_run(owner, thread)
    events = [PendingEvent(f"{run.run_id}:{i}", "values", [], {"secret": i}) for i in range(17)]
    thread_stream_append(thread_id=thread, run_id=run.run_id, events=events)
    return {"thread": thread, "run": run.run_id, "checkpoint": written.json()["checkpoint"]["checkpoint_id"]}


def _commands(ids: dict[str, str], *, creating: bool) -> list[dict[str, Any]]:
    """Each command as an envelope (its id its place in ``COMMANDS``), with the ids filled in."""
    return [
        {"id": n, "method": m, "params": body_of(Case(ENVELOPE, {"p": params}), "p", ids)}
        for n, (m, params) in enumerate(COMMANDS.items())
        if creating or m not in CREATES_THE_THREAD
    ]


def _owned_rows() -> tuple[int, int]:
    """Threads and runs: a command of another user's must create neither (the owner's run may log meanwhile)."""
    from runs.models import Run
    from threads.models import ThreadMeta

    return ThreadMeta.objects.count(), Run.objects.count()


def test_every_command_answers_another_users_thread_as_it_answers_a_missing_one(owner, other):
    """HTTP: the same envelope, the same meta (no ``applied_through_seq`` of the owner's log), the same SQL."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    ids = _seed_protocol_thread(owner)
    absent = {k: str(uuid.uuid4()) for k in ids}
    rows = _owned_rows()
    for message in _commands(ids, creating=True):
        path = f"/api/threads/{ids['thread']}/commands"
        with CaptureQueriesContext(connection) as theirs:
            answer = other.client.post(path, message, format="json")
        assert answer.status_code == 200, answer.content
        if message["method"] in CREATES_THE_THREAD:
            assert answer.json()["error"] == "no_such_thread", answer.json()
            continue
        [missing_message] = [m for m in _commands(absent, creating=False) if m["id"] == message["id"]]
        with CaptureQueriesContext(connection) as nobodys:
            missing = other.client.post(f"/api/threads/{absent['thread']}/commands", missing_message, format="json")
        assert _envelope(answer.json(), ids) == _envelope(missing.json(), absent), message["method"]
        assert answer.json().get("meta", {}).get("applied_through_seq", 0) == 0, message["method"]
        assert _sql(theirs, ids) == _sql(nobodys, absent), message["method"]
        # The timing oracle: a lookup of the thread by id alone loads the owner's row, then compares.
        by_id_alone = [q for q in _sql(theirs, ids) if "threads_threadmeta" in q and _by_thread_alone(q)]
        assert by_id_alone == [], message["method"]
    assert _owned_rows() == rows


def _sql(captured, ids: dict[str, str]) -> list[str]:
    """The statements a request ran, with ids replaced by their kind and clock readings blanked."""
    return [
        re.sub(r"'\d{4}-\d\d-\d\d[ T][\d:.+]+'", "<now>", _shape(q["sql"].encode(), ids))
        for q in captured.captured_queries
    ]


def _by_thread_alone(sql: str) -> bool:
    """True for a statement whose condition names the thread but not its owner."""
    condition = sql.split(" WHERE ", 1)[-1] if " WHERE " in sql else ""
    return "<thread>" in condition and "owner_id" not in condition


def _envelope(answer: dict[str, Any], ids: dict[str, str]) -> str:
    """A command's answer with the ids it names replaced by their kind, and a fresh subscription's id blanked."""
    return re.sub(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "<new>",
        _shape(json.dumps(answer).encode(), ids),
    )


async def test_every_command_over_the_websocket_answers_another_users_thread_as_a_missing_one(owner, other, runtime):
    from channels.db import database_sync_to_async as db
    from channels.testing import WebsocketCommunicator

    from deerflow_site.asgi import application

    ids = await db(_seed_protocol_thread)(owner)
    absent = {k: str(uuid.uuid4()) for k in ids}
    rows = await db(_owned_rows)()
    answers = {}
    for name, values in (("theirs", ids), ("missing", absent)):
        s = WebsocketCommunicator(
            application, fill(PROTOCOL_SOCKET, values), headers=[(b"x-api-key", other.key.encode())]
        )
        await s.connect(TIMEOUT)
        said = []
        for message in _commands(values, creating=name == "theirs"):
            await s.send_json_to(message)
            said.append(_envelope(await s.receive_json_from(TIMEOUT), values))
        assert await s.receive_nothing(0.5)  # no event of the owner's log, live or replayed
        await s.disconnect()
        answers[name] = said
    created, *same = answers["theirs"]
    assert '"no_such_thread"' in created
    assert same == answers["missing"]
    assert all('"applied_through_seq": 0' in a for a in same if '"success"' in a)
    assert await db(_owned_rows)() == rows
