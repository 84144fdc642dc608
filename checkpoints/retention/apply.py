"""Apply a retention plan: one transaction of raw SQL on LangGraph's tables."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from langgraph.channels.delta import DeltaChannel

from checkpoints.graphs import DEFAULT_GRAPH_ID
from checkpoints.retention.planner import _Planner
from checkpoints.retention.policy import Ref, RetentionConflictError, RetentionPolicy, RetentionReport
from checkpoints.retention.sql import (
    DANGLING_PARENTS_SQL,
    POSTGRES_DELETE_BLOB_SQL,
    POSTGRES_DROP_SNAPSHOT_MARKER_SQL,
    SQL,
    SQLITE_REWRITE_CHECKPOINT_SQL,
)
from checkpoints.retention.thinning import _SnapshotStore, plan_thinning, replay_channels, replayed_value
from checkpoints.runtime import sync_resources
from checkpoints.storage import (
    SeedKey,
    ThreadTables,
    orphan_counts,
    require_table_backend,
    thread_tables_read,
)


@dataclass
class _Plan:
    """One pass, planned and verified on one read of the thread; applied only if that read still holds."""

    tables: ThreadTables
    planner: _Planner
    report: RetentionReport
    references: dict[str, str]
    drops: dict[SeedKey, str]
    rewrites: dict[Ref, tuple[str, bytes, int]]


def _marker_bytes(tables: ThreadTables, planner: _Planner, drops: Mapping[SeedKey, str]) -> int:
    """PostgreSQL: the JSON text of the inline ``true`` markers that go with the dropped blobs.

    ``"messages": true`` plus its ``, `` separator, in every surviving
    checkpoint at that version (jsonb's text form, as the accounting measures).
    """
    if tables.kind != "postgres" or not drops:
        return 0
    saved = 0
    for row in planner.survivors().values():
        for channel, value in row.values.items():
            if value.snapshot and SeedKey(row.ns, channel, row.versions.get(channel, "")) in drops:
                saved += len(json.dumps(channel)) + len(": true") + (2 if len(row.values) > 1 else 0)
    return saved


class RetentionRun:
    """Plan one thread's pass (reads only), then apply it in a short transaction."""

    def __init__(self, *, thread_id: str, policy: RetentionPolicy, graph_id: str, saver: Any, dry_run: bool = False):
        self.thread_id = thread_id
        self.policy = policy
        self.graph_id = graph_id
        self.saver = saver
        # Verify against the inner saver: the history cache answers from composed entries.
        self.history_saver = getattr(saver, "inner", saver)
        self.dry_run = dry_run

    def plan(self, references: Mapping[str, str]) -> _Plan:
        """Read the thread, protect, choose deletions and verify thinning; write nothing.

        Verifying a snapshot decodes it and replays from the one before (6.6 s
        for 199 snapshots at N = 1,000 on SQLite), so it runs outside the
        write transaction, which on SQLite would block every writer.
        """
        tables = thread_tables_read(thread_id=self.thread_id, serde=self.saver.serde)
        planner = _Planner(tables, self.policy, references)
        planner.protect()
        planner.delete_explicit()
        if not self.policy.delete_ids:
            planner.delete_shapes()
        report = self._report(tables, planner)
        with connection.cursor() as cursor:
            store = _SnapshotStore(tables, self.saver.serde, cursor)
            drops = self._thin(tables, planner, store, report) if self.policy.thin_snapshots else {}
        self._count_deletions(tables, planner, report)
        return _Plan(tables, planner, report, dict(references), drops, store.rewrites)

    def apply(self, plan: _Plan, references: Mapping[str, str]) -> None:
        """Inside the caller's transaction: confirm the planned-on read still holds, then write."""
        current = thread_tables_read(thread_id=self.thread_id, serde=self.saver.serde)
        if current.fingerprint() != plan.tables.fingerprint() or dict(references) != plan.references:
            raise RetentionConflictError(
                f"Thread {self.thread_id} changed while its retention pass was planned; nothing was changed, retry."
            )
        with connection.cursor() as cursor:
            self._apply(cursor, plan)

    def _report(self, tables: ThreadTables, planner: _Planner) -> RetentionReport:
        report = RetentionReport(self.thread_id, tables.kind, self.dry_run, heads=tables.heads())
        report.max_delete_reached = planner.budget_hit
        for ref, shape in planner.deleted.items():
            report.deleted.append({"checkpoint_id": ref[1], "checkpoint_ns": ref[0], "shape": shape})
        report.writes_dropped = [checkpoint_id for _, checkpoint_id in planner.dropped_writes()]
        for ref in sorted(tables.checkpoints):
            entry = {"checkpoint_id": ref[1], "checkpoint_ns": ref[0]}
            if ref in planner.protected:
                report.protected.append({**entry, "reasons": planner.protected[ref]})
            elif ref not in planner.deleted:
                report.kept.append({**entry, "reason": planner.kept_reason(ref)})
        return report

    def _thin(
        self, tables: ThreadTables, planner: _Planner, store: _SnapshotStore, report: RetentionReport
    ) -> dict[SeedKey, str]:
        candidates, kept = plan_thinning(tables, planner)
        specs = replay_channels(self.graph_id) if candidates else {}
        by_holder: dict[str, list[SeedKey]] = defaultdict(list)
        for key, holder in candidates.items():
            by_holder[holder].append(key)
        drops: dict[SeedKey, str] = {}
        for holder, keys in sorted(by_holder.items()):
            verified = self._verify((keys[0].ns, holder), keys, specs, store, kept)
            store.prepare_drop((keys[0].ns, holder), [key.channel for key in verified])
            drops.update({key: holder for key in verified})
        for key, holder in sorted(drops.items()):
            report.thinned.append(
                {"checkpoint_id": holder, "checkpoint_ns": key.ns, "channel": key.channel, "seed": key.key}
            )
            report.bytes_saved["blobs"] += store.saved_bytes(key, holder)
            report.rows_deleted["blobs"] += tables.kind == "postgres"
        report.bytes_saved["checkpoints"] += sum(saved for _, _, saved in store.rewrites.values())
        report.bytes_saved["checkpoints"] += _marker_bytes(tables, planner, drops)
        for key, (holder, reason) in sorted(kept.items()):
            report.kept_snapshots.append({"checkpoint_id": holder, "channel": key.channel, "reason": reason})
        return drops

    def _verify(
        self,
        holder: Ref,
        keys: list[SeedKey],
        specs: Mapping[str, DeltaChannel],
        store: _SnapshotStore,
        kept: dict[SeedKey, tuple[str, str]],
    ) -> list[SeedKey]:
        """Return the keys whose snapshot a replay reproduces exactly; record the others as kept."""
        verified = []
        try:
            stored = store.stored_values(holder, [key.channel for key in keys])
        except Exception as exc:  # an unreadable snapshot stays where it is
            kept.update({key: (holder[1], f"snapshot could not be read: {exc}") for key in keys})
            return []
        for key in keys:
            if (spec := specs.get(key.channel)) is None:
                kept[key] = (holder[1], f"graph {self.graph_id} has no delta channel {key.channel!r} to replay")
                continue
            try:
                same = (
                    replayed_value(self.history_saver, self.thread_id, holder, key.channel, spec) == stored[key.channel]
                )
            except Exception as exc:
                kept[key] = (holder[1], f"replay failed: {exc}")
                continue
            if same:
                verified.append(key)
            else:
                kept[key] = (holder[1], "a replay does not reproduce it (e.g. a fork's or an update's own snapshot)")
        return verified

    def _count_deletions(self, tables: ThreadTables, planner: _Planner, report: RetentionReport) -> None:
        for ref in planner.deleted:
            report.rows_deleted["checkpoints"] += 1
            report.bytes_saved["checkpoints"] += tables.checkpoints[ref].size.bytes
        for ref in [*planner.deleted, *planner.dropped_writes()]:
            writes = tables.write_size(ref)
            report.rows_deleted["writes"] += writes.rows
            report.bytes_saved["writes"] += writes.bytes
        for key in self._garbage_blobs(tables, planner):
            report.rows_deleted["blobs"] += 1
            report.bytes_saved["blobs"] += tables.blobs[key][1].bytes

    def _garbage_blobs(self, tables: ThreadTables, planner: _Planner) -> list[tuple[str, str, str]]:
        """Blobs a deleted checkpoint referenced and no surviving one does (PostgreSQL)."""
        if tables.kind != "postgres" or not planner.deleted:
            return []
        kept = {(row.ns, ch, v) for row in planner.survivors().values() for ch, v in row.versions.items()}
        freed = {
            (tables.checkpoints[ref].ns, ch, v)
            for ref in planner.deleted
            for ch, v in tables.checkpoints[ref].versions.items()
        }
        return sorted(key for key in freed - kept if key in tables.blobs)

    def _apply(self, cursor: Any, plan: _Plan) -> None:
        tables, planner, drops = plan.tables, plan.planner, plan.drops
        sql, thread_id = SQL[tables.kind], self.thread_id
        deleted = [(thread_id, ns, checkpoint_id) for ns, checkpoint_id in planner.deleted]
        consumed = [(thread_id, ns, checkpoint_id) for ns, checkpoint_id in planner.dropped_writes()]
        if deleted or consumed:
            cursor.executemany(sql["delete_writes"], deleted + consumed)
        if deleted:
            cursor.executemany(sql["delete_checkpoint"], deleted)
        blobs = set(self._garbage_blobs(tables, planner))
        if tables.kind == "postgres":
            blobs |= {(key.ns, key.channel, key.key) for key in drops}
            markers = [(key.channel, thread_id, key.ns, key.channel, key.key, key.channel) for key in drops]
            if markers:
                cursor.executemany(POSTGRES_DROP_SNAPSHOT_MARKER_SQL, markers)
            if blobs:
                cursor.executemany(POSTGRES_DELETE_BLOB_SQL, [(thread_id, *key) for key in sorted(blobs)])
        rewrites = [(type_, blob, thread_id, ns, cid) for (ns, cid), (type_, blob, _) in plan.rewrites.items()]
        if rewrites:
            cursor.executemany(SQLITE_REWRITE_CHECKPOINT_SQL, rewrites)
        cursor.execute(DANGLING_PARENTS_SQL, [thread_id])
        if cursor.fetchone()[0] > orphan_counts(tables)["parents"]:
            raise RetentionConflictError(
                f"Thread {thread_id} gained a child of a checkpoint being deleted; nothing was changed, retry."
            )


def _purge_history_cache(saver: Any, thread_id: str) -> None:
    """Drop the thread's delta-history cache entries, if the saver has a cache.

    Entries are keyed by checkpoint id and stay correct after thinning (same
    values); this frees the deleted checkpoints' entries.
    """
    purge = getattr(getattr(saver, "cache", None), "purge_thread", None)
    if callable(purge):
        purge(thread_id)


def thread_checkpoints_prune(
    *,
    thread_id: str,
    policy: RetentionPolicy | None = None,
    references: Mapping[str, str] | Callable[[], Mapping[str, str]] | None = None,
    graph_id: str = DEFAULT_GRAPH_ID,
    dry_run: bool = False,
    guard: Callable[[], None] | None = None,
) -> RetentionReport:
    """Run one retention pass on a thread's checkpoints; see the module docstring.

    ``references`` maps checkpoint ids other records still need to why
    (resume targets, branch parents); a callable is evaluated when planning
    and again inside the write transaction, where ``guard`` runs first (the
    caller's locks and checks). The plan is made on one read; the transaction
    re-reads the thread and writes only if no row changed meanwhile
    (RetentionConflictError otherwise), deleting rows, write rows and blobs
    and rewriting snapshots together on Django's connection. Raises
    UnsupportedBackendError on the memory backend and CheckpointProtectedError
    when ``delete_ids`` names a protected checkpoint.
    """
    require_table_backend()
    policy = policy or RetentionPolicy()
    saver = sync_resources().saver
    run = RetentionRun(thread_id=thread_id, policy=policy, graph_id=graph_id, saver=saver, dry_run=dry_run)

    def resolved() -> Mapping[str, str]:
        return dict((references() if callable(references) else references) or {})

    plan = run.plan(resolved())
    if dry_run or not plan.report.changed:
        return plan.report
    with transaction.atomic():
        if guard is not None:
            guard()
        run.apply(plan, resolved())
        transaction.on_commit(lambda: _purge_history_cache(saver, thread_id))
    return plan.report


# -- who else knows about threads ------------------------------------------------
