"""On SQLite a request and a run each keep one connection for their life, then close it (deerflow_site.db.db_async)."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import httpx
import pytest
from django.db.backends.signals import connection_created

from deerflow_site.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite_only]

BODY = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}


async def test_a_wait_opens_one_connection_for_its_request_and_one_for_its_run(owner, runtime):
    opened: list[object] = []

    def count(sender, connection, **kwargs):
        opened.append(connection.connection)

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1/api") as http:
        http.headers["x-api-key"] = owner.key
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        connection_created.connect(count, weak=False)
        try:
            answer = await http.post(f"/threads/{thread_id}/runs/wait", json=BODY)
        finally:
            connection_created.disconnect(count)

    assert answer.json()["messages"][-1]["content"] == "echo: hi"
    # Closed after every ORM call before, a /wait opened five: auth, thread lookup, admission, claim, the run.
    # Now: the request's, the claim's (unless the worker's thread still had one) and the run's.
    assert 2 <= len(opened) <= 3, len(opened)
    request, run = opened[0], opened[-1]
    assert _closed(request)  # request_finished closed it before the response ended
    deadline = time.monotonic() + 10
    while not _closed(run):  # the worker closes it once the run's task ends, just after the answer
        assert time.monotonic() < deadline, "the run's connection was never closed"
        await asyncio.sleep(0.02)


def _closed(raw) -> bool:
    try:
        raw.execute("SELECT 1")
    except sqlite3.ProgrammingError as exc:
        return "closed" in str(exc)
    return False
