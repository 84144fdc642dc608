"""The import, phase by phase: owners, threads, runs, events, feedback, checkpoints, Store items, verification.

Phases run in dependency order (a run needs its thread, an event its run),
each in batches of source rows keyed on the source's ids, so an import
stopped anywhere is finished by running it again, and a second run writes
nothing. ``dry_run`` computes the same counts and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from checkpoints.runtime import sync_resources
from deerflow_site.deerflow_import.checkpoint_copy import thread_checkpoints_import
from deerflow_site.deerflow_import.owners import DEFAULT_NULL_OWNER, OwnerPlan, owner_plan, owners_resolve
from deerflow_site.deerflow_import.records import (
    DryRun,
    Tally,
    ThreadRow,
    events_write,
    feedback_write,
    runs_write,
    thread_row_from_meta,
    threads_write,
)
from deerflow_site.deerflow_import.source import SourceDatabase, json_value, timestamp
from deerflow_site.deerflow_import.store_copy import store_items_import, store_owner_ids, thread_records
from deerflow_site.deerflow_import.verify import Verification, threads_verify

OWNER_IDS_SQL = (
    "SELECT DISTINCT user_id FROM threads_meta",
    "SELECT DISTINCT user_id FROM runs",
    "SELECT DISTINCT user_id FROM feedback",
)
TABLES = ("threads", "runs", "run stand-ins", "events", "checkpoints", "store items", "feedback")
# Called with (phase, rows done, rows in the phase) as a phase starts and after every batch.
Progress = Callable[[str, int, int], None]
Owners = Mapping[str | None, Any]


@dataclass
class ImportOptions:
    """What the command was asked to do."""

    batch_size: int = 500
    dry_run: bool = False
    verify_only: bool = False
    mapping: dict[str, str] = field(default_factory=dict)
    create_users: bool = False
    null_owner: str = DEFAULT_NULL_OWNER


@dataclass
class ImportReport:
    """Counts per table, users created, notes, and the verification (None in a dry run)."""

    tallies: dict[str, Tally] = field(default_factory=lambda: {name: Tally() for name in TABLES})
    users_to_create: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verification: Verification | None = None

    @property
    def ok(self) -> bool:
        return self.verification is None or self.verification.ok


def _quiet(phase: str, done: int, total: int) -> None:
    """Report nothing (the default progress callback)."""


def legacy_thread_rows(source: SourceDatabase, meta_ids: set[str]) -> list[ThreadRow]:
    """Rebuild threads that have checkpoints, runs or events but no ``threads_meta`` row.

    Their metadata comes from DeerFlow's Store-kept thread record when there
    is one, their owner from it or from the thread's oldest run, their title
    from the head checkpoint.
    """
    ids = (source.thread_ids("checkpoints") | source.thread_ids("runs") | source.thread_ids("run_events")) - meta_ids
    if not ids:
        return []
    records = thread_records(source.store()) if source.has_store else {}
    run_owners = source.first_run_owners()
    saver = source.saver() if source.has_checkpoints else None
    return [
        _legacy_row(thread_id, records.get(thread_id) or {}, run_owners.get(thread_id), saver)
        for thread_id in sorted(ids)
    ]


def _legacy_row(
    thread_id: str, record: dict[str, Any], run_owner: str | None, saver: BaseCheckpointSaver | None
) -> ThreadRow:
    head = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}) if saver else None
    values = head.checkpoint.get("channel_values", {}) if head else {}
    moment = timestamp(head.checkpoint["ts"]) if head else None
    title = values.get("title") if isinstance(values.get("title"), str) else ""
    return ThreadRow(
        thread_id=thread_id,
        user_id=record.get("user_id") or run_owner,
        assistant_id=record.get("assistant_id"),
        display_name=record.get("display_name") or title or "",
        status=record.get("status") or "idle",
        metadata=json_value(record.get("metadata"), {}),
        created_at=timestamp(record.get("created_at")) or moment,
        updated_at=timestamp(record.get("updated_at")) or moment,
    )


def _owner_ids(source: SourceDatabase, legacy: list[ThreadRow]) -> set[str | None]:
    ids: set[str | None] = {row["user_id"] for row in source.execute(OWNER_IDS_SQL[0])}
    ids |= {row["user_id"] for row in source.execute(OWNER_IDS_SQL[1])} - {None}
    if "feedback" in source.tables:  # an optional table; a NULL user's feedback is its run owner's
        ids |= {row["user_id"] for row in source.execute(OWNER_IDS_SQL[2])} - {None}
    ids |= {row.user_id for row in legacy}
    if source.has_store:
        ids |= store_owner_ids(source.store())
    return ids


def _batches(rows: list[ThreadRow], size: int) -> Iterator[list[ThreadRow]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def _import_threads(
    source: SourceDatabase,
    legacy: list[ThreadRow],
    owners: Owners,
    report: ImportReport,
    options: ImportOptions,
    progress: Progress,
    dry_run: DryRun | None,
) -> None:
    tally = report.tallies["threads"]
    total = source.count("threads_meta") + len(legacy)
    progress("threads", 0, total)
    for page in source.pages("threads_meta", batch_size=options.batch_size):
        threads_write([thread_row_from_meta(r) for r in page], owners=owners, tally=tally, dry_run=dry_run)
        progress("threads", tally.found, total)
    for batch in _batches(legacy, options.batch_size):
        threads_write(batch, owners=owners, tally=tally, dry_run=dry_run)
        progress("threads", tally.found, total)


def _import_runs_and_events(
    source: SourceDatabase,
    owners: Owners,
    report: ImportReport,
    options: ImportOptions,
    progress: Progress,
    dry_run: DryRun | None,
) -> None:
    runs, stand_ins, events = (report.tallies[name] for name in ("runs", "run stand-ins", "events"))
    _import_pages(
        source,
        "runs",
        runs,
        options,
        progress,
        lambda page: runs_write(page, owners=owners, tally=runs, dry_run=dry_run),
    )
    _import_pages(
        source,
        "run_events",
        events,
        options,
        progress,
        lambda page: events_write(page, tally=events, stand_ins=stand_ins, dry_run=dry_run),
        label="events",
    )


def _import_pages(
    source: SourceDatabase,
    table: str,
    tally: Tally,
    options: ImportOptions,
    progress: Progress,
    write: Callable[[list[dict[str, Any]]], Any],
    *,
    label: str | None = None,
) -> None:
    """Write ``table``'s rows page by page, reporting progress under ``label`` (the table's name by default)."""
    label = label or table
    total = source.count(table)
    progress(label, 0, total)
    for page in source.pages(table, batch_size=options.batch_size):
        write(page)
        progress(label, tally.found, total)


def _import_feedback(
    source: SourceDatabase,
    owners: Owners,
    report: ImportReport,
    options: ImportOptions,
    progress: Progress,
    dry_run: DryRun | None,
) -> None:
    if "feedback" not in source.tables:  # optional: older deployments may lack it
        return
    tally = report.tallies["feedback"]
    _import_pages(
        source,
        "feedback",
        tally,
        options,
        progress,
        lambda page: feedback_write(page, owners=owners, tally=tally, dry_run=dry_run),
    )


def _import_checkpoints(
    source: SourceDatabase, report: ImportReport, options: ImportOptions, progress: Progress
) -> list[str]:
    """Copy every thread's checkpoints; return the threads that have some in the source.

    Always a copy, never an adoption in place: DeerFlow's tables cannot
    share a schema with ours (both create indexes named
    ``uq_runs_thread_active``, ``ix_events_run``, …), and a DeerFlow on its
    own ``postgres_schema`` has its own checkpoint tables there.
    """
    thread_ids = sorted(source.thread_ids("checkpoints"))
    tally = report.tallies["checkpoints"]
    target = sync_resources()
    source_saver = source.saver()
    progress("checkpoints", 0, len(thread_ids))
    for done, thread_id in enumerate(thread_ids, 1):
        thread_checkpoints_import(
            source,
            source_saver=source_saver,
            target_saver=target.saver,
            thread_id=thread_id,
            tally=tally,
            dry_run=options.dry_run,
        )
        if done % options.batch_size == 0 or done == len(thread_ids):
            progress("checkpoints", done, len(thread_ids))
    return thread_ids


def owners_for(source: SourceDatabase, options: ImportOptions, legacy: list[ThreadRow]) -> OwnerPlan:
    """Plan every DeerFlow owner's user (raises OwnerMapError when some have none)."""
    return owner_plan(
        _owner_ids(source, legacy),
        mapping=options.mapping,
        create_users=options.create_users,
        null_owner=options.null_owner,
        emails=source.user_emails(),
    )


