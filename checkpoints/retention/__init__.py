"""Retention: delete only checkpoints nobody can need, and thin delta snapshots.

Checkpoints form parent chains that resume, branch and regenerate walk; a
deletion by age or size breaks them silently (reference §3.8). So a pass
first protects, with a reason each: every namespace's head (newest id) and
its whole lineage, explicit protect ids, the references the caller passes in
(resume targets of unfinished runs, other threads' branch parents),
checkpoints owning writes no child consumed (pending state, e.g. an
interrupt) and the lineage of all of those. Then it deletes only the shapes proven safe, leaf first, to a
fixpoint bounded by ``max_delete``: metadata-only leaves (the parent's
channel versions, no writes) and, when asked, off-chain leaf sibling branches.
A checkpoint's writes guard it while no child consumed them (a child that
advanced a channel version did); once every child that consumed them is
deleted, they go too, even when the checkpoint itself stays (a budget cut),
so the next pass does not mistake them for pending state.

Snapshot thinning (delta threads) drops a ``_DeltaSnapshot`` only when (a) it
is not the nearest seed of a retained anchor (a head, a protected checkpoint,
a retained leaf) and (b) a replay from the seed before it reproduces its value
exactly. (b) matters: LangGraph writes a snapshot *instead of* write rows for
a fork's first checkpoint and for a branch starting below foreign pending
writes, and those values cannot be rebuilt; rows are never touched, so every
retained checkpoint materializes identically, replaying further back.

A pass plans on one read (no lock held while snapshots are verified), then
deletes and rewrites with raw SQL on Django's connection in one transaction
that first re-reads the thread and refuses if any row changed. PostgreSQL
blobs are collected over the *surviving* checkpoints' versions: a
metadata-only leaf shares its parent's blobs.
"""

from checkpoints.retention.apply import RetentionRun, thread_checkpoints_prune
from checkpoints.retention.policy import (
    CheckpointProtectedError,
    RetentionConflictError,
    RetentionPolicy,
    RetentionReport,
)
from checkpoints.retention.scope import RetentionScope, register_retention_scope, retention_scope
from checkpoints.retention.thinning import replay_channels, replayed_value

__all__ = [
    "CheckpointProtectedError",
    "RetentionConflictError",
    "RetentionPolicy",
    "RetentionReport",
    "RetentionRun",
    "RetentionScope",
    "register_retention_scope",
    "replay_channels",
    "replayed_value",
    "retention_scope",
    "thread_checkpoints_prune",
]
