"""Custom auth from langgraph.json (``auth.path``): start-up checks, identity, handler semantics, the WebSocket.

The project is tests/fixtures/custom_auth: ``Authorization: Bearer
<user>:<org>`` names the caller; threads are stamped with and scoped by
``org_id`` metadata. Driven through the real app (DRF's test client for
HTTP, Channels' communicator for the WebSocket) on SQLite or PostgreSQL.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from deerflow_site.config import parse_config
from deerflow_site.custom_auth import route_action
from deerflow_site.services import api_key_create

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "fixtures" / "custom_auth"
TIMEOUT = 10


def sources_of(langgraph_json: Path, tmp_path: Path):
    return parse_config({"langgraph_json": str(langgraph_json)}, source=tmp_path / "c.yaml").graph_sources()


def serve(settings, tmp_path, name: str = "langgraph.json"):
    """Serve the fixture project's custom auth (``name`` picks the variant) in this process."""
    settings.DEERFLOW = {**settings.DEERFLOW, "AUTH": sources_of(PROJECT / name, tmp_path).auth}


def bearer(token: str) -> APIClient:
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def custom(settings, tmp_path):
    serve(settings, tmp_path)


# -- start-up ----------------------------------------------------------------------------


def project(tmp_path: Path, auth_py: str, auth: dict) -> Path:
    (tmp_path / "auth.py").write_text("from langgraph_sdk import Auth\n" + auth_py)
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps({"graphs": {}, "auth": auth}))
    return path


AUTHENTICATE = "auth = Auth()\n@auth.authenticate\nasync def who(authorization):\n    return 'x'\n"


@pytest.mark.backend_free
@pytest.mark.parametrize(
    ("auth_py", "auth", "named"),
    [
        (AUTHENTICATE, {"path": "./missing.py:auth"}, "auth.path: "),
        (AUTHENTICATE, {"path": "./auth.py:nobody"}, "auth.py:nobody names nothing, not a langgraph_sdk.Auth"),
        (AUTHENTICATE, {"path": "not a path"}, "auth.path: must be './path/to/file.py:attr'"),
        ("auth = Auth()\n", {"path": "./auth.py:auth"}, "has no @auth.authenticate handler"),
        ("raise RuntimeError('boom')\n", {"path": "./auth.py:auth"}, "cannot be imported: RuntimeError: boom"),
        (
            "auth = Auth()\n@auth.authenticate\nasync def who(body):\n    return 'x'\n",
            {"path": "./auth.py:auth"},
            "@auth.authenticate asks for body",
        ),
        (
            AUTHENTICATE + "@auth.on(resources='store', actions='create')\nasync def a(ctx, value):\n    return None\n",
            {"path": "./auth.py:auth"},
            "@auth.on.store.create is not supported yet",
        ),
        (
            AUTHENTICATE
            + "@auth.on(resources='crons', actions='create_run')\nasync def c(ctx, value):\n    return None\n",
            {"path": "./auth.py:auth"},
            "@auth.on.crons.create_run is not supported yet",
        ),
        (AUTHENTICATE, {"path": "./auth.py:auth", "allow_langsmith_api_keys": True}, "auth.allow_langsmith_api_keys"),
        (AUTHENTICATE, {"path": "./auth.py:auth", "cache": {"ttl_seconds": -1}}, "auth.cache ttl_seconds"),
    ],
)
def test_a_bad_auth_stops_start_up_with_one_line_naming_it(tmp_path, auth_py, auth, named):
    with pytest.raises(ImproperlyConfigured, match=re.escape(named)) as refused:
        sources_of(project(tmp_path, auth_py, auth), tmp_path)
    assert "\n" not in str(refused.value)


@pytest.mark.backend_free
def test_handlers_for_threads_and_the_wildcards_load(tmp_path):
    auth_py = AUTHENTICATE + (
        "@auth.on\nasync def every(ctx, value):\n    return False\n"
        "@auth.on.threads.read\nasync def r(ctx, value):\n    return None\n"
        "@auth.on(resources='*', actions=['read'])\nasync def reads(ctx, value):\n    return None\n"
    )
    loaded = sources_of(project(tmp_path, auth_py, {"path": "./auth.py:auth"}), tmp_path).auth
    assert loaded is not None and loaded.params == {"authorization"}


