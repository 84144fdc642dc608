"""``convert_checkpoints --to full``: a delta thread reads the same in a full-mode process afterwards.

The suite's process is frozen ``full``, so every HTTP read here is a
full-mode process reading; the delta side is read through an explicit-mode
accessor, as a delta process would (``tests.checkpoints.support``).
"""

from __future__ import annotations

import json
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command
from django.db import connection
from langchain_core.messages import HumanMessage
from langgraph.types import Command

import checkpoints.convert
from checkpoints.accessor import StateAccessor
from checkpoints.backend import current_backend
from checkpoints.encryption import thread_sealing_context
from checkpoints.graphs import GraphSpec, resolve_graph
from checkpoints.modes import metadata_uses_delta
from checkpoints.rollback import acapture, arestore
from checkpoints.runtime import aclose_async_resources, async_resources, close_sync_resources
from core.custom_encryption import fixed_scope, load
from runs.models import Run
from tests.checkpoints.support import OWN_DELTA_SPEC, accessor, invoke, new_thread_id
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _drop_the_threads_checkpoints():
    """Delete what these tests wrote to LangGraph's tables (Django's flush does not reach them).

    A converted 200-turn thread is tens of megabytes in full mode: left
    behind, it would be the largest thread of every later storage test.
    """
    yield
    saver = accessor("full").saver
    for thread_id in ThreadMeta.objects.values_list("thread_id", flat=True):
        saver.delete_thread(thread_id)


# Long enough for several snapshots (every FREQUENCY checkpoints) and three history pages of 50;
# the 200-turn conversion is measured by bench.convert_delta, not timed here.
TURNS = 60
FREQUENCY = 10


