"""Retention edges: POST /threads/prune, GET /threads/{id}/storage and ``manage.py prune_checkpoints``.

Personas over every route (owner, other user, anonymous); references only
thread and run records know (resume targets, branch parents); refusals
that leave everything in place.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from checkpoints.storage import thread_storage_get
from runs.models import Run
from tests.checkpoints.test_retention import ids, make_accessor, with_sibling_branch
from tests.helpers import raw_checkpoint_count
from threads.models import ThreadMeta
from threads.retention import KEEP_LATEST_POLICY, thread_prune

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def create_thread(persona) -> str:
    response = persona.client.post("/api/threads", {}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


def thread_with_branch(persona, mode: str = "full") -> tuple[str, list[str], list[str]]:
    thread_id = create_thread(persona)
    branch, ends = with_sibling_branch(make_accessor(mode, 2), thread_id)
    return thread_id, branch, ends


def prune(persona, **body):
    return persona.client.post("/api/threads/prune", body, format="json")


def unfinished_run(persona, thread_id: str, status: str = "queued", checkpoint_id: str | None = None) -> Run:
    return Run.objects.create(
        run_id=uuid.uuid4().hex,
        thread_id=thread_id,
        owner=persona.user,
        assistant_id="lead_agent",
        status=status,
        kwargs={"checkpoint_id": checkpoint_id} if checkpoint_id else {},
    )


# -- GET /threads/{id}/storage -------------------------------------------------------


def test_storage_route_answers_the_owner_only(owner, other, anonymous):
    thread_id, _, _ = thread_with_branch(owner)
    response = owner.client.get(f"/api/threads/{thread_id}/storage")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body == thread_storage_get(thread_id=thread_id)
    assert body["checkpoint_count"] == raw_checkpoint_count(thread_id)
    assert body["head"]["channel_mode"] == "full"
    assert set(body["tables"]) == {"checkpoints", "writes", "blobs"}
    assert body["channels"]["messages"]["write_rows"] > 0
    foreign = other.client.get(f"/api/threads/{thread_id}/storage")
    assert foreign.status_code == 404 and foreign.json() == {"detail": f"Thread {thread_id} not found"}
    assert owner.client.get("/api/threads/no-such-thread/storage").status_code == 404
    assert anonymous.get(f"/api/threads/{thread_id}/storage").status_code == 401


# -- POST /threads/prune --------------------------------------------------------------


def test_prune_is_routed_before_the_thread_detail_route(owner):
    response = owner.client.get("/api/threads/prune")
    assert response.status_code == 405


def test_prune_delete_removes_the_threads_entirely(owner):
    first, second = create_thread(owner), create_thread(owner)
    make_accessor("full").graph.invoke({"messages": [("user", "hi")]}, make_accessor("full").config(first))
    response = prune(owner, thread_ids=[first, second])  # the SDK's default strategy is delete
    assert response.status_code == 200, response.content
    assert response.json()["pruned_count"] == 2
    assert not ThreadMeta.objects.filter(pk__in=[first, second]).exists()
    assert raw_checkpoint_count(first) == 0
    assert owner.client.get(f"/api/threads/{first}").status_code == 404


def test_prune_refuses_unknown_and_foreign_ids_before_doing_anything(owner, other):
    mine, _, _ = thread_with_branch(owner)
    theirs = create_thread(other)
    before = raw_checkpoint_count(mine)
    for ids_ in ([mine, theirs], [mine, "no-such-thread"]):
        for strategy in ("delete", "keep_latest"):
            response = prune(owner, thread_ids=ids_, strategy=strategy)
            assert response.status_code == 404
            assert response.json() == {"detail": f"Thread {ids_[1]} not found"}
    assert ThreadMeta.objects.filter(pk__in=[mine, theirs]).count() == 2
    assert raw_checkpoint_count(mine) == before


def test_prune_keep_latest_deletes_abandoned_branches_and_thins_snapshots(owner):
    full_thread, branch, _ = thread_with_branch(owner, "full")
    delta_thread, delta_branch, _ = thread_with_branch(owner, "delta")
    state_before = owner.client.get(f"/api/threads/{full_thread}/state").json()["values"]
    dry = prune(owner, thread_ids=[full_thread, delta_thread], strategy="keep_latest", dry_run=True).json()
    assert set(branch) <= set(ids(make_accessor("full"), full_thread))  # a dry run changes nothing
    response = prune(owner, thread_ids=[full_thread, delta_thread], strategy="keep_latest")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["pruned_count"] == 2 and body["strategy"] == "keep_latest"
    full_report, delta_report = body["threads"]
    assert set(full_report["deleted_checkpoint_ids"]) == set(branch)
    assert set(delta_report["deleted_checkpoint_ids"]) == set(delta_branch)
    assert delta_report["thinned_snapshots"] > 0 and full_report["thinned_snapshots"] == 0
    assert [{**t, "dry_run": False} for t in dry["threads"]] == body["threads"]
    assert owner.client.get(f"/api/threads/{full_thread}/state").json()["values"] == state_before
    again = prune(owner, thread_ids=[full_thread, delta_thread], strategy="keep_latest").json()
    assert all(t["deleted_checkpoint_ids"] == [] and t["thinned_snapshots"] == 0 for t in again["threads"])


def test_prune_refuses_while_a_run_is_unfinished_and_dry_run_shows_its_resume_target(owner):
    thread_id, branch, _ = thread_with_branch(owner)
    run = unfinished_run(owner, thread_id, status="queued", checkpoint_id=branch[0])
    before = raw_checkpoint_count(thread_id)
    for strategy in ("delete", "keep_latest"):
        response = prune(owner, thread_ids=[thread_id], strategy=strategy)
        assert response.status_code == 409
        assert response.json()["detail"].startswith(f"Thread {thread_id} has an unfinished run")
    assert raw_checkpoint_count(thread_id) == before
    report = thread_prune(thread=ThreadMeta.objects.get(pk=thread_id), policy=KEEP_LATEST_POLICY, dry_run=True)
    reasons = {p["checkpoint_id"]: p["reasons"] for p in report.protected}
    assert reasons[branch[0]] == [f"resume target of unfinished run {run.run_id}"]
    assert report.deleted == []
    run.status = "success"
    run.save()
    assert set(
        prune(owner, thread_ids=[thread_id], strategy="keep_latest").json()["threads"][0]["deleted_checkpoint_ids"]
    ) == set(branch)


def test_prune_keeps_the_checkpoint_another_thread_branched_from(owner):
    thread_id, branch, _ = thread_with_branch(owner)
    ThreadMeta.objects.create(
        thread_id=f"branch-{uuid.uuid4().hex[:8]}",
        owner=owner.user,
        metadata={"branch_parent_thread_id": thread_id, "branch_parent_checkpoint_id": branch[0]},
    )
    body = prune(owner, thread_ids=[thread_id], strategy="keep_latest").json()
    assert body["threads"][0]["deleted_checkpoint_ids"] == []
    assert set(branch) <= set(ids(make_accessor("full"), thread_id))


def test_prune_validates_its_input(owner):
    thread_id = create_thread(owner)
    for body, field in (
        ({}, "thread_ids"),
        ({"thread_ids": [thread_id], "strategy": "newest"}, "strategy"),
        ({"thread_ids": ["bad id!"]}, "thread_ids"),
        ({"thread_ids": thread_id}, "thread_ids"),
    ):
        response = prune(owner, **body)
        assert response.status_code == 422, body
        assert response.json()["detail"].startswith(field)
    assert prune(owner, thread_ids=[]).json() == {
        "pruned_count": 0,
        "strategy": "delete",
        "dry_run": False,
        "thread_ids": [],
    }
    assert ThreadMeta.objects.filter(pk=thread_id).exists()


def test_prune_requires_an_identity(anonymous):
    assert anonymous.post("/api/threads/prune", {"thread_ids": []}, format="json").status_code == 401


# -- manage.py prune_checkpoints -----------------------------------------------------------


def command(*args: str) -> str:
    out = StringIO()
    call_command("prune_checkpoints", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_command_dry_run_then_apply(owner):
    thread_id, branch, _ = thread_with_branch(owner)
    dry = command("--thread", thread_id, "--dry-run", "--siblings")
    assert f"thread {thread_id}" in dry and "[dry run]" in dry and "would delete 3 checkpoint(s)" in dry
    assert all(f"delete {cid} (leaf_sibling)" in dry for cid in branch)
    assert "protected" in dry and "head of namespace ''" in dry
    assert set(branch) <= set(ids(make_accessor("full"), thread_id))
    assert "deleted 0 checkpoint(s)" in command("--thread", thread_id)  # siblings off by default
    applied = command("--all", "--siblings", "--thin-snapshots")
    assert f"thread {thread_id} (" in applied and "deleted 3 checkpoint(s)" in applied
    assert not set(branch) & set(ids(make_accessor("full"), thread_id))


def test_command_refuses_a_protected_checkpoint_and_bad_limits(owner):
    thread_id, branch, ends = thread_with_branch(owner)
    before = raw_checkpoint_count(thread_id)
    with pytest.raises(CommandError, match=f"Refusing to delete checkpoint {ends[1]}.*lineage of the head"):
        command("--thread", thread_id, "--checkpoint", ends[1])
    with pytest.raises(CommandError, match="max_delete must be >= 0, got -1"):
        command("--thread", thread_id, "--max-delete", "-1")
    with pytest.raises(CommandError, match="--checkpoint needs exactly one --thread"):
        command("--all", "--checkpoint", branch[0])
    assert raw_checkpoint_count(thread_id) == before
    out = command("--thread", thread_id, "--checkpoint", branch[-1], "--max-delete", "2")
    assert "deleted 2 checkpoint(s)" in out and "(max-delete reached)" in out


def test_command_skips_a_thread_with_an_unfinished_run(owner):
    thread_id, branch, _ = thread_with_branch(owner)
    unfinished_run(owner, thread_id, status="running")
    with pytest.raises(CommandError, match=f"1 thread\\(s\\) not pruned: {thread_id}"):
        command("--thread", thread_id, "--siblings")
    assert set(branch) <= set(ids(make_accessor("full"), thread_id))
    assert "would delete 3" in command("--thread", thread_id, "--siblings", "--dry-run")


def test_command_refuses_the_memory_backend_with_a_clear_message(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"database": {"backend": "memory"}}))
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DEERFLOW_CONFIG=str(config), DEERFLOW_VAR_DIR=str(tmp_path / "var"))
    result = subprocess.run(
        [sys.executable, "manage.py", "prune_checkpoints", "--all", "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "need the sqlite or postgres backend: the memory backend keeps checkpoints in process memory" in (
        result.stderr
    )


# -- the official SDK against a real server in delta mode -------------------------------------


@pytest.fixture(scope="module")
def delta_server(tmp_path_factory):
    from contextlib import ExitStack

    from tests.live.server import LiveServer, fresh_postgres_database

    database_url = os.environ.get("DATABASE_URL")
    with ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database(database_url)) if database_url else None
        config = {"database": {"checkpoint_channel_mode": "delta", "checkpoint_delta": {"snapshot_frequency": 2}}}
        server = LiveServer(tmp_path_factory.mktemp("retention"), config=config, database_url=url).setup().start()
        try:
            yield server
        finally:
            server.stop()


@pytest.mark.live
async def test_sdk_prune_keep_latest_then_delete_on_a_delta_server(delta_server):
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import NotFoundError

    client = get_client(url=delta_server.url, api_key=delta_server.api_key("alice"))
    thread_id = (await client.threads.create())["thread_id"]
    for index in range(4):
        await client.runs.wait(thread_id, "lead_agent", input={"messages": [{"role": "user", "content": f"q{index}"}]})
    history = await client.threads.get_history(thread_id, limit=100)
    storage = await client.http.get(f"/threads/{thread_id}/storage")
    assert storage["head"]["channel_mode"] == "delta" and storage["snapshot_count"] == 4

    purges = (await client.http.get("/info"))["checkpoints"]["history_cache"]["counters"]["purges"]
    result = await client.threads.prune([thread_id], strategy="keep_latest")
    assert result["pruned_count"] == 1 and result["threads"][0]["thinned_snapshots"] == 3
    assert (await client.http.get(f"/threads/{thread_id}/storage"))["snapshot_count"] == 1
    # The server's delta-history cache dropped the thread's entries, and every checkpoint reads the same.
    assert (await client.http.get("/info"))["checkpoints"]["history_cache"]["counters"]["purges"] == purges + 1
    assert await client.threads.get_history(thread_id, limit=100) == history
    values = await client.runs.wait(thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "q4"}]})
    assert [m["content"] for m in values["messages"]][-2:] == ["q4", "echo: q4"]

    assert (await client.threads.prune([thread_id])) == {
        "pruned_count": 1,
        "strategy": "delete",
        "dry_run": False,
        "thread_ids": [thread_id],
    }
    with pytest.raises(NotFoundError):
        await client.threads.get(thread_id)
