"""The Agent Chat UI's calls, through the official JS SDK, against a real server set up as its README says.

The UI's setup form takes the API URL, ``lead_agent`` (or an assistant
UUID) and the key, and the server lists the UI's origin in
``cors.allow_origins``. ``js/agent_chat_ui.mjs`` drives both the SDK the
UI's ``^1.0.0`` resolves to at its oldest (1.0.0, which sends list-valued
query parameters as one JSON array) and the pinned 1.15.0.
"""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import ExitStack

import httpx
import pytest

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL

pytestmark = pytest.mark.live

UI_ORIGIN = "http://localhost:3000"
STRANGER = "http://localhost:3001"


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    """A server on this pass's backend that lists the UI's origin, as the UI's setup asks."""
    with ExitStack() as stack:
        database_url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        config = {"cors": {"allow_origins": [UI_ORIGIN]}}
        server = LiveServer(tmp_path_factory.mktemp("ui"), config=config, database_url=database_url).setup().start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def observed(js_sdks, ui_server) -> dict:
    env = {**os.environ, "DEERFLOW_URL": ui_server.url, "DEERFLOW_KEY": ui_server.api_key("alice")}
    result = subprocess.run(
        ["node", "agent_chat_ui.mjs"], cwd=js_sdks, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_approve_resumes_the_interrupt_with_an_empty_input_beside_the_command(observed):
    assert observed["approve"] == {"error": None, "last": "resumed: yes"}


def test_a_review_offers_the_inboxs_decisions_and_each_resumes_the_run(observed):
    reviews = observed["reviews"]
    # The request shape the UI's inbox renders with Approve / Edit / Reject (LangChain's HITLRequest).
    assert reviews["approve"]["request"] == {
        "action_requests": [
            {
                "name": "send_reply",
                "args": {"text": "a blunt draft"},
                "description": "Review the reply before it is sent.",
            }
        ],
        "review_configs": [{"action_name": "send_reply", "allowed_decisions": ["approve", "edit", "reject"]}],
    }
    assert {name: (r["error"], r["last"]) for name, r in reviews.items()} == {
        "approve": (None, "approved: a blunt draft"),
        "edit": (None, "edited: a kinder draft"),
        "reject": (None, "rejected: too blunt"),
    }


def test_threads_are_found_by_the_assistant_uuid_their_runs_used(observed):
    mine, system = observed["assistants"]["mine"], observed["assistants"]["system"]
    assert observed["by_uuid_metadata"] == {"graph_id": "lead_agent", "assistant_id": mine}
    # A run that creates its thread stamps the system assistant's id for a graph name.
    assert observed["created_by_run_metadata"] == {"graph_id": "lead_agent", "assistant_id": system}
    assert observed["created_by_run_thread"] in observed["search_system"]
    assert observed["by_uuid_thread"] in observed["search_mine"]
    assert observed["by_uuid_thread"] not in observed["search_system"]
    # Every run merges both keys into an existing thread: the latest run's assistant wins.
    assert observed["after_rerun_metadata"] == {"graph_id": "lead_agent", "assistant_id": system}


@pytest.mark.parametrize("sdk", ["ui", "client"])
def test_run_join_stream_takes_stream_mode_arrays(observed, sdk):
    joined = observed["run_join"][sdk]
    assert joined["error"] is None
    assert joined["events"][0] == "metadata"
    assert {"values", "messages"} <= set(joined["events"])
    assert joined["values"]["messages"][-1]["content"] == "echo: join me"


@pytest.mark.parametrize("sdk", ["ui", "client"])
def test_thread_join_stream_takes_stream_mode_arrays(observed, sdk):
    joined = observed["thread_join"][sdk]
    assert joined["error"] is None
    assert joined["events"][0] == "metadata" and joined["events"][-1] == "metadata"
    assert {"values", "messages"} <= set(joined["events"])


@pytest.mark.parametrize(
    ("route", "mode"), [("/threads/{t}/stream", "run_modes"), ("/threads/{t}/runs/{r}/stream", "values")]
)
@pytest.mark.parametrize(
    "query", ['stream_mode=["{m}","nope"]', "stream_mode={m},nope", "stream_mode={m}&stream_mode=nope"]
)
def test_join_streams_refuse_an_unknown_mode_in_every_form(ui_server, route, mode, query):
    headers = {"x-api-key": ui_server.api_key("alice")}
    with httpx.Client(base_url=ui_server.url, headers=headers, timeout=30) as http:
        thread_id = http.post("/threads", json={}).json()["thread_id"]
        run = http.post(f"/threads/{thread_id}/runs", json={"assistant_id": "lead_agent", "input": None}).json()
        answer = http.get(f"{route.format(t=thread_id, r=run['run_id'])}?{query.format(m=mode)}")
    assert answer.status_code == 422
    assert "unknown stream mode(s) nope" in answer.json()["detail"]


def test_a_preflight_from_an_unlisted_origin_is_refused_as_cors_not_as_a_bad_key(ui_server):
    asked = {"Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "x-api-key"}
    with httpx.Client(base_url=ui_server.url, timeout=30) as http:
        refused = [http.options("/info", headers={"Origin": STRANGER, **asked}) for _ in range(3)]
        allowed = http.options("/info", headers={"Origin": UI_ORIGIN, **asked})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == UI_ORIGIN
    for answer in refused:
        assert answer.status_code == 403
        assert "access-control-allow-origin" not in answer.headers
        assert "cors.allow_origins" in answer.json()["detail"] and STRANGER in answer.json()["detail"]
    log = (ui_server.workdir / f"server-{ui_server.port}.log").read_text(errors="replace")
    assert '"OPTIONS /api/info HTTP/1.1" 401' not in log
    # Said once per origin, naming the setting that would allow it.
    assert log.count(f"refused a CORS preflight from {STRANGER}") == 1
    assert "cors.allow_origins" in log.split(f"refused a CORS preflight from {STRANGER}", 1)[1].splitlines()[0]
