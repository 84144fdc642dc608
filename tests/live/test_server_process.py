"""The server as a process: clean shutdown, the memory backend, static admin assets."""

from __future__ import annotations

import re
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from langgraph_sdk import get_client

from tests.conftest import API_SERVER_POOL_SIZE
from tests.live.server import LiveServer, _admin_url

pytestmark = pytest.mark.live


@pytest.mark.backend_free  # a SQLite server in either pass
def test_sigterm_stops_the_server_promptly(tmp_path):
    server = LiveServer(tmp_path).setup().start()
    assert httpx.get(f"{server.url}/ok").status_code == 200
    # A run: the async savers and the async Store (whose batch task runs) are open at shutdown.
    headers = {"x-api-key": server.api_key("alice")}
    thread = httpx.post(f"{server.url}/threads", json={}, headers=headers).json()["thread_id"]
    body = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    assert httpx.post(f"{server.url}/threads/{thread}/runs/wait", json=body, headers=headers, timeout=30).is_success
    # uvicorn ends a graceful shutdown by re-raising the signal it caught: the
    # code alone cannot tell it from a kill, the log says the runtime was closed.
    assert server.stop(timeout=10) == -signal.SIGTERM
    log = server.log()
    assert "runtime stopped" in log
    assert "Task was destroyed but it is pending" not in log  # LangGraph's Store batch task is stopped, not dropped


@pytest.mark.backend_free
def test_a_runtime_that_cannot_start_stops_the_server_saying_why(tmp_path):
    (tmp_path / "data" / "deerflow.db").mkdir(parents=True)  # a folder where the database file belongs
    server = LiveServer(tmp_path)
    with pytest.raises(RuntimeError, match="server exited with 3"):
        server.start()  # raises as soon as the process has exited, without answering /ok
    log = server.log()
    assert "the runtime did not start" in log
    assert "unable to open database file" in log


@pytest.mark.backend_free
async def test_memory_backend_serves_the_api_from_one_process(tmp_path):
    server = LiveServer(tmp_path, config={"database": {"backend": "memory"}}).start()
    try:
        key = re.search(r"API key\s*:\s*(\S+)", server.log()).group(1)
        client = get_client(url=server.url, api_key=key)
        thread = await client.threads.create(metadata={"m": 1})
        assert (await client.threads.get(thread["thread_id"]))["metadata"] == {"m": 1}
        values = await client.runs.wait(thread["thread_id"], "lead_agent", input={"messages": [("user", "in memory")]})
        assert values["messages"][-1]["content"] == "echo: in memory"
        history = await client.threads.get_history(thread["thread_id"], limit=100)
        assert len(history) == 3
        info = await client.http.get("/info")
        assert info["checkpoints"]["backend"] == "memory"
    finally:
        server.stop()


def test_admin_login_page_and_its_static_files_are_served(api_server):
    root = api_server.url.removesuffix("/api")
    page = httpx.get(f"{root}/admin/login/")
    assert page.status_code == 200
    css = re.search(r'href="(/static/admin/css/[^"]+)"', page.text).group(1)
    assert httpx.get(f"{root}{css}").status_code == 200


def test_openapi_schema_and_docs_page(api_server):
    key = api_server.api_key("alice")
    schema = httpx.get(f"{api_server.url}/openapi.json", headers={"x-api-key": key})
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/threads/search" in paths and "/api/threads/{thread_id}/history" in paths
    docs = httpx.get(f"{api_server.url}/docs", headers={"x-api-key": key})
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


@pytest.mark.postgres_only
def test_a_busy_server_holds_no_more_connections_than_its_pool_size_allows(api_server):
    """``database.postgres_pool_size`` caps each of the process's three pools (Django's, the savers' two)."""
    key = api_server.api_key("alice")
    database = urlsplit(api_server.database_url).path[1:]
    held: list[int] = []
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect(_admin_url(api_server.database_url), autocommit=True) as conn:
            while not done.is_set():
                held.append(
                    conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [database]).fetchone()[0]
                )
                done.wait(0.02)

    def turn(n: int) -> int:
        with httpx.Client(base_url=api_server.url, headers={"x-api-key": key}, timeout=60) as client:
            thread = client.post("/threads", json={"metadata": {"n": n}}).json()["thread_id"]
            body = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": f"turn {n}"}]}}
            answers = [client.post(f"/threads/{thread}/runs/wait", json=body)]
            answers += [client.get(f"/threads/{thread}/state"), client.post(f"/threads/{thread}/history", json={})]
            answers.append(client.post("/threads/search", json={"metadata": {"n": n}}))
            return sum(answer.status_code != 200 for answer in answers)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(24) as pool:
            failures = sum(pool.map(turn, range(48)))
    finally:
        done.set()
        sampler.join()
    assert failures == 0  # every request waited for a connection, none was refused
    assert held and max(held) <= 3 * API_SERVER_POOL_SIZE, max(held)
