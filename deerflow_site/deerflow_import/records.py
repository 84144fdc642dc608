"""Threads, runs, run events and feedback: DeerFlow rows → our models, one transaction per batch.

Every batch first asks which of its source keys are already here (thread
id, run id, (thread, seq), feedback id) and inserts only the rest, so a rerun after a
complete or interrupted import adds nothing twice. ``bulk_create`` stamps
``auto_now`` fields with the current time; the source's timestamps are put
back with one ``bulk_update`` in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from checkpoints.graphs import DEFAULT_GRAPH_ID, registered_graph
from core.validation import thread_id_problem
from deerflow_site.deerflow_import.source import json_value, timestamp
from runs.models import CancelAction, Feedback, Run, RunEvent
from threads.models import RunStatus, ThreadMeta, ThreadStatus
from threads.services import clean_metadata

# A run DeerFlow still had pending or running: its executor is gone, so it
# arrives finished (DeerFlow's own startup recovery does the same), never
# as an active run our workers would claim.
IMPORTED_ACTIVE_ERROR = "Imported from DeerFlow before this run reached a durable final state."
ACTIVE_STOP_REASON = "orphan_recovered"
# DeerFlow's thread status "running" has no run behind it here.
THREAD_STATUSES = {
    "idle": ThreadStatus.IDLE,
    "running": ThreadStatus.ERROR,
    "error": ThreadStatus.ERROR,
    "interrupted": ThreadStatus.INTERRUPTED,
}
# Events of a run DeerFlow has no row for (a branch's seeded feed uses
# synthetic run ids) hang on a stand-in run carrying this metadata.
STAND_IN_METADATA = {"deerflow_import": "stand-in for events whose run has no row in DeerFlow"}
BATCH_SQL_ROWS = 500


@dataclass
class Tally:
    """What one table's import found, wrote, skipped as already present, and failed on."""

    found: int = 0
    imported: int = 0
    present: int = 0
    failed: int = 0
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        self.failed += 1
        if len(self.problems) < 20:
            self.problems.append(problem)


@dataclass
class DryRun:
    """What a dry run would have written so far, so later phases count as if it had."""

    threads: dict[str, Any] = field(default_factory=dict)  # thread id → owner
    runs: set[str] = field(default_factory=set)


@dataclass
class ThreadRow:
    """A thread as DeerFlow knows it, from ``threads_meta`` or rebuilt for a legacy thread."""

    thread_id: str
    user_id: str | None
    assistant_id: str | None
    display_name: str
    status: str
    metadata: dict[str, Any]
    created_at: datetime | None
    updated_at: datetime | None


def graph_id_for(assistant_id: str | None) -> str:
    """Return the registered graph that reads a DeerFlow assistant's threads (else the default)."""
    spec = registered_graph(assistant_id) if assistant_id else None
    return spec.graph_id if spec else DEFAULT_GRAPH_ID


def thread_row_from_meta(row: Mapping[str, Any]) -> ThreadRow:
    return ThreadRow(
        thread_id=row["thread_id"],
        user_id=row["user_id"],
        assistant_id=row.get("assistant_id"),
        display_name=row.get("display_name") or "",
        status=row["status"] or "idle",
        metadata=json_value(row["metadata_json"], {}),
        created_at=timestamp(row["created_at"]),
        updated_at=timestamp(row["updated_at"]),
    )


def _thread_model(row: ThreadRow, owner) -> ThreadMeta:
    metadata = clean_metadata(row.metadata if isinstance(row.metadata, dict) else {})
    graph_id = graph_id_for(row.assistant_id)
    if row.assistant_id and row.assistant_id != graph_id:
        metadata.setdefault("deerflow_assistant_id", row.assistant_id)
    return ThreadMeta(
        thread_id=row.thread_id,
        owner=owner,
        assistant_id=graph_id,
        display_name=row.display_name[:256],
        status=THREAD_STATUSES.get(row.status, ThreadStatus.IDLE),
        metadata=metadata,
        created_at=row.created_at or timezone.now(),
        updated_at=row.updated_at or row.created_at or timezone.now(),
        state_updated_at=(row.updated_at or row.created_at) if row.display_name else None,
    )