def create_thread(persona) -> str:
    response = persona.client.post("/api/threads", {}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


async def _rolled_back_turn(thread_id: str, text: str) -> None:
    """Run one delta turn and roll it back, as a cancelled run with ``action=rollback`` is."""
    resources = await async_resources()
    acc = StateAccessor(resolve_graph("lead_agent"), "delta", FREQUENCY, saver=resources.saver, store=resources.store)
    try:
        point = await acapture(acc, thread_id)
        await acc.graph.ainvoke({"messages": [HumanMessage(content=text)]}, acc.config(thread_id))
        await arestore(acc, thread_id, point)
    finally:
        await aclose_async_resources()


def build_delta_thread(thread_id: str, turns: int = TURNS) -> None:
    """Write ``turns`` delta turns with a rolled-back turn, a branch from an older state, and a waiting head."""
    delta = accessor("delta", FREQUENCY)
    invoke(delta, thread_id, *[f"turn {i}" for i in range(turns // 2)])
    async_to_sync(_rolled_back_turn)(thread_id, "cancelled turn")
    older = delta.history(thread_id, limit=None)[len(delta.history(thread_id, limit=None)) // 2]
    delta.update(
        thread_id,
        {"messages": [HumanMessage("branched summary", id="branch-summary")]},
        checkpoint_id=older.config["configurable"]["checkpoint_id"],
    )
    invoke(delta, thread_id, *[f"branch turn {i}" for i in range(turns // 2)], "/interrupt")


def observed(snapshot) -> dict[str, Any]:
    values = dict(snapshot.values)
    return {
        "checkpoint_id": snapshot.config["configurable"]["checkpoint_id"],
        "messages": [(m.id, m.type, m.content) for m in values.pop("messages", [])],
        "values": values,
        "next": snapshot.next,
    }


def reading(acc: StateAccessor, thread_id: str) -> list[dict[str, Any]]:
    return [observed(acc.get(thread_id)), *(observed(s) for s in acc.history(thread_id, limit=None))]


def all_tuples(thread_id: str) -> list:
    """Return the thread's checkpoint tuples in every namespace (a config without one lists them all)."""
    return list(accessor("full").saver.list({"configurable": {"thread_id": thread_id}}))


def raw_rows(thread_id: str) -> list[tuple]:
    """Every checkpoint's id, parent, metadata, stored channels, pending writes and namespace, as the saver lists them."""
    return [
        (
            t.config["configurable"]["checkpoint_id"],
            (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            dict(t.metadata),
            sorted(t.checkpoint["channel_values"]),
            sorted((w[0], w[1], repr(w[2])) for w in t.pending_writes or ()),
            t.config["configurable"]["checkpoint_ns"],
        )
        for t in all_tuples(thread_id)
    ]


def convert(*args: str) -> str:
    out = StringIO()
    call_command("convert_checkpoints", "--to", "full", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def http_messages(persona, thread_id: str) -> list[tuple[str, str, Any]]:
    response = persona.client.get(f"/api/threads/{thread_id}/state")
    assert response.status_code == 200, response.content
    return [(m["id"], m["type"], m["content"]) for m in response.json()["values"]["messages"]]


def test_a_long_delta_thread_converts_and_reads_the_same_in_full_mode(owner):
    thread_id = create_thread(owner)
    build_delta_thread(thread_id)
    before_rows = raw_rows(thread_id)
    delta_reading = reading(accessor("delta", FREQUENCY), thread_id)
    assert owner.client.get(f"/api/threads/{thread_id}/state").status_code == 409
    assert len(delta_reading) > 2 * TURNS and delta_reading[0]["next"], "long, branched and waiting at the head"

    output = convert("--thread", thread_id)

    assert f"thread {thread_id}: converted {len(before_rows)} checkpoint(s), verified" in output
    assert reading(accessor("full"), thread_id) == delta_reading
    # A delta-mode process still reads it the same (the migration back needs nothing).
    assert reading(accessor("delta", FREQUENCY), thread_id) == delta_reading
    after_rows = raw_rows(thread_id)
    assert [row[:2] for row in after_rows] == [row[:2] for row in before_rows]
    assert [row[4] for row in after_rows] == [row[4] for row in before_rows], "pending writes kept"
    assert not any(metadata_uses_delta(row[2]) for row in after_rows)
    stored = [sum("messages" in row[3] for row in rows) for rows in (before_rows, after_rows)]
    assert stored[0] < len(before_rows) // 2 < stored[1], "delta stores few message lists, full nearly all"
    # Through the API of this full-mode process: the head, then the whole history, page by page.
    assert http_messages(owner, thread_id) == delta_reading[0]["messages"]
    history = owner.client.post(f"/api/threads/{thread_id}/history", {"limit": 50}, format="json")
    assert history.status_code == 200, history.content
    entries = json.loads(b"".join(history.streaming_content) if history.streaming else history.content)
    assert [[(m["id"], m["type"], m["content"]) for m in s["values"].get("messages", [])] for s in entries] == [
        entry["messages"] for entry in delta_reading[1:51]
    ]


def test_rerun_skips_a_converted_thread_and_changes_nothing(owner):
    thread_id = create_thread(owner)
    build_delta_thread(thread_id, turns=6)
    convert("--thread", thread_id)
    rows = raw_rows(thread_id)
    assert f"thread {thread_id}: skipped (already full)" in convert("--thread", thread_id)
    assert raw_rows(thread_id) == rows


ENCRYPTION_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "encrypted_project" / "encryption.py"


@pytest.fixture
def handlers(settings, monkeypatch):
    """Turn the encrypted fixture project's handlers (a key per tenant; no tenant, no sealing) on or off."""
    monkeypatch.setenv("ENCRYPTION_MASTER_SECRET", "convert-secret")
    custom = load(f"{ENCRYPTION_FIXTURE}:encryption")

    def use(on: bool) -> None:
        settings.DEERFLOW = {**settings.DEERFLOW, "ENCRYPTION": custom if on else None}
        close_sync_resources()

    yield use
    close_sync_resources()


def test_under_custom_handlers_a_thread_is_sealed_again_with_its_own_context(owner, handlers):
    thread_id, plain_id = create_thread(owner), create_thread(owner)
    handlers(False)
    build_delta_thread(plain_id, turns=4)  # stored before the handlers were configured
    handlers(True)
    with fixed_scope({"tenant_id": "acme"}):  # as the thread's runs sealed it
        build_delta_thread(thread_id, turns=6)
        delta_reading = reading(accessor("delta", FREQUENCY), thread_id)
    assert f"thread {thread_id}: converted" in convert("--thread", thread_id)  # no --context needed
    assert thread_sealing_context(connection, current_backend().kind, thread_id) == {"tenant_id": "acme"}
    assert reading(accessor("full"), thread_id) == delta_reading
    # A thread the handlers never sealed takes --context; without one this handler refuses it.
    with pytest.raises(CommandError, match="no tenant in the encryption context"):
        convert("--thread", plain_id)
    assert thread_sealing_context(connection, current_backend().kind, plain_id) is None  # left as it was
    assert f"thread {plain_id}: converted" in convert("--thread", plain_id, "--context", '{"tenant_id": "beta"}')
    assert thread_sealing_context(connection, current_backend().kind, plain_id) == {"tenant_id": "beta"}
    with pytest.raises(CommandError, match="--context must be a JSON object"):
        convert("--all", "--context", "[]")


def test_dry_run_reports_and_writes_nothing(owner):
    thread_id = create_thread(owner)
    build_delta_thread(thread_id, turns=6)
    rows = raw_rows(thread_id)
    output = convert("--thread", thread_id, "--dry-run")
    assert f"thread {thread_id} [dry run]: would convert {len(rows)} checkpoint(s)" in output
    assert "bytes now" in output
    assert raw_rows(thread_id) == rows
    assert owner.client.get(f"/api/threads/{thread_id}/state").status_code == 409


def test_a_thread_with_an_unfinished_run_is_refused_in_one_line(owner):
    thread_id = create_thread(owner)
    build_delta_thread(thread_id, turns=4)
    Run.objects.create(
        run_id=str(uuid.uuid4()), thread_id=thread_id, owner=owner.user, assistant_id="lead_agent", status="running"
    )
    rows = raw_rows(thread_id)
    with pytest.raises(CommandError, match=f"^Thread {thread_id} has an unfinished run; convert it after") as refused:
        convert("--thread", thread_id)
    assert "\n" not in str(refused.value)
    assert raw_rows(thread_id) == rows


def test_a_reading_that_differs_rolls_the_thread_back(owner, monkeypatch):
    thread_id = create_thread(owner)
    build_delta_thread(thread_id, turns=4)
    rows = raw_rows(thread_id)
    materialized = checkpoints.convert._materialized

    def one_message_short(*args, **kwargs):
        values = materialized(*args, **kwargs)
        return {name: value[:-1] if isinstance(value, list) else value for name, value in values.items()}

    monkeypatch.setattr(checkpoints.convert, "_materialized", one_message_short)
    with pytest.raises(CommandError, match=f"^Thread {thread_id}: state .* reads differently after conversion"):
        convert("--thread", thread_id)
    assert raw_rows(thread_id) == rows
    assert owner.client.get(f"/api/threads/{thread_id}/state").status_code == 409


def test_owner_and_all_select_only_delta_threads(owner, other):
    mine, theirs, full = create_thread(owner), create_thread(other), create_thread(owner)
    for thread_id in (mine, theirs):
        build_delta_thread(thread_id, turns=2)
    invoke(accessor("full"), full, "already full")

    output = convert("--owner", owner.user.username)
    assert f"thread {mine}: converted" in output and theirs not in output and full not in output
    assert owner.client.get(f"/api/threads/{mine}/state").status_code == 200
    assert other.client.get(f"/api/threads/{theirs}/state").status_code == 409

    output = convert("--all")
    assert f"thread {theirs}: converted" in output and mine not in output
    assert other.client.get(f"/api/threads/{theirs}/state").status_code == 200


def test_a_graph_with_its_own_delta_channel_stays_delta(owner, settings):
    graphs = {**settings.DEERFLOW["GRAPHS"], OWN_DELTA_SPEC.graph_id: OWN_DELTA_SPEC.import_path}
    settings.DEERFLOW = {**settings.DEERFLOW, "GRAPHS": graphs}
    thread = ThreadMeta.objects.create(
        thread_id=new_thread_id("own"), owner=owner.user, assistant_id=OWN_DELTA_SPEC.graph_id
    )
    invoke(accessor("full", spec=OWN_DELTA_SPEC), thread.thread_id, "one", "two", "three", "four")
    rows = raw_rows(thread.thread_id)
    assert any(metadata_uses_delta(row[2]) for row in rows)

    output = convert("--thread", thread.thread_id)

    assert f"thread {thread.thread_id}: skipped (graph 'tests_own_delta_messages' compiles its own" in output
    assert raw_rows(thread.thread_id) == rows


ASKING_PARENT = GraphSpec("tests_asking_parent", "tests.runs.graphs:asking_parent")


def test_subgraph_namespaces_convert_and_an_interrupt_inside_one_resumes_in_full_mode(owner, settings):
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": {**settings.DEERFLOW["GRAPHS"], ASKING_PARENT.graph_id: ASKING_PARENT.import_path},
    }
    thread = ThreadMeta.objects.create(
        thread_id=new_thread_id("sub"), owner=owner.user, assistant_id="tests_asking_parent"
    )
    delta = accessor("delta", FREQUENCY, spec=ASKING_PARENT)
    invoke(delta, thread.thread_id, "one")
    rows = raw_rows(thread.thread_id)
    assert any(metadata_uses_delta(row[2]) for row in rows if row[5]), "subgraph checkpoints carry the marker"
    assert len({row[5] for row in rows}) > 1, "the interrupt left checkpoints in the subgraph's namespace"
    waiting = delta.get(thread.thread_id, subgraphs=True)

    assert "converted" in convert("--thread", thread.thread_id)

    full = accessor("full", spec=ASKING_PARENT)
    converted = full.get(thread.thread_id, subgraphs=True)
    assert [t.interrupts for t in converted.tasks] == [t.interrupts for t in waiting.tasks]
    assert [observed(t.state) for t in converted.tasks] == [observed(t.state) for t in waiting.tasks]
    assert [(row[:2], row[5]) for row in raw_rows(thread.thread_id)] == [(row[:2], row[5]) for row in rows]
    assert not any(metadata_uses_delta(row[2]) for row in raw_rows(thread.thread_id))
    full.graph.invoke(Command(resume="yes"), full.config(thread.thread_id))
    assert [m.content for m in full.get(thread.thread_id).values["messages"]] == ["one", "sub got: yes"]
