"""One backend for five stores: savers and Store open Django's own database."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from checkpoints.accessor import astate_accessor, state_accessor
from checkpoints.backend import current_backend
from checkpoints.runtime import aclose_async_resources, async_resources, sync_resources
from tests.helpers import run_turns

pytestmark = pytest.mark.django_db(transaction=True)


def test_backend_follows_djangos_default_database():
    backend = current_backend()
    assert backend.kind == ("postgres" if connection.vendor == "postgresql" else "sqlite")
    if backend.kind == "sqlite":
        assert backend.sqlite_path == connection.settings_dict["NAME"]
    else:
        assert f"dbname={connection.settings_dict['NAME']}" in backend.conninfo
        assert "password" not in backend.identity


def test_checkpoints_land_in_the_same_database_as_thread_metadata():
    thread_id = f"same-db-{uuid.uuid4().hex}"
    run_turns(thread_id, ["hi"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", [thread_id])
        assert cursor.fetchone()[0] == 3


def test_store_lands_in_the_same_database():
    store = sync_resources().store
    namespace = ("tests", uuid.uuid4().hex)
    store.put(namespace, "k", {"v": 1})
    assert store.get(namespace, "k").value == {"v": 1}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM store WHERE prefix = %s", [".".join(namespace)])
        assert cursor.fetchone()[0] == 1


async def test_async_twins_read_what_the_sync_twins_wrote():
    thread_id = f"twins-{uuid.uuid4().hex}"
    run_turns(thread_id, ["one", "two"])
    try:
        accessor = await astate_accessor("lead_agent")
        snapshot = await accessor.aget(thread_id)
        assert [m.content for m in snapshot.values["messages"]] == ["one", "echo: one", "two", "echo: two"]
        history = await accessor.ahistory(thread_id, limit=100)
        assert len(history) == 6
        resources = await async_resources()
        namespace = ("tests", uuid.uuid4().hex)
        await resources.store.aput(namespace, "k", {"v": 2})
        assert sync_resources().store.get(namespace, "k").value == {"v": 2}
    finally:
        await aclose_async_resources()


async def test_async_run_writes_are_visible_to_sync_readers():
    thread_id = f"arun-{uuid.uuid4().hex}"
    try:
        accessor = await astate_accessor("lead_agent", fresh_saver=True)
        await accessor.graph.ainvoke({"messages": [("user", "async hello")]}, accessor.config(thread_id))
    finally:
        await aclose_async_resources()
    messages = state_accessor("lead_agent").get(thread_id).values["messages"]
    assert [m.content for m in messages] == ["async hello", "echo: async hello"]