def test_every_api_route_maps_to_a_resource_and_action_or_is_public():
    from deerflow_site.custom_auth import IDENTITY_ONLY_ROUTES, PUBLIC_ROUTES
    from tests.test_isolation_matrix import api_routes

    unmapped = []
    for route, methods in api_routes():
        from django.urls import resolve

        path = "/" + re.sub(r"<(?:str|path):\w+>", "x", route)
        name = resolve(path).url_name
        if name in PUBLIC_ROUTES or name in IDENTITY_ONLY_ROUTES:
            continue
        unmapped += [f"{m.upper()} {route}" for m in methods if route_action(name, m.upper()) is None]
    # A route unmapped would answer 403 to everyone under custom auth (fail closed): map each new one.
    assert unmapped == []


# -- identity ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_handler_is_the_only_identity_api_keys_and_sessions_are_no_way_around_it(custom, admin_client):
    _, key = api_key_create(username="keyholder")
    assert APIClient(HTTP_X_API_KEY=key).post("/api/threads", {}, format="json").status_code == 401
    assert admin_client.post("/api/threads/search", {}, format="json").status_code == 401
    answer = APIClient().get("/api/threads/x")
    assert (answer.status_code, answer.json()) == (401, {"detail": "Send Authorization: Bearer <user>:<org>"})
    assert APIClient().get("/api/ok").status_code == 200  # public routes stay public


@pytest.mark.django_db
def test_a_handler_that_raises_is_a_401_with_a_detail_never_a_way_in(custom):
    answer = bearer("explodes:acme").post("/api/threads", {}, format="json")
    assert (answer.status_code, answer.json()) == (401, {"detail": "Authentication failed"})


@pytest.mark.django_db
def test_an_identity_is_a_user_created_on_first_sight_without_a_usable_password(custom):
    assert bearer("newcomer:acme").post("/api/threads", {}, format="json").status_code == 200
    user = get_user_model().objects.get(username="newcomer")
    assert not user.has_usable_password() and not user.is_staff


@pytest.mark.django_db
def test_an_identity_naming_a_staff_account_is_refused(custom, admin_user):
    answer = bearer(f"{admin_user.username}:acme").post("/api/threads/search", {}, format="json")
    assert answer.status_code == 403 and "detail" in answer.json()


# -- handler semantics -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_metadata_the_create_handler_adds_is_stored_and_wins_over_the_clients(custom):
    created = bearer("alice:acme").post("/api/threads", {"metadata": {"org_id": "globex", "a": 1}}, format="json")
    thread = created.json()
    assert thread["metadata"] == {"org_id": "acme", "created_by": "alice", "a": 1}
    assert bearer("eve:globex").get(f"/api/threads/{thread['thread_id']}").status_code == 404


@pytest.mark.django_db
def test_a_handler_returning_false_denies_with_403_and_changes_nothing(settings, tmp_path):
    serve(settings, tmp_path, "langgraph.no_delete.json")
    thread_id = bearer("alice:acme").post("/api/threads", {}, format="json").json()["thread_id"]
    answer = bearer("alice:acme").delete(f"/api/threads/{thread_id}")
    assert (answer.status_code, answer.json()) == (403, {"detail": "Forbidden"})
    assert bearer("alice:acme").get(f"/api/threads/{thread_id}").status_code == 200


@pytest.mark.django_db
def test_an_authorization_handler_that_raises_is_a_403(settings, tmp_path):
    auth_py = AUTHENTICATE + "@auth.on.threads.search\nasync def s(ctx, value):\n    raise KeyError('bug')\n"
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "AUTH": sources_of(project(tmp_path, auth_py, {"path": "./auth.py:auth"}), tmp_path).auth,
    }
    answer = bearer("x").post("/api/threads/search", {}, format="json")
    assert answer.status_code == 403 and "handler failed" in answer.json()["detail"]


@pytest.mark.django_db
def test_a_filter_outside_the_language_fails_closed(settings, tmp_path):
    auth_py = AUTHENTICATE + "@auth.on.threads\nasync def s(ctx, value):\n    return {'org': {'$ne': 'x'}}\n"
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "AUTH": sources_of(project(tmp_path, auth_py, {"path": "./auth.py:auth"}), tmp_path).auth,
    }
    answer = bearer("x").post("/api/threads/count", {}, format="json")
    assert answer.status_code == 500 and "invalid filter" in answer.json()["detail"]