def _bulk_insert(model, objects: list, stamped: tuple[str, ...]) -> None:
    """Insert ``objects``, keeping the source's values of the ``auto_now``/``auto_now_add`` fields.

    ``bulk_create`` overwrites those fields on the instances too, so the
    values are taken first and written back with one ``bulk_update``.
    """
    if not objects:
        return
    kept = [[getattr(obj, name) for name in stamped] for obj in objects]
    model.objects.bulk_create(objects, batch_size=BATCH_SQL_ROWS)
    for obj, values in zip(objects, kept, strict=True):
        for name, value in zip(stamped, values, strict=True):
            setattr(obj, name, value)
    model.objects.bulk_update(objects, stamped, batch_size=BATCH_SQL_ROWS)


def threads_write(
    rows: list[ThreadRow], *, owners: Mapping[str | None, Any], tally: Tally, dry_run: DryRun | None
) -> None:
    """Insert the batch's threads that are not here yet (``dry_run``: only note them)."""
    tally.found += len(rows)
    present = set(ThreadMeta.objects.filter(pk__in=[r.thread_id for r in rows]).values_list("pk", flat=True))
    fresh = []
    for row in rows:
        if row.thread_id in present:
            tally.present += 1
        elif problem := thread_id_problem(row.thread_id):
            tally.fail(problem)
        else:
            fresh.append(_thread_model(row, owners[row.user_id]))
    tally.imported += len(fresh)
    if dry_run is not None:
        dry_run.threads.update((t.thread_id, t.owner) for t in fresh)
    elif fresh:
        with transaction.atomic():
            _bulk_insert(ThreadMeta, fresh, ("created_at", "updated_at"))


def _status(row: Mapping[str, Any]) -> tuple[str, str, str]:
    """Return (status, error, stop_reason), finishing a run DeerFlow left active."""
    status, error, stop_reason = row["status"] or "pending", row.get("error") or "", row.get("stop_reason") or ""
    if status in {RunStatus.PENDING, RunStatus.RUNNING}:
        return RunStatus.ERROR, error or IMPORTED_ACTIVE_ERROR, stop_reason or ACTIVE_STOP_REASON
    return status, error, stop_reason


def _run_model(row: Mapping[str, Any], *, thread_id: str, owner) -> Run:
    status, error, stop_reason = _status(row)
    created_at = timestamp(row["created_at"]) or timezone.now()
    updated_at = timestamp(row["updated_at"]) or created_at
    cancel_action = row.get("cancel_action") or ""
    return Run(
        run_id=row["run_id"],
        thread_id=thread_id,
        owner=owner,
        assistant_id=graph_id_for(row.get("assistant_id")),
        status=status,
        multitask_strategy=row.get("multitask_strategy") or "reject",
        metadata=json_value(row.get("metadata_json"), {}),
        kwargs=json_value(row.get("kwargs_json"), {}),
        error=error,
        stop_reason=stop_reason,
        cancel_action=cancel_action if cancel_action in CancelAction.values else "",
        cancel_requested_at=timestamp(row.get("cancel_requested_at")),
        model_name=row.get("model_name") or "",
        total_input_tokens=row.get("total_input_tokens") or 0,
        total_output_tokens=row.get("total_output_tokens") or 0,
        total_tokens=row.get("total_tokens") or 0,
        llm_call_count=row.get("llm_call_count") or 0,
        token_usage_by_model=json_value(row.get("token_usage_by_model"), {}),
        token_usage_by_caller={
            "lead_agent": row.get("lead_agent_tokens") or 0,
            "subagent": row.get("subagent_tokens") or 0,
            "middleware": row.get("middleware_tokens") or 0,
        },
        message_count=row.get("message_count") or 0,
        first_human_message=row.get("first_human_message") or "",
        last_ai_message=row.get("last_ai_message") or "",
        created_at=created_at,
        updated_at=updated_at,
        finished_at=updated_at if status not in {RunStatus.PENDING, RunStatus.RUNNING} else None,
    )


