"""On SQLite a request's and a run's threads are reused with their connections (core.sync_threads)."""

from __future__ import annotations

import httpx
import pytest
from django.db.backends.signals import connection_created

from deerflow_site.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite_only]

BODY = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}


async def test_a_wait_on_warm_threads_opens_no_connection(owner, runtime):
    opened: list[list[object]] = [[], []]
    wait = 0

    def count(sender, connection, **kwargs):
        opened[wait].append(connection.connection)

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1/api") as http:
        http.headers["x-api-key"] = owner.key
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        connection_created.connect(count, weak=False)
        try:
            first = await http.post(f"/threads/{thread_id}/runs/wait", json=BODY)
            wait = 1
            second = await http.post(f"/threads/{thread_id}/runs/wait", json=BODY)
        finally:
            connection_created.disconnect(count)

    assert first.json()["messages"][-1]["content"] == "echo: hi"
    assert second.json()["messages"][-1]["content"] == "echo: hi"
    # The first wait may start a thread for its run (the request's came warm from
    # the thread's creation): at most that one and the worker's claim thread.
    assert len(opened[0]) <= 2, opened[0]
    # Closed after every ORM call, a /wait once opened six; with a new thread per
    # request and run, still two to three. Warm, none.
    assert opened[1] == []
    # What the threads kept is open and usable.
    for raw in opened[0]:
        assert raw.execute("SELECT 1").fetchone() == (1,)