@pytest.mark.django_db
def test_a_wildcard_deny_holds_on_every_resource(settings, tmp_path):
    auth_py = AUTHENTICATE + "@auth.on\nasync def deny(ctx, value):\n    return False\n"
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "AUTH": sources_of(project(tmp_path, auth_py, {"path": "./auth.py:auth"}), tmp_path).auth,
    }
    for path in ("/api/assistants/search", "/api/runs/crons/search", "/api/store/items/search", "/api/threads/search"):
        assert bearer("x").post(path, {}, format="json").status_code == 403, path


@pytest.mark.django_db
def test_the_cache_asks_the_handler_once_per_credential_within_its_ttl(settings, tmp_path):
    auth_py = (
        "calls = []\nauth = Auth()\n@auth.authenticate\nasync def who(authorization):\n"
        "    calls.append(authorization)\n    return authorization.split()[-1]\n"
    )
    path = project(tmp_path, auth_py, {"path": "./auth.py:auth", "cache": {"cache_keys": ["Authorization"]}})
    loaded = sources_of(path, tmp_path).auth
    settings.DEERFLOW = {**settings.DEERFLOW, "AUTH": loaded}
    for token in ("one", "one", "two", "one"):
        assert bearer(token).post("/api/threads/count", {}, format="json").status_code == 200
    assert loaded.authenticate.__globals__["calls"] == ["Bearer one", "Bearer two"]


# -- the WebSocket ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_the_protocol_websocket_takes_its_identity_and_scope_from_the_handler(custom, runtime):
    from channels.db import database_sync_to_async as db
    from channels.testing import WebsocketCommunicator

    from deerflow_site.asgi import application
    from runs.consumers import CLOSE_UNAUTHENTICATED

    thread_id = (await db(lambda: bearer("alice:acme").post("/api/threads", {}, format="json"))()).json()["thread_id"]

    async def state_get(token: str | None):
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        socket = WebsocketCommunicator(application, f"/api/threads/{thread_id}/stream/events", headers=headers)
        await socket.connect(TIMEOUT)
        if token is None or token.startswith("explodes"):
            message = await socket.receive_output(TIMEOUT)
            await socket.disconnect()
            return message.get("code")
        await socket.send_json_to({"id": 1, "method": "state.get", "params": {}})
        answer = await socket.receive_json_from(TIMEOUT)
        await socket.disconnect()
        return answer.get("error") or answer["type"]

    assert await state_get(None) == CLOSE_UNAUTHENTICATED
    assert await state_get("explodes:acme") == CLOSE_UNAUTHENTICATED
    assert await state_get("bob:acme") == "success"
    assert await state_get("eve:globex") == "no_such_thread"


OPENAPI = {
    "securitySchemes": {"OrgToken": {"type": "http", "scheme": "bearer", "description": "Bearer <user>:<org>"}},
    "security": [{"OrgToken": []}],
}


@pytest.mark.django_db
def test_auth_openapi_is_what_the_schema_documents(settings, tmp_path, anonymous):
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "AUTH": sources_of(
            project(tmp_path, AUTHENTICATE, {"path": "./auth.py:auth", "openapi": OPENAPI}), tmp_path
        ).auth,
    }
    schema = anonymous.get("/api/openapi.json").json()
    assert schema["components"]["securitySchemes"] == OPENAPI["securitySchemes"]
    assert schema["paths"]["/api/threads"]["post"]["security"] == OPENAPI["security"]
    assert "OrgToken" not in str(schema["paths"]["/api/ok"]["get"].get("security", [{}]))


@pytest.mark.parametrize(
    "openapi",
    [{"securitySchemes": []}, {"security": {"OrgToken": []}}, {"schemes": {}}, "bearer"],
    ids=["schemes-not-object", "security-not-list", "unknown-key", "not-object"],
)
def test_a_malformed_auth_openapi_stops_start_up_naming_it(tmp_path, openapi):
    with pytest.raises(ImproperlyConfigured, match=r"auth\.openapi"):
        sources_of(project(tmp_path, AUTHENTICATE, {"path": "./auth.py:auth", "openapi": openapi}), tmp_path)