def _thread_owners(thread_ids: set[str], dry_run: DryRun | None) -> dict[str, Any]:
    """Return the owner of each listed thread that is here (or that the dry run would have written)."""
    owners = {t.thread_id: t.owner for t in ThreadMeta.objects.filter(pk__in=thread_ids).select_related("owner")}
    if dry_run is not None:
        owners |= {t: dry_run.threads[t] for t in thread_ids if t in dry_run.threads}
    return owners


def runs_write(
    rows: list[dict[str, Any]], *, owners: Mapping[str | None, Any], tally: Tally, dry_run: DryRun | None
) -> None:
    """Insert the batch's runs that are not here yet; DeerFlow's non-run reservations are skipped.

    A run without a DeerFlow owner belongs to its thread's owner.
    """
    rows = [row for row in rows if (row.get("operation_kind") or "run") == "run"]
    tally.found += len(rows)
    present = set(Run.objects.filter(pk__in=[r["run_id"] for r in rows]).values_list("pk", flat=True))
    thread_owners = _thread_owners({r["thread_id"] for r in rows}, dry_run)
    fresh = []
    for row in rows:
        if row["run_id"] in present:
            tally.present += 1
        elif row["thread_id"] not in thread_owners:
            tally.fail(f"run {row['run_id']}: thread {row['thread_id']} was not imported")
        else:
            owner = owners[row["user_id"]] if row["user_id"] else thread_owners[row["thread_id"]]
            fresh.append(_run_model(row, thread_id=row["thread_id"], owner=owner))
    tally.imported += len(fresh)
    if dry_run is not None:
        dry_run.runs.update(run.run_id for run in fresh)
    elif fresh:
        with transaction.atomic():
            _bulk_insert(Run, fresh, ("created_at", "updated_at"))


def event_content(row: Mapping[str, Any], metadata: Mapping[str, Any]) -> Any:
    """Return an event's content: DeerFlow stores structured content as JSON text and flags it."""
    content = row["content"]
    if isinstance(content, str) and (metadata.get("content_is_json") or metadata.get("content_is_dict")):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


def _event_model(row: Mapping[str, Any]) -> RunEvent:
    metadata = json_value(row.get("event_metadata"), {})
    return RunEvent(
        thread_id=row["thread_id"],
        run_id=row["run_id"],
        event_type=row["event_type"],
        category=row["category"],
        content=event_content(row, metadata),
        metadata=metadata,
        seq=row["seq"],
        created_at=timestamp(row["created_at"]) or timezone.now(),
    )


def _stand_in_runs(rows: list[dict[str, Any]], known_runs: set[str], thread_owners: Mapping[str, Any]) -> list[Run]:
    """Return a finished run for each run id the batch's events name that has no row anywhere."""
    stand_ins: dict[str, Run] = {}
    for row in rows:
        run_id = row["run_id"]
        if run_id in known_runs or run_id in stand_ins or row["thread_id"] not in thread_owners:
            continue
        moment = timestamp(row["created_at"]) or timezone.now()
        stand_ins[run_id] = Run(
            run_id=run_id,
            thread_id=row["thread_id"],
            owner=thread_owners[row["thread_id"]],
            assistant_id=DEFAULT_GRAPH_ID,
            status=RunStatus.SUCCESS,
            metadata=dict(STAND_IN_METADATA),
            created_at=moment,
            updated_at=moment,
            finished_at=moment,
        )
    return list(stand_ins.values())