def deerflow_import(source: SourceDatabase, options: ImportOptions, progress: Progress = _quiet) -> ImportReport:
    """Import (or, in a dry run, count) everything; then verify the imported threads."""
    report = ImportReport()
    if options.verify_only:
        thread_ids = sorted(source.thread_ids("checkpoints")) if source.has_checkpoints else []
        report.verification = _verify(source, thread_ids, progress)
        return report
    legacy = legacy_thread_rows(source, source.thread_ids("threads_meta"))
    plan = owners_for(source, options, legacy)
    report.users_to_create = plan.to_create
    owners = owners_resolve(plan, create=not options.dry_run)
    dry_run = DryRun() if options.dry_run else None
    _import_threads(source, legacy, owners, report, options, progress, dry_run)
    _import_runs_and_events(source, owners, report, options, progress, dry_run)
    _import_feedback(source, owners, report, options, progress, dry_run)
    thread_ids = _import_checkpoints(source, report, options, progress) if source.has_checkpoints else []
    if source.has_store:
        store_items_import(source.store(), owners=owners, tally=report.tallies["store items"], dry_run=options.dry_run)
        progress("store items", report.tallies["store items"].found, report.tallies["store items"].found)
    if not options.dry_run:
        report.verification = _verify(source, thread_ids, progress)
    return report


def _verify(source: SourceDatabase, thread_ids: list[str], progress: Progress) -> Verification:
    saver = source.saver() if source.has_checkpoints else None
    if saver is None:
        return Verification()
    return threads_verify(saver, thread_ids, progress=lambda done: progress("verify", done, len(thread_ids)))
