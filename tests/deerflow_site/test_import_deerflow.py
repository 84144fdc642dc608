"""``manage.py import_deerflow`` on DeerFlow-shaped databases built from the documented schema.

The source is a SQLite file on the SQLite pass and the PostgreSQL database
``deerflow_e_src`` on the PostgreSQL pass (rebuilt per test). It holds a
normal thread (runs, events, feedback), a legacy thread with checkpoints
but no ``threads_meta`` row, a NULL-owner thread, a delta-mode thread, and
a thread with a rollback and a branch (checkpoints with two children).
State and history are compared over HTTP with what the source's own saver
materializes.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import TextField
from django.db.models.functions import Cast
from langgraph.types import Overwrite
from rest_framework.test import APIClient

from bench.deerflow_source import (
    DELTA_SNAPSHOT_FREQUENCY,
    EPOCH,
    DeerFlowSource,
    _event_row,
    _run_row,
    _thread_row,
    agent_graph,
)
from checkpoints import modes
from checkpoints.backend import current_backend
from checkpoints.encryption import thread_sealing_context
from checkpoints.runtime import close_sync_resources
from core.custom_encryption import load
from deerflow_site.deerflow_import.records import IMPORTED_ACTIVE_ERROR
from deerflow_site.services import api_key_issue
from runs.models import Feedback, Run, RunEvent
from tests.checkpoints.conftest import configure
from tests.checkpoints.support import empty_checkpoint_tables, empty_store
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

# One per test process: the PostgreSQL pass runs on two workers (and tests.live on another pass).
SOURCE_DB = f"deerflow_e_src_{os.getpid()}"


@dataclass
class Source:
    """A built source: its URL, builder, and thread ids by role."""

    url: str
    db: DeerFlowSource
    normal: str
    legacy: str
    shared: str
    delta: str
    forked: str

    @property
    def thread_ids(self) -> list[str]:
        return [self.normal, self.legacy, self.shared, self.delta, self.forked]


def _postgres_source_url() -> str:
    target = urlsplit(os.environ["DATABASE_URL"])
    admin = urlunsplit(target._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{SOURCE_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{SOURCE_DB}"')
    return urlunsplit(target._replace(path=f"/{SOURCE_DB}"))


def _open(tmp_path, vendor: str) -> tuple[str, DeerFlowSource]:
    if vendor == "postgresql":
        url = _postgres_source_url()
        return url, DeerFlowSource.postgres(url)
    path = tmp_path / "deerflow.db"
    return f"sqlite:///{path}", DeerFlowSource.sqlite(str(path))


def _head_id(db: DeerFlowSource, thread_id: str) -> str:
    return db.saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}).config["configurable"][
        "checkpoint_id"
    ]


def _fork_and_roll_back(db: DeerFlowSource, thread_id: str) -> None:
    """Two turns, a rollback of the second (DeerFlow's full-mode restore: a fork of the pre-run head), a branch."""
    db.turn(thread_id, "first")
    pre_run = _head_id(db, thread_id)
    captured = agent_graph(db.saver, delta=False).get_state({"configurable": {"thread_id": thread_id}}).values
    db.turn(thread_id, "second, then rolled back")
    agent_graph(db.saver, delta=False).update_state(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": pre_run}},
        {"messages": Overwrite(captured["messages"])},
        as_node="agent",
    )
    db.turn(thread_id, "third, after the rollback")
    db.turn(thread_id, "a branch from the first answer", checkpoint_id=pre_run)


def _feedback_row(feedback_id, run_id, thread_id, user_id, rating, **extra) -> dict:
    """A DeerFlow ``feedback`` row, given an hour after the epoch."""
    return {
        "feedback_id": feedback_id,
        "run_id": run_id,
        "thread_id": thread_id,
        "user_id": user_id,
        "rating": rating,
        "created_at": EPOCH.replace(hour=1),
        **extra,
    }


@pytest.fixture
def source(tmp_path, django_db_setup) -> Source:
    from django.db import connection

    url, db = _open(tmp_path, connection.vendor)
    db.create_schema()
    tag = uuid.uuid4().hex[:6]
    src = Source(url, db, f"normal-{tag}", f"legacy-{tag}", f"shared-{tag}", f"delta-{tag}", f"forked-{tag}")
    at = EPOCH
    db.insert("users", [{"id": "u-alice", "email": "alice@example.com"}, {"id": "u-bob", "email": "bob@example.com"}])
    for text in ("hello", "how are you"):
        db.turn(src.normal, text)
    db.turn(src.legacy, "a thread from before threads_meta")
    db.turn(src.shared, "anyone may read this")
    for text in ("one", "two", "three"):
        db.turn(src.delta, text, delta=True)
    _fork_and_roll_back(db, src.forked)
    db.insert(
        "threads_meta",
        [
            _thread_row(src.normal, "u-alice", at, display_name="Normal", metadata_json={"deerflow_pinned": True}),
            _thread_row(src.shared, None, at, status="running"),
            _thread_row(src.delta, "u-alice", at, status="interrupted"),
            _thread_row(src.forked, "u-alice", at),
        ],
    )
    db.insert(
        "runs",
        [
            _run_row(f"r1-{tag}", src.normal, "u-alice", "hello", at),
            _run_row(f"r2-{tag}", src.normal, "u-alice", "how are you", at, status="error", error="boom"),
            _run_row(f"r3-{tag}", src.normal, "u-alice", "x", at, operation_kind="checkpoint_write"),
            _run_row(f"r4-{tag}", src.legacy, "u-bob", "legacy", at),
            _run_row(f"r5-{tag}", src.shared, None, "still running", at, status="running"),
        ],
    )
    db.insert(
        "run_events",
        [
            *(_event_row(src.normal, f"r1-{tag}", "u-alice", seq, seq - 1, at) for seq in (1, 2, 3, 4)),
            *(_event_row(src.normal, f"r2-{tag}", "u-alice", seq, seq - 1, at) for seq in (5, 6)),
            # A branch's seeded feed: its run id has no runs row.
            _event_row(src.forked, f"seed-{tag}", "u-alice", 1, 1, at),
        ],
    )
    db.insert(
        "feedback",
        [
            # No user: the run owner's, as a run without one is its thread owner's.
            _feedback_row(f"f-{tag}", f"r1-{tag}", src.normal, None, 1, comment="great", message_id="m-1"),
            _feedback_row(f"fb-{tag}", f"r1-{tag}", src.normal, "u-bob", -1),
            _feedback_row(f"fl-{tag}", f"r4-{tag}", src.legacy, "u-bob", 1),
        ],
    )
    db.store.put(("users", "u-alice", "memories"), "m1", {"text": "likes tea"})
    db.store.put(("docs",), "readme", {"text": "shared"})
    db.store.put(("threads",), src.legacy, {"user_id": "u-bob", "metadata": {"from": "store"}})
    yield src
    db.close()


@pytest.fixture
def user_map(tmp_path) -> str:
    path = tmp_path / "users.json"
    path.write_text(json.dumps({"u-alice": "alice-here"}))
    get_user_model().objects.create_user(username="alice-here")
    return str(path)


def run_import(source: Source, *args: str) -> str:
    out = StringIO()
    call_command("import_deerflow", "--source", source.url, *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def delta_process(unfrozen_mode, settings):
    """This process in delta mode (what a deployment with delta threads must run)."""
    configure(settings, checkpoint_channel_mode="delta", snapshot_frequency=DELTA_SNAPSHOT_FREQUENCY)
    assert modes.process_mode() == ("delta", DELTA_SNAPSHOT_FREQUENCY)


def summary(output: str) -> dict[str, tuple[int, int, int, int]]:
    """Return the summary table's rows: table → (found, imported, present, failed)."""
    rows = {}
    for line in output.splitlines():
        *name, found, imported, present, failed = ["", *line.split()][-5:] if len(line.split()) >= 5 else [""] * 5
        if name and all(n.isdigit() for n in (found, imported, present, failed)):
            rows[" ".join(line.split()[:-4])] = (int(found), int(imported), int(present), int(failed))
    return rows


def _counts() -> tuple[int, int, int, int]:
    return ThreadMeta.objects.count(), Run.objects.count(), RunEvent.objects.count(), get_user_model().objects.count()


def test_import_brings_threads_owners_runs_and_events_across(source, user_map, delta_process):
    output = run_import(source, "--users", user_map, "--create-users", "--batch-size", "2")

    threads = {t.thread_id: t for t in ThreadMeta.objects.select_related("owner")}
    assert sorted(threads) == sorted(source.thread_ids)
    assert threads[source.normal].owner.username == "alice-here"
    assert threads[source.legacy].owner.username == "bob@example.com"  # created, named by its DeerFlow email
    assert threads[source.shared].owner.username == "deerflow-shared"
    normal = threads[source.normal]
    assert (normal.display_name, normal.status, normal.metadata) == ("Normal", "idle", {"deerflow_pinned": True})
    assert normal.created_at.isoformat() == "2026-01-01T00:00:00+00:00"
    legacy = threads[source.legacy]
    assert legacy.display_name == "About a thread from before threads_meta"
    assert legacy.metadata == {"from": "store"}
    assert threads[source.shared].status == "error"  # "running" with no run behind it here
    assert threads[source.delta].status == "interrupted"

    runs = {r.run_id.split("-")[0]: r for r in Run.objects.all()}
    assert sorted(runs) == ["r1", "r2", "r4", "r5", "seed"]  # r3 was a checkpoint-write reservation, not a run
    r1 = runs["r1"]
    assert (r1.total_input_tokens, r1.total_output_tokens, r1.total_tokens, r1.llm_call_count) == (12, 30, 42, 2)
    assert r1.token_usage_by_caller == {"lead_agent": 30, "subagent": 10, "middleware": 2}
    assert r1.token_usage_by_model["gpt-test"]["total_tokens"] == 42
    assert (r1.updated_at - r1.created_at).total_seconds() == 3
    assert (runs["r2"].status, runs["r2"].error) == ("error", "boom")
    assert (runs["r5"].status, runs["r5"].error, runs["r5"].owner.username) == (
        "error",
        IMPORTED_ACTIVE_ERROR,
        "deerflow-shared",
    )
    assert runs["seed"].metadata["deerflow_import"]
    events = list(RunEvent.objects.filter(thread_id=source.normal).order_by("seq"))
    assert [(e.seq, e.run_id.split("-")[0]) for e in events] == [
        (1, "r1"),
        (2, "r1"),
        (3, "r1"),
        (4, "r1"),
        (5, "r2"),
        (6, "r2"),
    ]
    assert events[1].content == {"type": "ai", "content": "event 2"}  # DeerFlow's JSON text, decoded
    feedback = {f.feedback_id.split("-")[0]: f for f in Feedback.objects.select_related("owner")}
    assert {k: (f.run_id.split("-")[0], f.owner.username, f.rating) for k, f in feedback.items()} == {
        "f": ("r1", "alice-here", 1),
        "fb": ("r1", "bob@example.com", -1),
        "fl": ("r4", "bob@example.com", 1),
    }
    assert (feedback["f"].comment, feedback["f"].message_id) == ("great", "m-1")
    assert feedback["f"].created_at.isoformat() == "2026-01-01T01:00:00+00:00"
    assert summary(output)["feedback"] == (3, 3, 0, 0)
    assert "verification: 5/5 threads equal to the source (OK)" in output


def _client_for(username: str) -> APIClient:
    user = get_user_model().objects.get(username=username)
    _, raw = api_key_issue(user=user)
    return APIClient(HTTP_X_API_KEY=raw)


def _keys(messages) -> list[tuple]:
    return [(m["id"], m["type"], m["content"]) for m in messages]


def _source_view(db: DeerFlowSource, thread_id: str, *, delta: bool):
    graph = agent_graph(db.saver, delta=delta)
    config = {"configurable": {"thread_id": thread_id}}
    head = [(m.id, m.type, m.content) for m in graph.get_state(config).values["messages"]]
    history = [
        (s.config["configurable"]["checkpoint_id"], [(m.id, m.type, m.content) for m in s.values.get("messages", [])])
        for s in graph.get_state_history(config)
    ]
    return head, history


@pytest.mark.parametrize("role", ["normal", "legacy", "shared", "delta", "forked"])
def test_state_and_history_over_http_equal_the_source(source, user_map, delta_process, role):
    run_import(source, "--users", user_map, "--create-users")
    thread_id = getattr(source, role)
    client = _client_for(ThreadMeta.objects.get(pk=thread_id).owner.username)
    head, history = _source_view(source.db, thread_id, delta=role == "delta")

    state = client.get(f"/api/threads/{thread_id}/state")
    assert state.status_code == 200, state.content
    assert _keys(state.json()["values"]["messages"]) == head
    answered = client.post(f"/api/threads/{thread_id}/history", {"limit": 1000}, format="json")
    assert answered.status_code == 200, answered.content
    ours = [(e["checkpoint"]["checkpoint_id"], _keys(e["values"].get("messages", []))) for e in answered.json()]
    assert ours == history
    if role == "forked":
        parents = [e["parent_checkpoint"]["checkpoint_id"] for e in answered.json() if e["parent_checkpoint"]]
        assert max(parents.count(p) for p in parents) == 3  # the turn, the rollback and the branch
    if role == "delta":
        assert any(e["metadata"].get(modes.DELTA_MARKER_KEY) == "delta" for e in answered.json())


def test_a_full_mode_process_reports_the_delta_thread_it_cannot_read(source, user_map):
    with pytest.raises(CommandError, match=r"verification failed for 1 thread"):
        run_import(source, "--users", user_map, "--create-users")
    assert ThreadMeta.objects.filter(pk=source.delta).exists()


def test_store_items_land_under_their_owners_root(source, user_map, delta_process):
    run_import(source, "--users", user_map, "--create-users")

    alice = _client_for("alice-here")
    item = alice.get("/api/store/items", {"namespace": "memories", "key": "m1"})
    assert item.json()["value"] == {"text": "likes tea"}
    shared = _client_for("deerflow-shared").get("/api/store/items", {"namespace": "docs", "key": "readme"})
    assert shared.json()["value"] == {"text": "shared"}
    assert alice.get("/api/store/items", {"namespace": "docs", "key": "readme"}).json() is None
    # DeerFlow's own thread records are metadata, not items.
    assert _client_for("bob@example.com").post("/api/store/namespaces", {}, format="json").json() == {"namespaces": []}


def test_a_second_import_writes_nothing(source, user_map, delta_process):
    run_import(source, "--users", user_map, "--create-users")
    before = _counts()

    output = run_import(source, "--users", user_map, "--create-users")

    assert _counts() == before
    table = summary(output)
    assert table["threads"] == (5, 0, 5, 0)
    assert table["events"] == (7, 0, 7, 0)
    assert table["feedback"] == (3, 0, 3, 0)
    found = table["checkpoints"][0]
    assert found > 20 and table["checkpoints"] == (found, 0, found, 0)
    assert "verification: 5/5" in output
    assert "users created" not in output


def test_an_import_stopped_by_a_failing_batch_is_finished_by_the_next(source, user_map, delta_process):
    # Batches of 2 in key order: (r1, r2) then (r3, r4), r3 a reservation that is skipped. r4 cannot
    # be stored (tokens are non-negative here), so its batch rolls back.
    bad = "r4"
    source.db.execute("UPDATE runs SET total_tokens = -1 WHERE run_id LIKE %s", (f"{bad}-%",))
    with pytest.raises(
        CommandError, match=r"^import stopped in runs: .* run the command again to finish\)$"
    ) as stopped:
        run_import(source, "--users", user_map, "--create-users", "--batch-size", "2")
    assert "\n" not in str(stopped.value)
    assert ThreadMeta.objects.count() == 5
    assert Run.objects.count() == 2  # the first batch is kept, the failing one left nothing
    assert not RunEvent.objects.exists()

    source.db.execute("UPDATE runs SET total_tokens = 42 WHERE run_id LIKE %s", (f"{bad}-%",))
    output = run_import(source, "--users", user_map, "--batch-size", "2")

    assert Run.objects.count() == 5 and RunEvent.objects.count() == 7
    assert summary(output)["runs"] == (4, 2, 2, 0)
    assert "verification: 5/5 threads equal to the source (OK)" in output


def test_a_dry_run_counts_and_writes_nothing(source, user_map):
    before = _counts()

    output = run_import(source, "--users", user_map, "--create-users", "--dry-run")

    assert _counts() == before
    assert not ThreadMeta.objects.filter(pk__in=source.thread_ids).exists()
    assert "would import" in output and "users would create: bob@example.com, deerflow-shared" in output
    assert summary(output)["events"] == (7, 7, 0, 0)
    assert summary(output)["feedback"] == (3, 3, 0, 0)
    assert not Feedback.objects.exists()
    assert "verification" not in output


def test_unmapped_owners_are_refused_without_create_users(source):
    with pytest.raises(CommandError, match=r"owner\(s\) have no user here: .*--create-users"):
        run_import(source)
    assert not ThreadMeta.objects.exists()


def test_a_database_that_is_not_deerflow_is_refused_in_one_line(tmp_path):
    import sqlite3

    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE things (id INTEGER)")
    with pytest.raises(CommandError, match=r"^not a DeerFlow database: no run_events, runs, threads_meta table$"):
        call_command("import_deerflow", "--source", f"sqlite:///{path}", stdout=StringIO())
    with pytest.raises(CommandError, match=r"^cannot open SQLite source"):
        call_command("import_deerflow", "--source", f"sqlite:///{tmp_path}/missing.db", stdout=StringIO())
    with pytest.raises(CommandError, match=r"^--source must be sqlite:///path or a postgresql:// URL"):
        call_command("import_deerflow", "--source", "mysql://x/y", stdout=StringIO())


def test_an_unknown_alembic_revision_is_refused(tmp_path):
    db = DeerFlowSource.sqlite(str(tmp_path / "future.db"))
    db.create_schema(revision="0099_from_the_future", checkpoints=False)
    db.close()
    with pytest.raises(CommandError, match=r"unknown DeerFlow schema revision '0099_from_the_future'"):
        call_command("import_deerflow", "--source", f"sqlite:///{tmp_path}/future.db", stdout=StringIO())


def test_a_legacy_baseline_database_without_alembic_is_accepted(tmp_path):
    db = DeerFlowSource.sqlite(str(tmp_path / "legacy.db"))
    db.create_schema(revision=None, checkpoints=False)
    db.close()
    output = StringIO()
    call_command("import_deerflow", "--source", f"sqlite:///{tmp_path}/legacy.db", stdout=output)
    assert "Source: sqlite legacy baseline (no alembic_version)" in output.getvalue()


def test_a_csv_user_map_maps_owners(source, tmp_path, delta_process):
    path = tmp_path / "users.csv"
    path.write_text("deerflow_user_id,username\nu-alice,alice-csv\nu-bob,bob-csv\n")
    get_user_model().objects.create_user(username="alice-csv")

    run_import(source, "--users", str(path), "--create-users")

    owners = dict(ThreadMeta.objects.values_list("thread_id", "owner__username"))
    assert owners[source.normal] == "alice-csv" and owners[source.legacy] == "bob-csv"


def test_checkpoints_missing_here_are_copied_again_by_the_next_run(source, user_map, delta_process):
    from checkpoints.runtime import sync_resources

    run_import(source, "--users", user_map, "--create-users")
    sync_resources().saver.delete_thread(source.forked)

    output = run_import(source, "--users", user_map)

    found, imported, present, failed = summary(output)["checkpoints"]
    assert imported == len(list(source.db.saver.list({"configurable": {"thread_id": source.forked}})))
    assert (present, failed) == (found - imported, 0)
    assert "verification: 5/5 threads equal to the source (OK)" in output


def test_verify_only_fails_when_a_thread_here_differs_from_its_source(source, user_map, delta_process):
    run_import(source, "--users", user_map, "--create-users")
    client = _client_for("alice-here")
    changed = client.post(
        f"/api/threads/{source.normal}/state",
        {"values": {"messages": [{"type": "human", "content": "written after the import"}]}},
        format="json",
    )
    assert changed.status_code == 200, changed.content

    out = StringIO()
    with pytest.raises(CommandError, match=r"^verification failed for 1 thread\(s\)$"):
        call_command("import_deerflow", "--source", source.url, "--verify-only", stdout=out)
    assert f"differs: {source.normal}: head state differs" in out.getvalue()
    assert "verification: 4/5 threads equal to the source (FAILED)" in out.getvalue()


def test_imported_feedback_is_served_to_the_threads_owner(source, user_map, delta_process):
    run_import(source, "--users", user_map, "--create-users")
    run_id = Feedback.objects.get(feedback_id__startswith="f-").run_id
    alice = _client_for("alice-here")

    stats = alice.get(f"/api/threads/{source.normal}/runs/{run_id}/feedback/stats")
    assert stats.json() == {"run_id": run_id, "total": 2, "positive": 1, "negative": 1}
    listed = alice.get(f"/api/runs/{run_id}/feedback").json()
    assert {(f["user_id"], f["rating"], f["comment"]) for f in listed} == {
        ("alice-here", 1, "great"),
        ("bob@example.com", -1, None),
    }
    # Bob's verdict on Alice's run does not open her thread to him.
    assert _client_for("bob@example.com").get(f"/api/runs/{run_id}/feedback").status_code == 404


def test_feedback_rows_that_cannot_be_stored_are_named_and_the_rest_imported(source, tmp_path, delta_process):
    tag = source.normal.split("-")[1]
    source.db.insert(
        "feedback",
        [
            _feedback_row(f"x1-{tag}", f"r3-{tag}", source.normal, "u-alice", 1),  # a reservation, not a run
            _feedback_row(f"x2-{tag}", f"r1-{tag}", source.legacy, "u-carol", 1),  # not its run's thread
            _feedback_row(f"x3-{tag}", f"r2-{tag}", source.normal, "u-carol", 0),
            _feedback_row(
                f"x4-{tag}", f"r1-{tag}", source.normal, "u-carol", 1
            ),  # carol is alice here: a second verdict
        ],
    )
    path = tmp_path / "users.json"
    path.write_text(json.dumps({"u-alice": "alice-here", "u-carol": "alice-here"}))
    get_user_model().objects.create_user(username="alice-here")

    output = run_import(source, "--users", str(path), "--create-users")

    assert summary(output)["feedback"] == (7, 3, 0, 4)
    for problem in (
        f"feedback x1-{tag}: run r3-{tag} was not imported",
        f"feedback x2-{tag}: run r1-{tag} is not on thread {source.legacy}",
        f"feedback x3-{tag}: rating must be +1 or -1, got 0",
        f"feedback x4-{tag}: its owner already has feedback on run r1-{tag}",
    ):
        assert f"failed: {problem}" in output
    assert Feedback.objects.count() == 3
    again = run_import(source, "--users", str(path))
    assert summary(again)["feedback"] == (7, 0, 3, 4) and Feedback.objects.count() == 3


ENCRYPTION_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "encrypted_project" / "encryption.py"


@pytest.fixture
def handlers(settings, monkeypatch):
    """The encrypted fixture project's handlers (a key per tenant; no tenant, no sealing) for this process."""
    monkeypatch.setenv("ENCRYPTION_MASTER_SECRET", "import-secret")
    settings.DEERFLOW = {**settings.DEERFLOW, "ENCRYPTION": load(f"{ENCRYPTION_FIXTURE}:encryption")}
    close_sync_resources()
    yield
    empty_checkpoint_tables()  # sealed with the fixture's keys: no later test could read them
    empty_store()
    close_sync_resources()


def test_under_custom_handlers_the_import_is_sealed_with_the_context_given(source, user_map, delta_process, handlers):
    with pytest.raises(CommandError, match=r"no tenant in the encryption context.*--context"):
        run_import(source, "--users", user_map, "--create-users")
    out = run_import(source, "--users", user_map, "--create-users", "--context", '{"tenant_id": "acme"}')
    assert "verification failed" not in out
    [stored] = ThreadMeta.objects.filter(pk=source.normal).annotate(t=Cast("metadata", TextField())).values_list("t")
    assert '"enc:' in stored[0] and "acme" in stored[0] and "deerflow_pinned" in stored[0]
    assert ThreadMeta.objects.get(pk=source.normal).metadata["deerflow_pinned"] is True  # opened on read
    assert thread_sealing_context(connection, current_backend().kind, source.normal) == {"tenant_id": "acme"}
    with pytest.raises(CommandError, match="--context must be a JSON object"):
        run_import(source, "--users", user_map, "--context", "acme")