def events_write(rows: list[dict[str, Any]], *, tally: Tally, stand_ins: Tally, dry_run: DryRun | None) -> None:
    """Insert the batch's events not here yet (keyed by thread and seq), with stand-in runs where needed."""
    tally.found += len(rows)
    thread_ids = {r["thread_id"] for r in rows}
    present = set(
        RunEvent.objects.filter(thread_id__in=thread_ids, seq__in={r["seq"] for r in rows}).values_list(
            "thread_id", "seq"
        )
    )
    thread_owners = _thread_owners(thread_ids, dry_run)
    fresh_rows = []
    for row in rows:
        if (row["thread_id"], row["seq"]) in present:
            tally.present += 1
        elif row["thread_id"] not in thread_owners:
            tally.fail(f"event {row['thread_id']}#{row['seq']}: thread was not imported")
        else:
            fresh_rows.append(row)
    known_runs = set(Run.objects.filter(pk__in={r["run_id"] for r in fresh_rows}).values_list("pk", flat=True))
    known_runs |= dry_run.runs if dry_run is not None else set()
    extra_runs = _stand_in_runs(fresh_rows, known_runs, thread_owners)
    fresh = [_event_model(row) for row in fresh_rows]
    tally.imported += len(fresh)
    stand_ins.found += len(extra_runs)
    stand_ins.imported += len(extra_runs)
    if dry_run is not None:
        dry_run.runs.update(run.run_id for run in extra_runs)
        return
    with transaction.atomic():
        _bulk_insert(Run, extra_runs, ("created_at", "updated_at"))
        _bulk_insert(RunEvent, fresh, ("created_at",))


def _feedback_problem(row: Mapping[str, Any], run: tuple[str, Any] | None, key: tuple[str, Any], taken: set) -> str:
    """Return why a feedback row cannot be stored here ("" if it can)."""
    if run is None:
        return f"feedback {row['feedback_id']}: run {row['run_id']} was not imported"
    if run[0] != row["thread_id"]:
        return f"feedback {row['feedback_id']}: run {row['run_id']} is not on thread {row['thread_id']}"
    if row.get("rating") not in (1, -1):
        return f"feedback {row['feedback_id']}: rating must be +1 or -1, got {row.get('rating')!r}"
    if key in taken:
        return f"feedback {row['feedback_id']}: its owner already has feedback on run {row['run_id']}"
    return ""


def _feedback_runs(run_ids: set[str], dry_run: DryRun | None, rows: list[dict[str, Any]]) -> dict[str, tuple[str, Any]]:
    """Return (thread id, owner) of each named run that is here (or that the dry run would have written)."""
    runs = {r.run_id: (r.thread_id, r.owner) for r in Run.objects.filter(pk__in=run_ids).select_related("owner")}
    if dry_run is not None:
        # Not written, so not readable: the source's thread stands in, the thread's owner for a NULL user.
        runs |= {
            r["run_id"]: (r["thread_id"], dry_run.threads.get(r["thread_id"]))
            for r in rows
            if r["run_id"] in dry_run.runs and r["run_id"] not in runs
        }
    return runs


def feedback_write(
    rows: list[dict[str, Any]], *, owners: Mapping[str | None, Any], tally: Tally, dry_run: DryRun | None
) -> None:
    """Insert the batch's feedback not here yet (keyed by feedback id); a NULL user's is the run owner's.

    A row whose run was not imported, that names another thread than its
    run's, rates other than ±1, or repeats an owner's verdict on a run (two
    DeerFlow users mapped to one person) fails, named; the rest are stored.
    """
    tally.found += len(rows)
    present = set(Feedback.objects.filter(pk__in=[r["feedback_id"] for r in rows]).values_list("pk", flat=True))
    runs = _feedback_runs({r["run_id"] for r in rows}, dry_run, rows)
    taken: set[tuple[str, Any]] = set(Feedback.objects.filter(run_id__in=runs).values_list("run_id", "owner_id"))
    fresh = []
    for row in rows:
        if row["feedback_id"] in present:
            tally.present += 1
            continue
        run = runs.get(row["run_id"])
        owner = owners[row["user_id"]] if row.get("user_id") else (run[1] if run else None)
        key = (row["run_id"], getattr(owner, "pk", None))
        if problem := _feedback_problem(row, run, key, taken):
            tally.fail(problem)
            continue
        taken.add(key)
        fresh.append(
            Feedback(
                feedback_id=row["feedback_id"],
                run_id=row["run_id"],
                thread_id=row["thread_id"],
                owner=owner,
                rating=row["rating"],
                comment=row.get("comment") or "",
                message_id=row.get("message_id") or "",
                created_at=timestamp(row.get("created_at")) or timezone.now(),
            )
        )
    tally.imported += len(fresh)
    if dry_run is None and fresh:
        with transaction.atomic():
            Feedback.objects.bulk_create(fresh, batch_size=BATCH_SQL_ROWS)
