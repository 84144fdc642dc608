"""Retention of threads' checkpoints with what only thread and run records know.

``checkpoints.retention`` decides which checkpoints are safe to delete, but a
checkpoint can also be needed by a record outside LangGraph's tables: an
unfinished run that will resume from it (``Run.kwargs["checkpoint_id"]``) or
another thread branched from it (``branch_parent_checkpoint_id``). This module
gathers those references and guards a pass against unfinished runs. It also
registers itself as the retention scope that ``prune_checkpoints`` discovers.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from checkpoints.retention import (
    RetentionPolicy,
    RetentionReport,
    RetentionScope,
    register_retention_scope,
    thread_checkpoints_prune,
)
from checkpoints.storage import require_table_backend
from core.access import scope_of
from core.errors import Conflict, ThreadNotFound
from threads.models import UNFINISHED_STATUSES, ThreadMeta
from threads.selectors import thread_idle_check, thread_rolled_back_runs
from threads.services import thread_delete

PRUNE_STRATEGIES = ("delete", "keep_latest")
# The Platform's keep_latest keeps only the newest checkpoint; ours keeps
# everything something may still need and drops the rest, snapshots included.
KEEP_LATEST_POLICY = RetentionPolicy(prune_siblings=True, prune_metadata_only=True, thin_snapshots=True)


def thread_checkpoint_references(*, thread: ThreadMeta) -> dict[str, str]:
    """Return checkpoint id → why, for the thread's checkpoints other records still need."""
    references: dict[str, str] = {}
    unfinished = thread.runs.filter(status__in=UNFINISHED_STATUSES).values_list("run_id", "kwargs")
    for run_id, kwargs in unfinished:
        if checkpoint_id := (kwargs or {}).get("checkpoint_id"):
            references[str(checkpoint_id)] = f"resume target of unfinished run {run_id}"
    branches = ThreadMeta.objects.filter(metadata__branch_parent_thread_id=thread.thread_id).values_list(
        "thread_id", "metadata__branch_parent_checkpoint_id"
    )
    for branch_id, checkpoint_id in branches:
        if checkpoint_id:
            references.setdefault(str(checkpoint_id), f"branch parent of thread {branch_id}")
    return references


def thread_prune(
    *, thread: ThreadMeta, policy: RetentionPolicy, dry_run: bool = False, expired_at: datetime | None = None
) -> RetentionReport:
    """Run a retention pass on one thread's checkpoints.

    An apply is refused while a run is unfinished (it may resume from, or
    write under, what the pass deletes): checked up front, and again inside
    the write transaction with the thread row locked. A dry run is allowed
    any time and shows such a run's resume target as protected.
    ``expired_at`` (the TTL sweep's claim) also refuses a thread whose
    expiry moved since, i.e. one that was used meanwhile.
    """
    if not dry_run:
        thread_idle_check(thread.thread_id, then="prune its checkpoints after it finishes")
    if policy.prune_siblings and not policy.released_runs:
        # A pass that prunes abandoned branches prunes those of rolled-back runs too: their leftover
        # writes protect nothing (docs/retention.md), whoever asks (the API, the TTL sweep, the command).
        released = thread_rolled_back_runs([thread.thread_id]).get(thread.thread_id, frozenset())
        policy = replace(policy, released_runs=released)

    def guard() -> None:
        row = ThreadMeta.objects.select_for_update().filter(pk=thread.pk).values("expires_at").first()
        thread_idle_check(thread.thread_id, then="prune its checkpoints after it finishes")
        if expired_at is not None and (row is None or row["expires_at"] != expired_at):
            raise Conflict(f"Thread {thread.thread_id} was used after it expired; its TTL starts over.")

    return thread_checkpoints_prune(
        thread_id=thread.thread_id,
        policy=policy,
        references=lambda: thread_checkpoint_references(thread=thread),
        graph_id=thread.assistant_id,
        dry_run=dry_run,
        guard=guard,
    )


def _owned_threads(*, owner, thread_ids: list[str]) -> list[ThreadMeta]:
    """Return the caller's threads (its scope's, with custom auth) in request order; any other id is a 404."""
    found = {t.thread_id: t for t in ThreadMeta.objects.filter(scope_of(owner).q(), thread_id__in=thread_ids)}
    for thread_id in thread_ids:
        if thread_id not in found:
            raise ThreadNotFound(thread_id)
    return [found[thread_id] for thread_id in dict.fromkeys(thread_ids)]


def threads_prune(*, owner, thread_ids: list[str], strategy: str, dry_run: bool = False) -> dict[str, Any]:
    """Prune the owner's threads (LangGraph Platform ``POST /threads/prune``); return the response body.

    ``delete`` deletes the threads entirely; ``keep_latest`` runs the safe
    retention pass with sibling pruning and snapshot thinning. Every id is
    checked (404) and every thread's runs (409) before anything is done.
    """
    threads = _owned_threads(owner=owner, thread_ids=thread_ids)
    if not dry_run:
        for thread in threads:
            thread_idle_check(thread.thread_id, then="prune it after the run finishes")
    if strategy == "delete":
        if not dry_run:
            for thread in threads:
                thread_delete(thread=thread)
        return {
            "pruned_count": len(threads),
            "strategy": strategy,
            "dry_run": dry_run,
            "thread_ids": [t.thread_id for t in threads],
        }
    require_table_backend()
    reports = [thread_prune(thread=t, policy=KEEP_LATEST_POLICY, dry_run=dry_run) for t in threads]
    return {
        "pruned_count": len(reports),
        "strategy": strategy,
        "dry_run": dry_run,
        "threads": [report.summary() for report in reports],
    }


def _thread_ids() -> list[str]:
    return list(ThreadMeta.objects.order_by("thread_id").values_list("thread_id", flat=True))


def _prune_by_id(*, thread_id: str, policy: RetentionPolicy, dry_run: bool = False) -> RetentionReport:
    thread = ThreadMeta.objects.filter(pk=thread_id).first()
    if thread is None:
        raise ThreadNotFound(thread_id)
    return thread_prune(thread=thread, policy=policy, dry_run=dry_run)


register_retention_scope(RetentionScope(thread_ids=_thread_ids, prune=_prune_by_id))
