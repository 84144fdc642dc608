"""Retention policy, report and errors."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.errors import Conflict

Ref = tuple[str, str]  # (checkpoint_ns, checkpoint_id)


class CheckpointProtectedError(Conflict, RuntimeError):
    """An explicitly requested deletion names a protected checkpoint; nothing was deleted (409)."""

    def __init__(self, thread_id: str, checkpoint_id: str, reasons: Iterable[str]) -> None:
        self.checkpoint_id = checkpoint_id
        self.reasons = list(reasons)
        super().__init__(
            f"Refusing to delete checkpoint {checkpoint_id} of thread {thread_id}: it is protected "
            f"({'; '.join(self.reasons)}). Nothing was deleted."
        )


class RetentionConflictError(Conflict, RuntimeError):
    """The thread changed between the plan and its transaction; nothing was changed, retry."""


@dataclass(frozen=True)
class RetentionPolicy:
    """What one pass may do; the defaults delete only metadata-only leaves.

    ``delete_ids`` asks for exactly those checkpoints and their subtrees: no
    shape runs then, and a protected one refuses the whole pass.
    ``released_runs`` are runs whose leftover writes protect nothing: a
    rolled-back run's rollback put the pre-run state back as the head and
    dropped its writes, so a checkpoint it wrote (``metadata["run_id"]``)
    is not kept for owning them; its branch goes like any abandoned one.
    """

    prune_siblings: bool = False
    prune_metadata_only: bool = True
    thin_snapshots: bool = False
    max_delete: int | None = None
    protect_ids: frozenset[str] = frozenset()
    delete_ids: frozenset[str] = frozenset()
    released_runs: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.max_delete is not None and self.max_delete < 0:
            raise ValueError(f"max_delete must be >= 0, got {self.max_delete}")


@dataclass
class RetentionReport:
    """What a pass deleted, thinned and protected (or would, for a dry run), and the bytes saved."""

    thread_id: str
    backend: str
    dry_run: bool
    heads: dict[str, str] = field(default_factory=dict)
    deleted: list[dict[str, str]] = field(default_factory=list)
    protected: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    thinned: list[dict[str, str]] = field(default_factory=list)
    writes_dropped: list[str] = field(default_factory=list)
    kept_snapshots: list[dict[str, str]] = field(default_factory=list)
    rows_deleted: dict[str, int] = field(default_factory=lambda: {"checkpoints": 0, "writes": 0, "blobs": 0})
    bytes_saved: dict[str, int] = field(default_factory=lambda: {"checkpoints": 0, "writes": 0, "blobs": 0})
    max_delete_reached: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.deleted or self.thinned or self.writes_dropped)

    def summary(self) -> dict[str, Any]:
        """Return the report without the per-checkpoint protection listing (API responses)."""
        return {
            "thread_id": self.thread_id,
            "dry_run": self.dry_run,
            "deleted_checkpoint_ids": [d["checkpoint_id"] for d in self.deleted],
            "thinned_snapshots": len(self.thinned),
            "writes_dropped_checkpoint_ids": list(self.writes_dropped),
            "protected_count": len(self.protected),
            "rows_deleted": dict(self.rows_deleted),
            "bytes_saved": {**self.bytes_saved, "total": sum(self.bytes_saved.values())},
            "max_delete_reached": self.max_delete_reached,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "backend": self.backend,
            "heads": self.heads,
            "deleted": self.deleted,
            "protected": self.protected,
            "kept": self.kept,
            "thinned": self.thinned,
            "kept_snapshots": self.kept_snapshots,
        }


# -- planning (no I/O) ----------------------------------------------------------
